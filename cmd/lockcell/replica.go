package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
)

// replicaPoll is how often replica add asks the master whether the new
// member votes yet.
const replicaPoll = 250 * time.Millisecond

// replicaCommand groups the membership verbs.
func replicaCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "replica",
		Usage:     "list the cell's members (admin or monitor); add or remove one, or move the master (admin only)",
		ArgsUsage: "list|add|remove|transfer-leadership",
		Description: "Membership changes go through the master, which changes the cell's Raft configuration. " +
			"Only the cell's admin may change the members; the admin and the principals listed in the ACL file " +
			"/ls/<cell>/acl/monitor (the monitoring role) may list them. To replace a dead machine: start the " +
			"new replica at its new address, add it, then remove the dead one (see docs/operations.md).\n\n" +
			"Example: lockcell replica list",
		Subcommands: []*cli.Command{replicaListCommand(e), replicaAddCommand(e), replicaRemoveCommand(e),
			replicaTransferCommand(e)},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErrorf(c, "unknown replica command %q (want list, add, remove or transfer-leadership)", c.Args().First())
			}
			return usageErrorf(c, "no replica command given (want list, add, remove or transfer-leadership)")
		},
	}
}

func replicaListCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list the members: id, client and Raft addresses, suffrage, master, health, last contact",
		ArgsUsage: " ",
		Description: "Asks the master for the cell's Raft configuration and prints one row per member: its id, " +
			"client address, Raft address, suffrage (voter, or nonvoter while a new member catches up), the " +
			"master marker (* for the master), whether the master heard from it within the last few heartbeats, " +
			"and how long ago it last did. The first line gives the member and voter counts and the configured " +
			"size (no change may leave fewer voters than a majority of it). With --json prints " +
			"{\"replicas\": [...], \"configured_size\": N, \"index\": I}.\n\n" +
			"Example: lockcell replica list",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("replica list", "", err)
			}
			list, err := admin.New(cl).Replicas(e.ctx)
			if err != nil {
				return membershipFail("replica list", "", err)
			}
			if e.json {
				return e.printJSON(list)
			}
			return e.printReplicas(list)
		},
	}
}

func replicaAddCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a member and wait until it votes",
		ArgsUsage: "ID CLIENT_ADDR RAFT_ADDR",
		Description: "Adds the replica ID, which clients reach at CLIENT_ADDR and the other replicas at RAFT_ADDR, " +
			"to the cell. Start it first (`lockcelld serve` with an empty --data folder, its own --id, --listen " +
			"and --raft, and --join naming a member). It joins as a non-voter; the master promotes it to voter " +
			"once it has caught up with the log. add waits for that, printing progress on stderr, then prints " +
			"the members; --no-wait returns once the member is added. Without --timeout the wait lasts as long " +
			"as it takes. Adding a member that is already there with the same addresses changes nothing.\n\n" +
			"With --read-replica the member is a read replica: a non-voter the master never promotes, so it " +
			"never counts for a quorum nor becomes master, and it serves reads given a staleness bound " +
			"(`lockcell cat --max-staleness`, client.MaxStaleness). add then waits until the master hears from " +
			"it, and the list shows its suffrage as read-replica.\n\n" +
			"Example: lockcell replica add 6 10.0.0.16:7001 10.0.0.16:7101\n" +
			"         lockcell replica add --read-replica r1 10.0.1.5:7001 10.0.1.5:7101",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the member is added, without waiting until it votes"},
			&cli.BoolFlag{Name: "read-replica", Usage: "add a read replica: never promoted to voter, serves stale reads"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 3, 3); err != nil {
				return err
			}
			id, clientAddr, raftAddr := c.Args().Get(0), c.Args().Get(1), c.Args().Get(2)
			if !e.timeoutSet && !c.Bool("no-wait") {
				// Catching up takes as long as the log is long; --timeout
				// bounds it only when given.
				e.cancel()
				e.ctx, e.cancel = context.WithCancel(c.Context)
			}
			cl, err := e.client()
			if err != nil {
				return fail("replica add", id, err)
			}
			add := admin.New(cl).AddReplica
			if c.Bool("read-replica") {
				add = admin.New(cl).AddReadReplica
			}
			list, err := add(e.ctx, id, clientAddr, raftAddr)
			if err != nil {
				return membershipFail("replica add", id, err)
			}
			if c.Bool("read-replica") && !c.Bool("no-wait") {
				if list, err = e.waitHeard(cl, id, list); err != nil {
					return membershipFail("replica add", id, err)
				}
			} else if !c.Bool("no-wait") {
				if list, err = e.waitVoter(cl, id, list); err != nil {
					f := membershipFail("replica add", id, err)
					if errors.Is(err, context.DeadlineExceeded) {
						f.hint = "it was added and is not a voter yet; `lockcell replica list` shows when it votes"
					}
					return f
				}
			}
			if e.json {
				return e.printJSON(list)
			}
			return e.printReplicas(list)
		},
	}
}

func replicaRemoveCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove a member",
		ArgsUsage: "ID",
		Description: "Removes the replica ID (voter or not) from the cell's configuration; the cell stops " +
			"replicating to it and its clients stop trying it. The master refuses a removal that would leave " +
			"fewer voters than a majority of the configured size, or remove the last healthy voters. Removing " +
			"a member that is not there changes nothing. Prints the remaining members.\n\n" +
			"Example: lockcell replica remove 3",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			id := c.Args().First()
			cl, err := e.client()
			if err != nil {
				return fail("replica remove", id, err)
			}
			list, err := admin.New(cl).RemoveReplica(e.ctx, id)
			if err != nil {
				return membershipFail("replica remove", id, err)
			}
			if e.json {
				return e.printJSON(list)
			}
			return e.printReplicas(list)
		},
	}
}

// waitVoter polls the members until id votes, reporting each change of its
// state on stderr (not under --json).
func (e *env) waitVoter(cl *client.Client, id string, list admin.ReplicaList) (admin.ReplicaList, error) {
	start := time.Now()
	last := ""
	t := time.NewTicker(replicaPoll)
	defer t.Stop()
	for {
		r, ok := list.Find(id)
		if !ok {
			return list, fmt.Errorf("replica %s left the configuration while it caught up (did it stop, or did someone remove it?)", id)
		}
		if r.Suffrage == admin.SuffrageVoter {
			if !e.json {
				fmt.Fprintf(e.stderr, "replica %s is a voter (%s)\n", id, time.Since(start).Round(100*time.Millisecond))
			}
			return list, nil
		}
		if state := memberState(r); state != last && !e.json {
			fmt.Fprintf(e.stderr, "replica %s: %s; waiting until the master promotes it to voter\n", id, state)
			last = state
		}
		select {
		case <-e.ctx.Done():
			return list, e.ctx.Err()
		case <-t.C:
		}
		next, err := admin.New(cl).Replicas(e.ctx)
		if err != nil {
			return list, err
		}
		list = next
	}
}

// waitHeard polls the members until the master has heard from the read
// replica id (it never votes, so that is all add waits for).
func (e *env) waitHeard(cl *client.Client, id string, list admin.ReplicaList) (admin.ReplicaList, error) {
	t := time.NewTicker(replicaPoll)
	defer t.Stop()
	for {
		r, ok := list.Find(id)
		if !ok {
			return list, fmt.Errorf("replica %s left the configuration (did someone remove it?)", id)
		}
		if r.Healthy && r.MatchIndex > 0 {
			if !e.json {
				fmt.Fprintf(e.stderr, "read replica %s is receiving the log\n", id)
			}
			return list, nil
		}
		select {
		case <-e.ctx.Done():
			return list, e.ctx.Err()
		case <-t.C:
		}
		next, err := admin.New(cl).Replicas(e.ctx)
		if err != nil {
			return list, err
		}
		list = next
	}
}

// memberState says how a non-voter is doing, for add's progress lines.
func memberState(r admin.ReplicaStatus) string {
	if !r.Healthy {
		return r.Suffrage + ", not heard from yet (is it running at " + r.RaftAddr + "?)"
	}
	return r.Suffrage + ", catching up"
}

// membershipFail describes a failed membership call, with a hint for the
// refusals an operator can act on.
func membershipFail(op, id string, err error) *opError {
	hint := ""
	switch {
	case errors.Is(err, client.ErrPermission):
		hint = "only the cell's admin may change members, and only the admin or a principal listed in the ACL file acl/" +
			"monitor may list them: use such a --cert and --key"
	case errors.Is(err, client.ErrNoMaster):
		hint = "membership changes need a master, and so a quorum of voters"
	}
	return &opError{op: op, path: id, err: err, hint: hint}
}

// printReplicas prints the members as a table.
func (e *env) printReplicas(list admin.ReplicaList) error {
	if _, err := fmt.Fprintf(e.stdout, "cell %s: %d members, %d voters, configured size %d\n",
		e.cell, len(list.Replicas), list.Voters(), list.ConfiguredSize); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCLIENT ADDRESS\tRAFT ADDRESS\tSUFFRAGE\tMASTER\tHEALTHY\tLAST CONTACT")
	for _, r := range list.Replicas {
		mark, healthy, contact := "-", "no", "-"
		if r.Master {
			mark = "*"
		}
		if r.Healthy {
			healthy = "yes"
		}
		if r.Master {
			contact = "0s"
		} else if r.LastContact > 0 {
			contact = r.LastContact.Round(time.Millisecond).String()
		}
		suffrage := r.Suffrage
		if r.Role != "" {
			suffrage = r.Role // a read replica is a non-voter for good
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.ClientAddr), dash(r.RaftAddr), dash(suffrage),
			mark, healthy, contact)
	}
	return tw.Flush()
}
