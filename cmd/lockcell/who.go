package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// whoCommand prints who holds a lock.
func whoCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "who",
		Usage:     "print who holds a lock: holders (session, principal), mode, generation, waiters, lock-delay",
		ArgsUsage: "NAME",
		Description: "Reads the lock state from the node's Stat: the mode (free, shared or exclusive), the " +
			"holders in grant order (their session ids, as `lockcell sessions` shows them, and principals; " +
			"at most 64 are named), the lock generation, the number of waiters and the end of a running " +
			"lock-delay. Needs read permission on NAME. --json for scripts.\n\n" +
			"Example: lockcell who jobs/etl",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			name, err := e.name("who", c.Args().First())
			if err != nil {
				return err
			}
			st, err := e.stat(name)
			if err != nil {
				return fail("who", name, err)
			}
			if e.json {
				return e.printJSON(toWhoJSON(name, st))
			}
			return e.printWho(name, st)
		},
	}
}

// whoJSON is who's output for scripts. LockDelayUntil is null unless a
// lock-delay is running.
type whoJSON struct {
	Name           string              `json:"name"`
	LockMode       string              `json:"lock_mode"`
	LockGen        uint64              `json:"lock_generation"`
	LockHolders    int                 `json:"lock_holders"`
	Holders        []client.LockHolder `json:"holders"`
	LockWaiters    int                 `json:"lock_waiters"`
	LockDelayUntil *string             `json:"lock_delay_until"`
}

func toWhoJSON(name string, st client.Stat) whoJSON {
	out := whoJSON{Name: name, LockMode: st.LockMode.String(), LockGen: st.LockGen, LockHolders: st.LockHolders,
		Holders: st.Holders, LockWaiters: st.LockWaiters}
	if out.Holders == nil {
		out.Holders = []client.LockHolder{} // [] rather than null
	}
	if delayRunning(st.LockDelayUntil) {
		s := timeText(st.LockDelayUntil)
		out.LockDelayUntil = &s
	}
	return out
}

func delayRunning(until time.Time) bool { return !until.IsZero() && time.Now().Before(until) }

// printWho prints the lock's state as "key: value" lines, then its
// holders as a table.
func (e *env) printWho(name string, st client.Stat) error {
	if err := e.printFields([]field{
		{"name", name},
		{"lock mode", st.LockMode.String()},
		{"lock generation", fmt.Sprint(st.LockGen)},
		{"lock waiters", fmt.Sprint(st.LockWaiters)},
		{"lock-delay until", lockDelayText(st.LockDelayUntil)},
		{"holders", fmt.Sprint(st.LockHolders)},
	}); err != nil {
		return err
	}
	if len(st.Holders) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tPRINCIPAL")
	for _, h := range st.Holders {
		fmt.Fprintf(tw, "%d\t%s\n", h.Session, dash(h.Principal))
	}
	if more := st.LockHolders - len(st.Holders); more > 0 {
		fmt.Fprintf(tw, "(%d more)\t\n", more)
	}
	return tw.Flush()
}
