package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"lockcell/client/admin"
)

// quotaCommand shows a principal's and the cell's use of their limits.
func quotaCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "quota",
		Usage: "show how much of each limit your principal and the cell use: nodes, content bytes, sessions, handles, cache registrations, event bytes",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "principal", Usage: "report on principal `P` (the admin's alone; default: your own)"},
		},
		Description: "Asks the master, one line per limit: LIMIT (the lockcelld flag that sets it, without --max-), " +
			"USED, MAX and how full it is. The per-principal limits count your principal (nodes and content " +
			"bytes of the files it created, whoever wrote them; its sessions, open handles, cache registrations " +
			"and queued event bytes); the others count the whole cell. The last part of the cell's node and " +
			"content quotas is kept for the admin: every other principal is refused from MAX less that reserve, " +
			"and NOTE says FULL once the principal shown can add nothing more. The admin may ask about any " +
			"principal (--principal) and is shown the principals that created the most nodes and bytes. " +
			"--json for scripts.\n\n" +
			"Examples:\n" +
			"   lockcell quota\n" +
			"   lockcell quota --principal alice --json",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			who := c.String("principal")
			cl, err := e.client()
			if err != nil {
				return fail("quota", who, err)
			}
			rep, err := admin.New(cl).QuotaUsage(e.ctx, who)
			if err != nil {
				return fail("quota", who, err)
			}
			if e.json {
				return e.printJSON(rep)
			}
			return e.printQuota(rep)
		},
	}
}

// printQuota prints one line per limit, then the biggest principals when
// the report has them.
func (e *env) printQuota(r *admin.QuotaReport) error {
	who := r.Principal
	if r.Admin {
		who += " (the cell's admin)"
	}
	fmt.Fprintf(e.stdout, "principal %s\n", who)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tUSED\tMAX\t%\tNOTE")
	for _, l := range r.Limits {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\t%s\n", l.Name, quotaAmount(l.Used, l.Bytes), quotaAmount(l.Max, l.Bytes), l.Percent, quotaNote(l, r.Admin))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, top := range []struct {
		title string
		us    []admin.CreatorUsage
	}{{"nodes", r.TopByNodes}, {"content bytes", r.TopByContentBytes}} {
		if len(top.us) == 0 {
			continue
		}
		fmt.Fprintf(e.stdout, "\nthe principals that created the most %s:\n", top.title)
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PRINCIPAL\tNODES\tCONTENT BYTES")
		for _, u := range top.us {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", u.Principal, u.Nodes, quotaAmount(u.ContentBytes, true))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// quotaAmount is a count, or a byte count with a binary unit.
func quotaAmount(n int64, bytes bool) string {
	if bytes {
		return humanBytes(float64(n))
	}
	return strconv.FormatInt(n, 10)
}

// quotaNote says what an operator must know of a limit beyond its
// figures: that it is full for the principal shown, that the admin is
// exempt, or how much of it is kept for the admin.
func quotaNote(l admin.QuotaLimit, admin bool) string {
	switch {
	case l.Exempt:
		return "the admin is exempt"
	case l.Full && l.Reserve > 0 && !admin:
		return "FULL: the last " + quotaAmount(l.Reserve, l.Bytes) + " are kept for the admin"
	case l.Full:
		return "FULL"
	case l.Reserve > 0:
		return "the last " + quotaAmount(l.Reserve, l.Bytes) + " are kept for the admin"
	}
	return ""
}
