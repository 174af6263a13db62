package main

import (
	"fmt"
	"lockcell/client/admin"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

// sessionsCommand lists the cell's live sessions.
func sessionsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "list live sessions: id, client, principal, declared identity, lease remaining, handles, locks held",
		Description: "Asks the master for the live sessions you may see (at most 5000 are listed, fewer when their names are long): the admin " +
			"sees every session, anyone else only the sessions of its own principal. The lease is what the " +
			"master grants the session right now. IDENTITY is what the session's client declared about its " +
			"process, PROGRAM[PID]@HOST (\"-\" for what it did not declare; the cell checks only its form). " +
			"--json gives every field, the identity as host, pid and program. This command's own session " +
			"is among them.\n\n" +
			"Example: lockcell sessions",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return err
			}
			list, err := admin.New(cl).Sessions(e.ctx)
			if err != nil {
				return fail("sessions", "", err)
			}
			if e.json {
				return e.printJSON(list)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCLIENT\tPRINCIPAL\tIDENTITY\tLEASE\tHANDLES\tCREATED\tLOCKS")
			for _, s := range list {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, dash(s.Client), dash(s.Principal),
					identityShort(s.Identity), s.Lease.Round(100*time.Millisecond), s.Handles, s.Created.UTC().Format(time.RFC3339), dash(strings.Join(s.Locks, ",")))
			}
			return tw.Flush()
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
