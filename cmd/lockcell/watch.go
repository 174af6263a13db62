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

// allEvents is every handle event a watch asks for.
const allEvents = client.OnContentsModified | client.OnChildAdded | client.OnChildRemoved |
	client.OnLockAcquired | client.OnConflictingLock | client.OnHandleInvalid

// watchCommand prints a node's events as they arrive.
func watchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print a node's events as they happen",
		ArgsUsage: "NAME",
		Description: "Opens NAME asking for every event: for directories child-added and child-removed " +
			"(with the child's name), for files contents-modified, and for both lock-acquired, " +
			"conflicting-lock and handle-invalid (NAME was deleted), plus lock-broken and " +
			"release-requested about a lock. Prints one line per event, TIME KIND PATH [CHILD] and the " +
			"node's position just after the change (epoch=E instance=I content=C lock=L: the master's " +
			"epoch, the node's instance and its content and lock generations, as in stat; a deleted " +
			"node has none), plus the session's own events (jeopardy, safe, expired, master-failover). " +
			"\"overflow missed=KIND\" says events were lost from KIND on (the watch could not keep up, " +
			"or the master dropped them); \"reannounce\" follows a new master or a recovery from " +
			"jeopardy, with the last position heard: events in between may be lost. After either, " +
			"re-read NAME. Once the handle is open it prints \"watching NAME\" on stderr (under " +
			"--json a first {\"kind\": \"watching\"} line on stdout).\n\n" +
			"Runs until Ctrl-C (exit 0), until NAME is deleted (exit 0 after printing handle-invalid), " +
			"until the session expires (exit 1) or, with --count N, until N node events were printed " +
			"(exit 0; overflow and reannounce are not counted). --timeout D, when given, bounds the whole " +
			"watch: it ends D after the command started with exit 75 (JSON code \"timeout\"), having printed " +
			"what arrived until then; without it the default timeout bounds only opening NAME. " +
			"With --json prints one JSON object per line: {\"time\", \"kind\", \"path\", \"child\", " +
			"\"epoch\", \"instance\", \"content_generation\", \"lock_generation\", \"missed\"}.\n\n" +
			"Example: lockcell watch --count 1 svc/config && lockcell cat svc/config\n\n" +
			recursiveWatchHelp,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Usage: "exit after `N` node events (0: no limit)"},
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "watch every change below the directory NAME, at any depth, with positions (see below)"},
			&cli.StringFlag{Name: "from", Usage: "with --recursive: start after position `POS` (as printed by an earlier watch) instead of now"},
		},
		Action: e.watch,
	}
}

// watchEvent is one line of watch --json.
type watchEvent struct {
	Time  string `json:"time"`
	Kind  string `json:"kind"`
	Path  string `json:"path,omitempty"`
	Child string `json:"child,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	// The node's position just after the change (zero: unknown, such as
	// for a deleted node or a session event).
	Instance   uint64 `json:"instance,omitempty"`
	ContentGen uint64 `json:"content_generation,omitempty"`
	LockGen    uint64 `json:"lock_generation,omitempty"`
	// Missed is, on an overflow, the kind of the first event lost.
	Missed string `json:"missed,omitempty"`
}

// watch is watch's Action.
func (e *env) watch(c *cli.Context) error {
	if err := wantArgs(c, 1, 1); err != nil {
		return err
	}
	count := c.Int("count")
	if count < 0 {
		return usageErrorf(c, "--count must not be negative, got %d", count)
	}
	name, err := e.name("watch", c.Args().First())
	if err != nil {
		return err
	}
	if c.Bool("recursive") {
		return e.watchTree(c, name, count)
	}
	if c.IsSet("from") {
		return usageErrorf(c, "--from needs --recursive")
	}
	// Ctrl-C is how a watch normally ends: listen before anything else so
	// an early one is not lost (or fatal).
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT)
	defer signal.Stop(sigc)

	cl, err := e.client()
	if err != nil {
		return fail("watch", name, err)
	}
	type opened struct {
		h   *client.Handle
		err error
	}
	openc := make(chan opened, 1)
	go func() {
		h, err := cl.Open(e.ctx, name, client.Read, client.WithEvents(allEvents))
		openc <- opened{h, err}
	}()
	// --timeout, when given, bounds the whole watch (README: the deadline
	// of the whole command); the default bounds only the open, since a
	// watch normally runs until Ctrl-C.
	var deadline <-chan struct{}
	if e.timeoutSet {
		deadline = e.ctx.Done()
	}
	seen := 0
	timedOut := func() error {
		return &exitStatus{code: exitTimeout, kind: "timeout",
			err: fmt.Errorf("watch %s: --timeout %v ended the watch after %d event(s)", name, e.timeout, seen)}
	}
	var h *client.Handle
	select {
	case o := <-openc:
		if o.err != nil {
			if e.timeoutSet && errors.Is(o.err, context.DeadlineExceeded) {
				return &exitStatus{code: exitTimeout, kind: "timeout",
					err: fmt.Errorf("watch %s: --timeout %v ended before the cell opened it: %w", name, e.timeout, o.err)}
			}
			return fail("watch", name, o.err)
		}
		h = o.h
	case <-sigc:
		e.cancel()
		if o := <-openc; o.h != nil {
			o.h.Close()
		}
		return nil
	}
	defer h.Close() // best effort: closing the session drops it anyway
	if e.json {
		if err := e.printJSON(watchEvent{Time: timeText(time.Now()), Kind: "watching", Path: name}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stderr, "watching %s\n", name)
	}

	// Node events come from the handle's own stream, which never drops
	// one silently (an Overflow stands in for what it could not keep) and
	// carries Reannounce; the session's stream gives the session events.
	nodeEvents := h.Events()
	for {
		var ev client.Event
		select {
		case <-sigc:
			return nil
		case <-deadline:
			return timedOut()
		case ev2, ok := <-nodeEvents:
			if !ok {
				// The session ended: its own stream says how (Expired,
				// or closed).
				nodeEvents = nil
				continue
			}
			ev = ev2
		case ev2, ok := <-cl.Events():
			if !ok {
				return fail("watch", name, client.ErrClosed)
			}
			ev = ev2
		}
		if err := e.printEvent(ev); err != nil {
			return err
		}
		switch ev.Kind {
		case client.Expired:
			return fail("watch", name, client.ErrSessionExpired)
		case client.HandleInvalid:
			return nil
		case client.Overflow, client.Reannounce:
			continue
		}
		if ev.Path != "" {
			if seen++; count > 0 && seen >= count {
				return nil
			}
		}
	}
}

// printEvent prints one event line.
func (e *env) printEvent(ev client.Event) error {
	t := ev.Time
	if t.IsZero() {
		t = time.Now()
	}
	if e.json {
		w := watchEvent{Time: timeText(t), Kind: ev.Kind.String(), Path: ev.Path, Child: ev.Child, Epoch: ev.Epoch,
			Instance: ev.Instance, ContentGen: ev.ContentGen, LockGen: ev.LockGen}
		if ev.Kind == client.Overflow {
			w.Missed = missedText(ev.Missed)
		}
		return e.printJSON(w)
	}
	line := timeText(t) + "  " + ev.Kind.String()
	if ev.Path != "" {
		line += "  " + ev.Path
		if ev.Child != "" {
			line += "  " + ev.Child
		}
	}
	if ev.Kind == client.Overflow {
		line += "  missed=" + missedText(ev.Missed)
	}
	if ev.Epoch != 0 {
		line += fmt.Sprintf("  epoch=%d", ev.Epoch)
	}
	if ev.Instance != 0 {
		line += fmt.Sprintf(" instance=%d content=%d lock=%d", ev.Instance, ev.ContentGen, ev.LockGen)
	}
	switch ev.Kind {
	case client.Overflow:
		line += "  (events were lost: re-read " + ev.Path + ")"
	case client.Reannounce:
		line += "  (a new master or safe again: events may be lost, re-read " + ev.Path + ")"
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}

// missedText names the kind of the first event an Overflow stands for;
// "unknown" when the master dropped events without saying which.
func missedText(k client.EventKind) string {
	if k == 0 {
		return "unknown"
	}
	return k.String()
}
