package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
)

// auditFollowWait is how long one read of a follow waits for records
// before it asks again (the server bounds it at 30 s).
const auditFollowWait = 20 * time.Second

// auditCommand reads the cell's audit trail.
func auditCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "show the cell's audit trail: every mutation, with who, from where, on what, and the result",
		ArgsUsage: "[PREFIX]",
		Description: "Reads the audit trail from a replica (any one: every replica holds the same records, numbered by the " +
			"command index, in the order the cell applied them): sessions created, closed and expired, creates, writes, " +
			"deletes, lock acquires, releases, hand-offs and breaks, ACL changes, membership changes, new master epochs " +
			"and backups taken, each with the caller's principal (and the proxy it called through, \"via PROXY\"), session and declared identity, the name, a detail and " +
			"the result (ok or the error's code). With PREFIX, only records about that name or names below it (and gap " +
			"records). Only the cell's admin may read it.\n\n" +
			"--since takes an index (1234), a time (RFC 3339) or a duration back from now (10m). --follow keeps " +
			"printing records as they are applied until interrupted (exit 0) or until --timeout, when given (exit 75), moving to another " +
			"replica if the one it reads stops answering, without losing or repeating a record. A \"gap\" record " +
			"says the replica does not hold some records (it installed a snapshot); read them from another " +
			"replica with --replica.\n\n" +
			"Output: one line a record for people; with --json, one JSON object a line (the stored format).\n\n" +
			"Examples:\n" +
			"   lockcell audit --since 1h\n" +
			"   lockcell audit --follow --json svc/ | jq -c 'select(.result != \"ok\")'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "first record: an index, an RFC 3339 time or a duration back from now"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing records as they are applied"},
			&cli.StringFlag{Name: "replica", Usage: "client address of the replica to read (default: the first of --replicas that answers)"},
			&cli.IntFlag{Name: "limit", Usage: "print at most this many records (0: all)"},
		},
		Action: e.audit,
	}
}

// audit is audit's Action.
func (e *env) audit(c *cli.Context) error {
	if err := wantArgs(c, 0, 1); err != nil {
		return err
	}
	var q admin.AuditQuery
	if c.Args().Len() == 1 {
		name, err := e.name("audit", c.Args().First())
		if err != nil {
			return err
		}
		q.Prefix = name
	}
	if s := c.String("since"); s != "" {
		if err := parseSince(s, time.Now(), &q); err != nil {
			return usageErrorf(c, "--since %q: %v", s, err)
		}
	}
	limit := c.Int("limit")
	if limit < 0 {
		return usageErrorf(c, "--limit must not be negative, got %d", limit)
	}
	if e.homeErr != nil {
		return e.homeErr
	}
	addrs := e.replicas
	if r := c.String("replica"); r != "" {
		addrs = []string{r}
	}
	follow := c.Bool("follow")
	ctx := e.ctx
	var timeoutCtx context.Context // the follow's --timeout, when given
	if follow {
		// A follow ends at Ctrl-C or SIGTERM (exit 0), or at --timeout
		// when given (exit 75, as watch and lock).
		base := c.Context
		var stop context.CancelFunc
		if e.timeoutSet {
			base, stop = context.WithTimeout(base, e.timeout)
			defer stop()
			timeoutCtx = base
		}
		ctx, stop = signal.NotifyContext(base, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
	}
	printed := 0
	followEnd := func() error {
		if timeoutCtx != nil && timeoutCtx.Err() != nil {
			return &exitStatus{code: exitTimeout, kind: "timeout",
				err: fmt.Errorf("audit: --timeout %v ended the follow after %d record(s)", e.timeout, printed)}
		}
		return nil
	}
	cfg := client.Config{TLS: e.tls, Dialer: e.dialer(), DialTimeout: min(e.timeout, 2*time.Second)}
	at := 0 // the replica read now, by index in addrs
	var lastErr error
	for tries := 0; ; {
		read := q
		if follow {
			read.Wait = auditFollowWait
		}
		page, err := admin.ReadAudit(ctx, cfg, addrs[at], read)
		if err != nil {
			if follow && ctx.Err() != nil {
				return followEnd()
			}
			if refusedByCell(err) || ctx.Err() != nil {
				return fail("audit", q.Prefix, err)
			}
			// This replica does not answer: the next one holds the same
			// trail, and q.Since says where to go on.
			lastErr, at, tries = err, (at+1)%len(addrs), tries+1
			if tries >= len(addrs) {
				if !follow {
					return fail("audit", q.Prefix, lastErr)
				}
				tries = 0
				select { // every replica is down: try them again shortly
				case <-ctx.Done():
					return followEnd()
				case <-time.After(time.Second):
				}
			}
			continue
		}
		tries = 0
		for _, r := range page.Records {
			if limit > 0 && printed >= limit {
				return nil
			}
			if err := e.printAuditRecord(r); err != nil {
				return err
			}
			printed++
		}
		q.Since = page.Next
		if !follow && (len(page.Records) == 0 || page.Next > page.Last) {
			return nil
		}
		if follow && ctx.Err() != nil {
			return followEnd()
		}
	}
}

// parseSince reads --since: an index, an RFC 3339 time, or a duration
// back from now.
func parseSince(s string, now time.Time, q *admin.AuditQuery) error {
	if idx, err := strconv.ParseUint(s, 10, 64); err == nil {
		q.Since = idx
		return nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		q.SinceTime = t
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		q.SinceTime = now.Add(-d)
		return nil
	}
	return errors.New("want an index (1234), an RFC 3339 time (2026-12-06T10:00:00Z) or a duration back from now (10m)")
}

// printAuditRecord prints one record: a line for people, or the record's
// JSON object under --json.
func (e *env) printAuditRecord(r admin.AuditRecord) error {
	if e.json {
		return e.printJSON(r)
	}
	who := dash(r.Principal)
	if r.Proxy != "" {
		who += " via " + r.Proxy
	}
	if r.Session != 0 {
		who += fmt.Sprintf(" s%d", r.Session)
	}
	if r.Host != "" || r.PID != 0 || r.Program != "" {
		who += " " + identityShort(client.Identity{Host: r.Host, PID: int(r.PID), Program: r.Program})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %8d  %-14s %-10s %s", r.Time, r.Index, r.Op, r.Result, who)
	if r.Name != "" {
		fmt.Fprintf(&b, "  %s", r.Name)
	}
	if r.Detail != "" {
		fmt.Fprintf(&b, "  (%s)", r.Detail)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "  error: %s", r.Error)
	}
	_, err := fmt.Fprintln(e.stdout, b.String())
	return err
}

// refusedByCell says the replica answered with a refusal that another
// replica would give too (no permission, a bad name or request), as
// opposed to not answering.
func refusedByCell(err error) bool {
	return errors.Is(err, client.ErrPermission) || errors.Is(err, client.ErrInvalidName) ||
		errors.Is(err, client.ErrBadRequest)
}
