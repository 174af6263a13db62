package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
)

// locksCommand lists the locks in use under a name.
func locksCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "locks",
		Usage:     "list every held or waited-for lock under PREFIX: mode, holders, waiters, lock-delay, holders' programs",
		ArgsUsage: "[PREFIX]",
		Description: "Lists, one line per lock in name order, the locks held or waited for at PREFIX (a name, " +
			"default the cell's root) and below it: the mode, the generation, the holders (session/principal, " +
			"in grant order), the waiters (session/principal:mode, in queue order), the end of a running " +
			"lock-delay, and what each holder's client declared itself as (program[pid]@host, in the holders' " +
			"order). The admin sees every lock; anyone else those it may read. At most 1000 locks and 64 " +
			"holders and waiters per lock are named (the counts are exact; fewer locks when they name very " +
			"many long identities, and the listing says it stopped short). --json for scripts.\n\n" +
			"Example: lockcell locks jobs",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 1); err != nil {
				return err
			}
			prefix := e.root()
			if c.Args().Present() {
				var err error
				if prefix, err = e.name("locks", c.Args().First()); err != nil {
					return err
				}
			}
			cl, err := e.client()
			if err != nil {
				return fail("locks", prefix, err)
			}
			locks, truncated, err := admin.New(cl).Locks(e.ctx, prefix)
			if err != nil {
				return fail("locks", prefix, err)
			}
			if e.json {
				return e.printJSON(toLocksJSON(locks, truncated))
			}
			return e.printLocks(locks, truncated)
		},
	}
}

// locksJSON is locks' output for scripts. Modes are words; a lock-delay
// is null unless one is running.
type locksJSON struct {
	Locks     []lockJSON `json:"locks"`
	Truncated bool       `json:"truncated"`
}

type lockJSON struct {
	Name           string              `json:"name"`
	Mode           string              `json:"mode"`
	Generation     uint64              `json:"generation"`
	HolderCount    int                 `json:"holder_count"`
	Holders        []client.LockHolder `json:"holders"`
	WaiterCount    int                 `json:"waiter_count"`
	Waiters        []waiterJSON        `json:"waiters"`
	LockDelayUntil *string             `json:"lock_delay_until"`
	// SemLimit is a semaphore's permit count, left out for a plain lock.
	SemLimit int `json:"sem_limit,omitempty"`
}

// waiterJSON is a waiter for scripts: client.LockWaiter with the mode as a
// word and the time in UTC (left out when unknown).
type waiterJSON struct {
	Session   uint64 `json:"session"`
	Principal string `json:"principal"`
	Mode      string `json:"mode"`
	client.Identity
	Since time.Time `json:"since,omitzero"`
}

func toWaitersJSON(ws []client.LockWaiter) []waiterJSON {
	out := []waiterJSON{}
	for _, w := range ws {
		out = append(out, waiterJSON{Session: w.Session, Principal: w.Principal, Mode: w.Mode.String(), Identity: w.Identity, Since: w.Since.UTC()})
	}
	return out
}

func toLocksJSON(locks []admin.LockInfo, truncated bool) locksJSON {
	out := locksJSON{Locks: []lockJSON{}, Truncated: truncated}
	for _, l := range locks {
		lj := lockJSON{Name: l.Name, Mode: l.Mode.String(), Generation: l.Generation, HolderCount: l.HolderCount,
			Holders: []client.LockHolder{}, WaiterCount: l.WaiterCount, Waiters: toWaitersJSON(l.Waiters), SemLimit: l.SemLimit}
		for _, h := range l.Holders {
			h.Since = h.Since.UTC()
			lj.Holders = append(lj.Holders, h)
		}
		if delayRunning(l.LockDelayUntil) {
			s := timeText(l.LockDelayUntil)
			lj.LockDelayUntil = &s
		}
		out.Locks = append(out.Locks, lj)
	}
	return out
}

// printLocks prints one line per lock.
func (e *env) printLocks(locks []admin.LockInfo, truncated bool) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tGEN\tHOLDERS\tWAITERS\tLOCK-DELAY UNTIL\tHELD BY (PROGRAM[PID]@HOST)")
	for _, l := range locks {
		var hs, ids, ws []string
		for _, h := range l.Holders {
			hs = append(hs, fmt.Sprintf("%d/%s", h.Session, dash(h.Principal)))
			ids = append(ids, identityShort(h.Identity))
		}
		if more := l.HolderCount - len(l.Holders); more > 0 {
			hs = append(hs, fmt.Sprintf("+%d", more))
		}
		for _, w := range l.Waiters {
			ws = append(ws, fmt.Sprintf("%d/%s:%s", w.Session, dash(w.Principal), w.Mode))
		}
		if more := l.WaiterCount - len(l.Waiters); more > 0 {
			ws = append(ws, fmt.Sprintf("+%d", more))
		}
		mode := l.Mode.String()
		if l.SemLimit != 0 {
			mode = fmt.Sprintf("semaphore %d/%d", l.HolderCount, l.SemLimit) // permits held of N
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Name, mode, l.Generation, listText(hs), listText(ws),
			lockDelayText(l.LockDelayUntil), listText(ids))
	}
	if truncated {
		fmt.Fprintln(tw, "(more locks not listed)\t\t\t\t\t\t")
	}
	return tw.Flush()
}

// identityShort is a declared identity in one word: program[pid]@host,
// with "-" for what was not declared (spaces in a name become "_", so a
// line splits into its columns).
func identityShort(id client.Identity) string {
	return strings.ReplaceAll(fmt.Sprintf("%s[%s]@%s", dash(id.Program), pidText(id.PID), dash(id.Host)), " ", "_")
}

func listText(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ",")
}
