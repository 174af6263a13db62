package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/wire"
)

// breakCommand frees a lock by the admin's decision.
func breakCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "break",
		Usage:     "free a lock from every holder (admin only, audited): the holders' sequencers go stale, the next waiter gets it",
		ArgsUsage: "NAME",
		Description: "Breaks the lock on NAME: every holder loses it and is told (its lock context ends, so " +
			"`lockcell lock` stops its command with exit 69), the lock generation moves on so resource " +
			"servers refuse the old holders' sequencers, and the next waiter gets the lock at once, with no " +
			"lock-delay. Only the cell's admin principal may break a lock; the master writes an audit line " +
			"with --reason and the sessions freed. Breaking a free lock succeeds and changes nothing.\n\n" +
			"Example: lockcell break jobs/etl --reason \"etl host is wedged, ticket OPS-12\"",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "reason",
				Usage: "why the lock is broken (required, at most 1024 bytes): written to the audit log and told to the holders"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			reason := c.String("reason")
			if strings.TrimSpace(reason) == "" || len(reason) > wire.MaxBreakReason {
				return usageErrorf(c, "--reason must say why, in at most %d bytes", wire.MaxBreakReason)
			}
			name, err := e.name("break", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("break", name, err)
			}
			res, err := admin.New(cl).BreakLock(e.ctx, name, reason)
			if err != nil {
				return fail("break", name, err)
			}
			if e.json {
				if res.Holders == nil {
					res.Holders = []client.LockHolder{} // [] rather than null
				}
				return e.printJSON(breakJSON{Name: name, Reason: reason, BreakResult: res})
			}
			if len(res.Holders) == 0 {
				_, err := fmt.Fprintf(e.stdout, "%s was not held; lock generation %d\n", name, res.Generation)
				return err
			}
			var who []string
			for _, h := range res.Holders {
				who = append(who, fmt.Sprintf("session %d (%s)", h.Session, dash(h.Principal)))
			}
			_, err = fmt.Fprintf(e.stdout, "broke %s: freed %s; lock generation now %d\n", name, strings.Join(who, ", "), res.Generation)
			return err
		},
	}
}

// breakJSON is break's output for scripts.
type breakJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	admin.BreakResult
}
