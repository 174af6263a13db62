package main

import (
	"errors"
	"fmt"
	"path"
	"sync"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/wire"
)

// lsCommand lists a directory.
func lsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list a directory (default: the cell root)",
		ArgsUsage: "[NAME]",
		Description: "Prints one child a line, directories with a trailing /. A file is listed as itself. " +
			"With -l each line is MODE SIZE GENERATION LOCK-GENERATION HOLDERS MTIME NAME, where MODE is d (directory) or -, " +
			"then e (ephemeral) or -, then the lock: x (exclusive), s (shared) or - (free); " +
			"GENERATION is the content generation. " +
			"A large directory is listed in pages of up to 4096 names, each printed as it arrives " +
			"(with -l, columns are aligned within a page); --json prints one document once the listing is whole.\n\n" +
			"With -R ls also lists every directory below NAME, depth first in name order, each under a " +
			"\"DIR:\" line (its full name) after a blank line, as ls(1) -R does; with --json the entries of " +
			"all of them come in one list, named relative to NAME (sub/file). Directories deleted during " +
			"the listing are skipped." +
			"\n\nExamples: lockcell ls -l /ls/local/cfg; lockcell ls -R svc",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "long form: mode, size, generation, mtime"},
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"R"}, Usage: "list the directories below NAME too"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 1); err != nil {
				return err
			}
			name := e.root()
			if c.NArg() == 1 {
				var err error
				if name, err = e.name("ls", c.Args().First()); err != nil {
					return err
				}
			}
			long, recursive := c.Bool("long"), c.Bool("recursive")
			// People see each page as it arrives; scripts get one JSON
			// document, so it is printed only once the listing is whole.
			all := []lsEntry{}
			shown := "" // the directory whose entries are being printed
			err := e.walk(name, "", long, recursive, func(dir, rel string, page []lsEntry) error {
				if e.json {
					for _, ent := range page {
						ent.Name = path.Join(rel, ent.Name)
						all = append(all, ent)
					}
					return nil
				}
				if recursive && dir != shown && !(len(page) == 1 && page[0].self) {
					sep := "\n"
					if shown == "" {
						sep = ""
					}
					if _, err := fmt.Fprintf(e.stdout, "%s%s:\n", sep, dir); err != nil {
						return err
					}
					shown = dir
				}
				return e.printList(page, long)
			})
			if err != nil {
				return fail("ls", name, err)
			}
			if e.json {
				out := struct {
					Name    string    `json:"name"`
					Entries []lsEntry `json:"entries"`
				}{name, all}
				return e.printJSON(out)
			}
			return nil
		},
	}
}

// lsEntry is one line of ls; Stat only with -l.
type lsEntry struct {
	Name string    `json:"name"`
	Dir  bool      `json:"dir"`
	Stat *statJSON `json:"stat,omitempty"`

	st   client.Stat
	self bool // the file ls was pointed at, listed as itself
}

// lsWorkers bounds the stat calls ls -l runs at once: one round trip per
// child in sequence would make big directories slow, but an unbounded
// burst would flood the master.
const lsWorkers = 8

// list hands emit the children of name (or name itself when it is a
// file) a page at a time, with their stats when long: a directory of any
// size is listed in pages the cell bounds, never held whole.
func (e *env) list(name string, long bool, emit func([]lsEntry) error) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	after := ""
	for {
		dents, more, err := h.ReadDirPage(e.ctx, after, 0)
		if errors.Is(err, client.ErrNotDir) && after == "" {
			// Like ls(1): a file lists as itself.
			ent := lsEntry{Name: wire.Base(name), self: true}
			if long {
				if ent.st, err = h.GetStat(e.ctx); err != nil {
					return err
				}
				sj := toStatJSON(name, ent.st)
				ent.Stat = &sj
			}
			return emit([]lsEntry{ent})
		}
		if err != nil {
			return err
		}
		ents := make([]lsEntry, len(dents))
		for i, d := range dents {
			ents[i] = lsEntry{Name: d.Name, Dir: d.Dir}
		}
		if long {
			if ents, err = e.statEntries(name, ents); err != nil {
				return err
			}
		}
		if err := emit(ents); err != nil {
			return err
		}
		if !more {
			return nil
		}
		after = dents[len(dents)-1].Name
	}
}

// walk hands emit the listing of dir, a page at a time (list), and with
// recursive then walks each of its subdirectories in name order; rel is
// dir's name relative to where the walk began. Only the names of one
// directory's subdirectories are held at a time per level, never a whole
// listing.
func (e *env) walk(dir, rel string, long, recursive bool, emit func(dir, rel string, page []lsEntry) error) error {
	var subs []string
	err := e.list(dir, long, func(page []lsEntry) error {
		for _, ent := range page {
			if ent.Dir && recursive {
				subs = append(subs, ent.Name)
			}
		}
		return emit(dir, rel, page)
	})
	if err != nil {
		return err
	}
	for _, sub := range subs {
		err := e.walk(dir+"/"+sub, path.Join(rel, sub), long, true, emit)
		if err != nil && !errors.Is(err, client.ErrNotFound) { // deleted meanwhile: skipped
			return err
		}
	}
	return nil
}

// statEntries fills in the stats of dir's children ents, lsWorkers at a
// time, leaving out children deleted since they were listed.
func (e *env) statEntries(dir string, ents []lsEntry) ([]lsEntry, error) {
	errs := make([]error, len(ents))
	gone := make([]bool, len(ents))
	sem := make(chan struct{}, lsWorkers)
	var wg sync.WaitGroup
	for i := range ents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			child := dir + "/" + ents[i].Name
			st, err := e.stat(child)
			switch {
			case errors.Is(err, client.ErrNotFound):
				gone[i] = true // deleted since it was listed: not there any more
			case err != nil:
				errs[i] = err
			default:
				sj := toStatJSON(child, st)
				ents[i].st, ents[i].Stat = st, &sj
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := ents[:0]
	for i, ent := range ents {
		if !gone[i] {
			out = append(out, ent)
		}
	}
	return out, nil
}

// printList prints one page of ls's human output; with long, columns are
// aligned within the page.
func (e *env) printList(ents []lsEntry, long bool) error {
	if !long {
		for _, ent := range ents {
			if _, err := fmt.Fprintln(e.stdout, displayName(ent)); err != nil {
				return err
			}
		}
		return nil
	}
	// Right-aligned numbers, like ls(1); widths from this listing.
	// Columns: MODE SIZE CONTENT-GEN LOCK-GEN HOLDERS MTIME NAME.
	var wSize, wGen, wLock, wHold, wTime int
	for _, ent := range ents {
		wSize = max(wSize, len(fmt.Sprint(ent.st.Size)))
		wGen = max(wGen, len(fmt.Sprint(ent.st.ContentGen)))
		wLock = max(wLock, len(fmt.Sprint(ent.st.LockGen)))
		wHold = max(wHold, len(fmt.Sprint(ent.st.LockHolders)))
		wTime = max(wTime, len(timeText(ent.st.MTime)))
	}
	for _, ent := range ents {
		st := ent.st
		if _, err := fmt.Fprintf(e.stdout, "%s  %*d  %*d  %*d  %*d  %-*s  %s\n", modeText(st), wSize, st.Size, wGen, st.ContentGen,
			wLock, st.LockGen, wHold, st.LockHolders, wTime, timeText(st.MTime), displayName(ent)); err != nil {
			return err
		}
	}
	return nil
}

func displayName(ent lsEntry) string {
	if ent.Dir {
		return ent.Name + "/"
	}
	return ent.Name
}

// modeText is ls -l's MODE column.
func modeText(st client.Stat) string {
	m := []byte("---")
	if st.Dir {
		m[0] = 'd'
	}
	if st.Ephemeral {
		m[1] = 'e'
	}
	switch st.LockMode {
	case client.Exclusive:
		m[2] = 'x'
	case client.Shared:
		m[2] = 's'
	}
	return string(m)
}
