package main

import (
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
			"conflicting-lock and handle-invalid (NAME was deleted). Prints one line per event, " +
			"TIME KIND PATH [CHILD], plus the session's own events (jeopardy, safe, expired, " +
			"master-failover). Once the handle is open it prints \"watching NAME\" on stderr (under " +
			"--json a first {\"kind\": \"watching\"} line on stdout).\n\n" +
			"Runs until Ctrl-C (exit 0), until NAME is deleted (exit 0 after printing handle-invalid), " +
			"until the session expires (exit 1) or, with --count N, until N node events were printed " +
			"(exit 0). --timeout bounds only opening NAME. With --json prints one JSON object per " +
			"line: {\"time\", \"kind\", \"path\", \"child\", \"epoch\"}.\n\n" +
			"Example: lockcell watch --count 1 svc/config && lockcell cat svc/config",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Usage: "exit after `N` node events (0: no limit)"},
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
	var h *client.Handle
	select {
	case o := <-openc:
		if o.err != nil {
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

	seen := 0
	for {
		var ev client.Event
		select {
		case <-sigc:
			return nil
		case ev2, ok := <-cl.Events():
			if !ok {
				return fail("watch", name, client.ErrClosed)
			}
			ev = ev2
		}
		node := ev.Path != ""
		if node && ev.Path != name {
			continue // not ours (cannot happen: this session has one handle)
		}
		if err := e.printEvent(ev); err != nil {
			return err
		}
		switch ev.Kind {
		case client.Expired:
			return fail("watch", name, client.ErrSessionExpired)
		case client.HandleInvalid:
			return nil
		}
		if node {
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
		return e.printJSON(watchEvent{Time: timeText(t), Kind: ev.Kind.String(), Path: ev.Path, Child: ev.Child, Epoch: ev.Epoch})
	}
	line := timeText(t) + "  " + ev.Kind.String()
	switch {
	case ev.Path != "":
		line += "  " + ev.Path
		if ev.Child != "" {
			line += "  " + ev.Child
		}
	case ev.Kind == client.MasterFailover:
		line += fmt.Sprintf("  epoch %d", ev.Epoch)
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}
