package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// exitHistoryCompacted is watch --recursive's exit status when the cell's
// history no longer reaches back to --from (or a watch fell that far
// behind): re-read, then watch from now.
const exitHistoryCompacted = 65

const recursiveWatchHelp = "With --recursive (-r), NAME is a directory and the watch reports every change below it " +
	"at any depth: created, contents (replaced), deleted and lock-acquired, each on one line " +
	"TIME KIND PATH gen=G pos=P, where G is the node's instance (created, deleted), content generation " +
	"(contents) or lock generation (lock-acquired), and P the change's position in the cell's history. " +
	"While nothing changes it prints \"TIME progress pos=P\" every few seconds. Changes to nodes you may " +
	"not read are not reported. Save the last P you handled and run " +
	"\"lockcell watch -r --from P NAME\" later (another process, after a fail-over) to go on with the next " +
	"change, none missed or repeated. If the cell's history no longer reaches back to P it exits 65 " +
	"(JSON code \"history_compacted\"): re-read NAME, then watch without --from. --count counts changes, " +
	"not progress lines. With --json one object per line: {\"time\", \"kind\", \"path\", \"generation\", \"position\"} " +
	"(a first {\"kind\": \"watching\", \"position\"} line gives the starting position).\n\n" +
	"Example: lockcell watch -r --json --from \"$(cat pos)\" svc"

// treeEvent is one line of watch --recursive --json.
type treeEvent struct {
	Time       string `json:"time"`
	Kind       string `json:"kind"`
	Path       string `json:"path,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Position   string `json:"position,omitempty"`
}

// watchTree is watch --recursive: the changes below the directory name.
func (e *env) watchTree(c *cli.Context, name string, count int) error {
	var opts []client.WatchOption
	from := "now"
	if c.IsSet("from") {
		p, err := client.ParsePosition(c.String("from"))
		if err != nil {
			return usageErrorf(c, "--from: %v", err)
		}
		opts = append(opts, client.FromPosition(p))
		from = p.String()
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT)
	defer signal.Stop(sigc)
	cl, err := e.client()
	if err != nil {
		return fail("watch", name, err)
	}
	compacted := func(err error) error {
		return &exitStatus{code: exitHistoryCompacted, kind: "history_compacted",
			err: fmt.Errorf("watch %s: %w", name, err)}
	}
	h, err := cl.Open(e.ctx, name, client.Read|client.Directory)
	if err != nil {
		return fail("watch", name, err)
	}
	defer h.Close()
	// --timeout, when given, bounds the whole watch; the default bounds
	// only the open (a watch runs until Ctrl-C).
	wctx := e.ctx
	if !e.timeoutSet {
		var cancel context.CancelFunc
		wctx, cancel = context.WithCancel(c.Context)
		defer cancel()
	}
	w, err := h.WatchSubtree(wctx, opts...)
	if errors.Is(err, client.ErrHistoryCompacted) {
		return compacted(err)
	}
	if err != nil {
		return fail("watch", name, err)
	}
	defer w.Stop()
	if e.json {
		if err := e.printJSON(treeEvent{Time: timeText(time.Now()), Kind: "watching", Path: name, Position: from}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stderr, "watching %s from %s\n", name, from)
	}
	var deadline <-chan struct{}
	if e.timeoutSet {
		deadline = e.ctx.Done()
	}
	seen := 0
	timedOut := func() error {
		return &exitStatus{code: exitTimeout, kind: "timeout",
			err: fmt.Errorf("watch %s: --timeout %v ended the watch after %d change(s)", name, e.timeout, seen)}
	}
	for {
		select {
		case <-sigc:
			return nil
		case <-deadline:
			return timedOut()
		case ev, ok := <-w.Events():
			if !ok {
				err := w.Err()
				if e.timeoutSet && e.ctx.Err() != nil {
					return timedOut()
				}
				if errors.Is(err, client.ErrHistoryCompacted) {
					return compacted(err)
				}
				return fail("watch", name, err)
			}
			if err := e.printTreeEvent(ev); err != nil {
				return err
			}
			if ev.Kind != client.Progress {
				if seen++; count > 0 && seen >= count {
					return nil
				}
			}
		}
	}
}

// printTreeEvent prints one subtree event line.
func (e *env) printTreeEvent(ev client.SubtreeEvent) error {
	now := timeText(time.Now())
	if e.json {
		return e.printJSON(treeEvent{Time: now, Kind: ev.Kind.String(), Path: ev.Path, Generation: ev.Generation, Position: ev.Position.String()})
	}
	if ev.Kind == client.Progress {
		_, err := fmt.Fprintf(e.stdout, "%s  progress  pos=%s\n", now, ev.Position)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "%s  %s  %s  gen=%d  pos=%s\n", now, ev.Kind, ev.Path, ev.Generation, ev.Position)
	return err
}
