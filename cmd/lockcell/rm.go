package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// rmCommand deletes files and directories.
func rmCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete files and empty directories",
		ArgsUsage: "NAME...",
		Description: "A directory must be empty unless -r. Stops at the first failure. " +
			"With --json prints {\"removed\": [names]}.\n\n" +
			"rm -r asks for confirmation (y/N, on stderr) when stdin is a terminal; otherwise (scripts, " +
			"pipes) it refuses to run without --yes (exit 2).\n\n" +
			"Examples: lockcell rm svc/ready; lockcell rm -r --yes old/tree",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r", "R"},
				Usage: "delete directories and everything under them"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "with -r: do not ask for confirmation"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, -1); err != nil {
				return err
			}
			names, err := e.names("rm", c.Args().Slice())
			if err != nil {
				return err
			}
			recursive := c.Bool("recursive")
			for _, name := range names {
				if recursive && name == e.root() {
					// The cell would refuse to delete the root only after
					// everything under it was gone.
					return &opError{op: "rm", path: name, err: errors.New("refusing to remove the whole cell")}
				}
			}
			if recursive && !c.Bool("yes") {
				if !isTerminal(e.stdin) {
					return usageErrorf(c, "-r needs --yes when stdin is not a terminal (nothing was removed)")
				}
				if !e.confirm(fmt.Sprintf("rm: remove %s and everything under it?", strings.Join(names, ", "))) {
					return &exitStatus{code: exitError, kind: "canceled", err: errors.New("rm: not confirmed; nothing was removed")}
				}
			}
			removed := []string{}
			for _, name := range names {
				if err := e.remove(name, recursive); err != nil {
					oe := &opError{op: "rm", path: name, err: err}
					if errors.Is(err, client.ErrNotEmpty) && !recursive {
						oe.hint = "use rm -r to delete it with its contents"
					}
					return oe
				}
				removed = append(removed, name)
			}
			if e.json {
				return e.printJSON(struct {
					Removed []string `json:"removed"`
				}{removed})
			}
			return nil
		},
	}
}

// remove deletes name, and with recursive everything under it first
// (depth first: the cell deletes only empty directories).
func (e *env) remove(name string, recursive bool) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read|client.Write)
	if err != nil {
		return err
	}
	defer h.Close()
	// A page at a time: a directory of any size is emptied without
	// holding its whole listing.
	for after := ""; recursive; {
		ents, more, err := h.ReadDirPage(e.ctx, after, 0)
		if errors.Is(err, client.ErrNotDir) {
			break // a file: nothing under it
		}
		if err != nil {
			return err
		}
		for _, ent := range ents {
			// A child someone else deleted meanwhile is as good as ours.
			if err := e.remove(name+"/"+ent.Name, true); err != nil && !errors.Is(err, client.ErrNotFound) {
				return err
			}
		}
		if !more {
			break
		}
		after = ents[len(ents)-1].Name
	}
	return h.Delete(e.ctx)
}

// confirm asks question on stderr and reads the answer from stdin: only
// y or yes (any case) is a yes.
func (e *env) confirm(question string) bool {
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
