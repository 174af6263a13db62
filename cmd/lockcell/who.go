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
		Usage:     "print who holds a lock and who waits: session, principal, host, pid, program, since when; mode, generation, lock-delay and its cause",
		ArgsUsage: "NAME",
		Description: "Reads the lock state from the node's Stat: the mode (free, shared or exclusive), the lock " +
			"generation, the holders in grant order and the waiters in queue order (at most 64 of each are " +
			"named; the counts are exact). Each holder and waiter shows its session id (as `lockcell " +
			"sessions` shows it), principal, the host, pid and program its client declared, and since when " +
			"it has held the lock or waited (with the age). A running lock-delay shows its end and its " +
			"cause: the session that expired holding the lock, with its identity and when it expired. " +
			"Times are the master's clock. Needs read permission on NAME. --json for scripts.\n\n" +
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
			return e.printWho(name, st, time.Now())
		},
	}
}

// whoJSON is who's output for scripts. Times are RFC 3339 in UTC; a
// holder's or waiter's since is left out when the cell does not know it.
// LockDelayUntil and LockDelayBy are null unless a lock-delay is running.
type whoJSON struct {
	Name           string                 `json:"name"`
	LockMode       string                 `json:"lock_mode"`
	LockGen        uint64                 `json:"lock_generation"`
	LockHolders    int                    `json:"lock_holders"`
	Holders        []client.LockHolder    `json:"holders"`
	LockWaiters    int                    `json:"lock_waiters"`
	Waiters        []waiterJSON           `json:"waiters"`
	LockDelayUntil *string                `json:"lock_delay_until"`
	LockDelayBy    *client.LockDelayCause `json:"lock_delay_by"`
}

func toWhoJSON(name string, st client.Stat) whoJSON {
	out := whoJSON{Name: name, LockMode: st.LockMode.String(), LockGen: st.LockGen, LockHolders: st.LockHolders,
		Holders: []client.LockHolder{}, LockWaiters: st.LockWaiters, Waiters: toWaitersJSON(st.Waiters)}
	for _, h := range st.Holders {
		h.Since = h.Since.UTC()
		out.Holders = append(out.Holders, h)
	}
	if delayRunning(st.LockDelayUntil) {
		s := timeText(st.LockDelayUntil)
		out.LockDelayUntil = &s
		if by := st.LockDelayBy; by != nil {
			c := *by
			c.Expired = c.Expired.UTC()
			out.LockDelayBy = &c
		}
	}
	return out
}

func delayRunning(until time.Time) bool { return !until.IsZero() && time.Now().Before(until) }

// printWho prints the lock's state as "key: value" lines, then its
// holders and its waiters as tables; now dates the ages.
func (e *env) printWho(name string, st client.Stat, now time.Time) error {
	fs := []field{
		{"name", name},
		{"lock mode", st.LockMode.String()},
		{"lock generation", fmt.Sprint(st.LockGen)},
		{"lock waiters", fmt.Sprint(st.LockWaiters)},
		{"lock-delay until", lockDelayText(st.LockDelayUntil)},
	}
	if delayRunning(st.LockDelayUntil) {
		fs[len(fs)-1].value += fmt.Sprintf(" (%s from now)", ageText(st.LockDelayUntil.Sub(now)))
		if by := st.LockDelayBy; by != nil {
			fs = append(fs, field{"lock-delay cause", fmt.Sprintf("session %d expired holding the lock at %s (%s ago): %s",
				by.Session, shortTime(by.Expired), ageText(now.Sub(by.Expired)), identityText(by.Principal, by.Identity))})
		}
	}
	fs = append(fs, field{"holders", fmt.Sprint(st.LockHolders)})
	if err := e.printFields(fs); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(st.Holders) > 0 {
		fmt.Fprintln(tw, "\nSESSION\tPRINCIPAL\tHOST\tPID\tPROGRAM\tHELD SINCE\tAGE")
		for _, h := range st.Holders {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Session, dash(h.Principal), dash(h.Host), pidText(h.PID),
				dash(h.Program), sinceText(h.Since), sinceAge(now, h.Since))
		}
		if more := st.LockHolders - len(st.Holders); more > 0 {
			fmt.Fprintf(tw, "(%d more)\t\t\t\t\t\t\n", more)
		}
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintln(tw, "\nWAITER\tSESSION\tPRINCIPAL\tMODE\tHOST\tPID\tPROGRAM\tWAITING SINCE\tAGE")
		for i, w := range st.Waiters {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, w.Session, dash(w.Principal), w.Mode, dash(w.Host),
				pidText(w.PID), dash(w.Program), sinceText(w.Since), sinceAge(now, w.Since))
		}
		if more := st.LockWaiters - len(st.Waiters); more > 0 {
			fmt.Fprintf(tw, "(%d more)\t\t\t\t\t\t\t\t\n", more)
		}
	}
	return tw.Flush()
}

// identityText is a principal and declared identity in words, for the
// lock-delay's cause.
func identityText(principal string, id client.Identity) string {
	return fmt.Sprintf("principal %s, host %s, pid %s, program %s", dash(principal), dash(id.Host), pidText(id.PID), dash(id.Program))
}

func pidText(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}

// shortTime is t in UTC to the second, for tables people read.
func shortTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func sinceText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return shortTime(t)
}

func sinceAge(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return ageText(now.Sub(t))
}

// ageText is a duration to the second (to the millisecond under one);
// a small negative one (clocks a little apart) reads as zero.
func ageText(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
