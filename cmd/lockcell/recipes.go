package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/wire"
)

// The recipe verbs: counter, queue, members and barrier, each the
// command-line face of a recipe in client/recipe (the logic is there; this
// file is arguments, output and exit codes).

// waitCtx is the context of a blocking verb's wait: --timeout bounds it
// when given (as it bounds a watch), otherwise only Ctrl-C ends it. stop
// releases the signal; interrupted reports whether Ctrl-C ended it.
func (e *env) waitCtx() (ctx context.Context, stop func(), interrupted func() bool) {
	parent := context.Background()
	if e.timeoutSet {
		parent = e.ctx
	}
	ctx, cancel := context.WithCancel(parent)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT)
	got := make(chan struct{})
	done := make(chan struct{})
	go func() { // ends with stop
		select {
		case <-sigc:
			close(got)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
			signal.Stop(sigc)
			close(done)
			cancel()
		}, func() bool {
			select {
			case <-got:
				return true
			default:
				return false
			}
		}
}

// waitEnded turns the end of a blocking verb's wait into its exit: a
// --timeout ends it with exitTimeout (JSON code "timeout"), Ctrl-C with
// exit 1 and code "canceled", any other error as usual.
func (e *env) waitEnded(op, name string, err error, interrupted bool) error {
	switch {
	case interrupted:
		return fail(op, name, wire.Errorf(wire.CodeCanceled, "interrupted while waiting"))
	case e.timeoutSet && errors.Is(err, context.DeadlineExceeded):
		return &exitStatus{code: exitTimeout, kind: "timeout",
			err: fmt.Errorf("%s %s: --timeout %v ended the wait", op, name, e.timeout)}
	}
	return fail(op, name, err)
}

// recipeGroup is a command whose subcommands are the verbs; without one
// it is a usage error naming them.
func recipeGroup(name, usage, argsUsage, desc string, subs ...*cli.Command) *cli.Command {
	var names []string
	for _, s := range subs {
		names = append(names, s.Name)
	}
	want := strings.Join(names, " or ")
	return &cli.Command{Name: name, Usage: usage, ArgsUsage: argsUsage, Description: desc, Subcommands: subs,
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErrorf(c, "unknown %s command %q (want %s)", name, c.Args().First(), want)
			}
			return usageErrorf(c, "no %s command given (want %s)", name, want)
		}}
}

// counterJSON is counter's --json output.
type counterJSON struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

func counterCommand(e *env) *cli.Command {
	print := func(name string, v int64) error {
		if e.json {
			return e.printJSON(counterJSON{name, v})
		}
		_, err := fmt.Fprintln(e.stdout, v)
		return err
	}
	add := &cli.Command{
		Name:      "add",
		Usage:     "add N to a shared counter and print its new value",
		ArgsUsage: "NAME N",
		Description: "Adds N (a decimal integer, negative to subtract) to the counter in the file NAME " +
			"by compare-and-swap, so concurrent adds from anywhere never lose one, creating the file " +
			"(and its parents) at 0 first if it is missing. Prints the value the add made; with --json " +
			`{"name", "value"}. A file that does not hold a decimal integer fails with code not_counter.` +
			"\n\nExample: lockcell counter add jobs/done 1",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 2, 2); err != nil {
				return err
			}
			name, err := e.name("counter add", c.Args().Get(0))
			if err != nil {
				return err
			}
			n, err := strconv.ParseInt(c.Args().Get(1), 10, 64)
			if err != nil {
				return usageErrorf(c, "N must be a decimal integer, got %q", c.Args().Get(1))
			}
			cl, err := e.client()
			if err != nil {
				return fail("counter add", name, err)
			}
			k, err := recipe.NewCounter(e.ctx, cl, name)
			if err != nil {
				return fail("counter add", name, err)
			}
			v, err := k.Add(e.ctx, n)
			if err != nil {
				return fail("counter add", name, err)
			}
			return print(name, v)
		},
	}
	get := &cli.Command{
		Name:      "get",
		Usage:     "print a shared counter's value",
		ArgsUsage: "NAME",
		Description: "Prints the value of the counter in the file NAME (an empty file is 0); a missing " +
			`file is not_found (get never creates one). With --json {"name", "value"}.` +
			"\n\nExample: lockcell counter get jobs/done",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			name, err := e.name("counter get", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("counter get", name, err)
			}
			v, err := recipe.CounterAt(cl, name).Get(e.ctx)
			if err != nil {
				return fail("counter get", name, err)
			}
			return print(name, v)
		},
	}
	return recipeGroup("counter", "add to or read a shared counter (a file of decimal text)", "add|get NAME [N]",
		"A counter is a file holding a decimal integer, changed only by compare-and-swap transactions "+
			"(client/recipe Counter), so no add is ever lost.\n\nExample: lockcell counter add jobs/done 1", add, get)
}

// queueItemJSON is queue's --json output.
type queueItemJSON struct {
	Queue    string  `json:"queue"`
	Item     string  `json:"item,omitempty"`
	Contents *string `json:"contents,omitempty"`
	Base64   []byte  `json:"contents_base64,omitempty"`
}

func queueCommand(e *env) *cli.Command {
	put := &cli.Command{
		Name:      "put",
		Usage:     "append an item to a FIFO queue and print its name",
		ArgsUsage: "DIR VALUE",
		Description: "Appends VALUE (\"-\" reads stdin) as a new item of the queue in the directory DIR, " +
			"creating DIR and its parents if missing. Items are files with sequential names, so they are " +
			`taken in the order they were put. Prints the item's name; with --json {"queue", "item"}.` +
			"\n\nExample: lockcell queue put jobs/todo 'resize img-17'",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 2, 2); err != nil {
				return err
			}
			dir, err := e.name("queue put", c.Args().Get(0))
			if err != nil {
				return err
			}
			data, err := e.value(c.Args().Get(1))
			if err != nil {
				return fail("queue put", dir, err)
			}
			cl, err := e.client()
			if err != nil {
				return fail("queue put", dir, err)
			}
			q, err := recipe.NewQueue(e.ctx, cl, dir)
			if err != nil {
				return fail("queue put", dir, err)
			}
			item, err := q.Put(e.ctx, data)
			if err != nil {
				return fail("queue put", dir, err)
			}
			if e.json {
				return e.printJSON(queueItemJSON{Queue: dir, Item: item})
			}
			_, err = fmt.Fprintln(e.stdout, item)
			return err
		},
	}
	take := &cli.Command{
		Name:      "take",
		Usage:     "remove the oldest item of a FIFO queue and print it, waiting for one",
		ArgsUsage: "DIR",
		Description: "Removes the queue's oldest item and prints its contents as they are (as cat does), " +
			"waiting until there is one: of several takers each item goes to exactly one. Without " +
			"--timeout it waits until Ctrl-C (exit 1, code canceled); with --timeout D it gives up after D " +
			`with exit 75 (code timeout), taking nothing. With --json {"queue", "contents" (when UTF-8), ` +
			`"contents_base64"}.` +
			"\n\nExample: job=$(lockcell queue take jobs/todo --timeout 1m)",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			dir, err := e.name("queue take", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("queue take", dir, err)
			}
			q, err := recipe.NewQueue(e.ctx, cl, dir)
			if err != nil {
				return fail("queue take", dir, err)
			}
			ctx, stop, interrupted := e.waitCtx()
			defer stop()
			data, err := q.Take(ctx)
			if err != nil {
				return e.waitEnded("queue take", dir, err, interrupted())
			}
			if e.json {
				out := queueItemJSON{Queue: dir, Base64: data}
				if out.Base64 == nil {
					out.Base64 = []byte{}
				}
				if utf8.Valid(data) {
					s := string(data)
					out.Contents = &s
				}
				return e.printJSON(out)
			}
			_, err = e.stdout.Write(data)
			return err
		},
	}
	return recipeGroup("queue", "put items into and take them from a FIFO work queue (a directory)", "put|take DIR [VALUE]",
		"A queue is a directory of sequentially named files (client/recipe Queue): put appends one, "+
			"take removes the oldest, each exactly once.\n\nExample: lockcell queue put jobs/todo 'resize img-17'", put, take)
}

// memberJSON is one member in members' --json output.
type memberJSON struct {
	Name     string  `json:"name"`
	Contents *string `json:"contents,omitempty"`
	Base64   []byte  `json:"contents_base64"`
}

func toMembersJSON(ms []recipe.Member) []memberJSON {
	out := make([]memberJSON, 0, len(ms))
	for _, m := range ms {
		j := memberJSON{Name: m.Name, Base64: m.Data}
		if j.Base64 == nil {
			j.Base64 = []byte{}
		}
		if utf8.Valid(m.Data) {
			s := string(m.Data)
			j.Contents = &s
		}
		out = append(out, j)
	}
	return out
}

// membersLine is the human form of a group: one member a line, NAME and
// its data when it is one line of text.
func (e *env) printMembers(ms []recipe.Member) error {
	for _, m := range ms {
		line := m.Name
		if d := string(m.Data); len(d) > 0 && utf8.ValidString(d) && !strings.ContainsAny(d, "\n\r") {
			line += "\t" + d
		}
		if _, err := fmt.Fprintln(e.stdout, line); err != nil {
			return err
		}
	}
	return nil
}

func membersCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "members",
		Usage:     "list a group's members (the ephemeral files in a directory), or follow them",
		ArgsUsage: "DIR",
		Description: "Lists the members of the group in the directory DIR (client/recipe Join makes them: " +
			"an ephemeral file per member, gone when its process's session ends), one a line: NAME and, " +
			"when it is one line of text, the data it published. A missing directory is an empty group. " +
			`With --json [{"name", "contents" (when UTF-8), "contents_base64"}].` + "\n\n" +
			"--watch follows the group: it prints the members when it starts and again on every change, " +
			"each set as a \"TIME N member(s)\" line followed by the members (with --json one object a line: " +
			`{"time", "members": [...]}), until Ctrl-C (exit 0), --count sets, or --timeout (exit 75). ` +
			"Sets are coalesced: a watcher that falls behind gets the latest one.\n\n" +
			"Example: lockcell members svc/workers --watch",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "print the members again on every change"},
			&cli.IntFlag{Name: "count", Usage: "with --watch, exit after `N` member sets (0: no limit)"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			dir, err := e.name("members", c.Args().First())
			if err != nil {
				return err
			}
			count := c.Int("count")
			if count < 0 {
				return usageErrorf(c, "--count must not be negative, got %d", count)
			}
			if count > 0 && !c.Bool("watch") {
				return usageErrorf(c, "--count goes with --watch")
			}
			cl, err := e.client()
			if err != nil {
				return fail("members", dir, err)
			}
			if !c.Bool("watch") {
				ms, err := recipe.Members(e.ctx, cl, dir)
				if err != nil {
					return fail("members", dir, err)
				}
				if e.json {
					return e.printJSON(toMembersJSON(ms))
				}
				return e.printMembers(ms)
			}
			return e.watchMembers(cl, dir, count)
		},
	}
}

// watchMembers is members --watch.
func (e *env) watchMembers(cl *client.Client, dir string, count int) error {
	ctx, stop, interrupted := e.waitCtx()
	defer stop()
	changes := recipe.WatchGroup(ctx, cl, dir)
	for seen := 0; count == 0 || seen < count; seen++ {
		var ch recipe.GroupChange
		var ok bool
		select {
		case ch, ok = <-changes:
		case ev, open := <-cl.Events():
			if open && ev.Kind != client.Expired && ev.Kind != client.IdleClosed {
				seen-- // a session event, not a member set
				continue
			}
			return fail("members", dir, client.ErrSessionExpired)
		}
		if !ok {
			if interrupted() {
				return nil // Ctrl-C is how a watch ends
			}
			return e.waitEnded("members", dir, ctx.Err(), false)
		}
		if ch.Err != nil {
			return fail("members", dir, ch.Err)
		}
		now := timeText(time.Now())
		if e.json {
			err := e.printJSON(struct {
				Time    string       `json:"time"`
				Members []memberJSON `json:"members"`
			}{now, toMembersJSON(ch.Members)})
			if err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintf(e.stdout, "%s %d member(s)\n", now, len(ch.Members)); err != nil {
			return err
		}
		if err := e.printMembers(ch.Members); err != nil {
			return err
		}
	}
	return nil
}

func barrierCommand(e *env) *cli.Command {
	verb := func(name, usage, desc string, f func(ctx context.Context, b *recipe.Barrier) error, blocking bool) *cli.Command {
		return &cli.Command{Name: name, Usage: usage, ArgsUsage: "NAME", Description: desc,
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 1, 1); err != nil {
					return err
				}
				op := "barrier " + name
				n, err := e.name(op, c.Args().First())
				if err != nil {
					return err
				}
				cl, err := e.client()
				if err != nil {
					return fail(op, n, err)
				}
				b := recipe.NewBarrier(cl, n)
				if blocking {
					ctx, stop, interrupted := e.waitCtx()
					defer stop()
					if err := f(ctx, b); err != nil {
						return e.waitEnded(op, n, err, interrupted())
					}
				} else if err := f(e.ctx, b); err != nil {
					return fail(op, n, err)
				}
				state := "open"
				if name == "set" {
					state = "set"
				}
				if e.json {
					return e.printJSON(struct {
						Name  string `json:"name"`
						State string `json:"state"`
					}{n, state})
				}
				_, err = fmt.Fprintf(e.stdout, "%s %s\n", n, state)
				return err
			}}
	}
	return recipeGroup("barrier", "set, remove or wait for a barrier (a file whose deletion lets waiters through)", "set|remove|wait NAME",
		"A barrier is shut while its file exists (client/recipe Barrier): wait blocks until it is removed."+
			"\n\nExample: lockcell barrier wait deploy/hold && ./deploy",
		verb("set", "shut a barrier (create its file)",
			`Creates the barrier's file and its parents; setting a set barrier changes nothing. Prints "NAME set"; with --json {"name", "state"}.`,
			func(ctx context.Context, b *recipe.Barrier) error { return b.Set(ctx) }, false),
		verb("remove", "open a barrier (delete its file), letting every waiter through",
			`Removing an open barrier changes nothing. Prints "NAME open"; with --json {"name", "state"}.`,
			func(ctx context.Context, b *recipe.Barrier) error { return b.Remove(ctx) }, false),
		verb("wait", "wait until a barrier is open (its file deleted)",
			"Returns at once when NAME does not exist. Without --timeout waits until Ctrl-C (exit 1, code canceled); "+
				`with --timeout D gives up after D with exit 75 (code timeout). Prints "NAME open"; with --json {"name", "state"}.`+
				"\n\nExample: lockcell barrier wait deploy/hold --timeout 10m && ./deploy",
			func(ctx context.Context, b *recipe.Barrier) error { return b.Wait(ctx) }, true))
}
