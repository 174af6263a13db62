package main

import (
	"fmt"
	"lockcell/client/admin"
	"time"

	"github.com/urfave/cli/v2"
)

// transferJSON is transfer-leadership's --json document.
type transferJSON struct {
	From         string `json:"from"`
	To           string `json:"to"`
	ToClientAddr string `json:"to_client_addr,omitempty"`
	TookMillis   int64  `json:"took_ms"`
}

func replicaTransferCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "transfer-leadership",
		Usage:     "hand the master's leadership to member ID, or to the most up-to-date voter, and wait until it serves",
		ArgsUsage: "[ID]",
		Description: "Asks the master to hand its leadership to the voter ID (without ID: the most up-to-date other " +
			"voter), then waits until a new master serves, within --timeout, and prints it. Use it before taking " +
			"the master's machine down for maintenance, or to put the master on a chosen machine. The master " +
			"refuses, changing nothing, a member it does not know, a non-voter, itself, or a voter it has not " +
			"heard from lately. With --json prints {\"from\", \"to\", \"to_client_addr\", \"took_ms\"}.\n\n" +
			"Example: lockcell replica transfer-leadership 3",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 1); err != nil {
				return err
			}
			id := c.Args().First()
			cl, err := e.client()
			if err != nil {
				return fail("replica transfer-leadership", id, err)
			}
			tr, err := admin.New(cl).TransferLeadership(e.ctx, id)
			if err != nil {
				return membershipFail("replica transfer-leadership", id, err)
			}
			if e.json {
				return e.printJSON(transferJSON{From: tr.From, To: tr.To, ToClientAddr: tr.ToClientAddr, TookMillis: tr.Took.Milliseconds()})
			}
			_, err = fmt.Fprintf(e.stdout, "master is now replica %s (%s), was %s; took %s\n",
				tr.To, dash(tr.ToClientAddr), tr.From, tr.Took.Round(time.Millisecond))
			return err
		},
	}
}
