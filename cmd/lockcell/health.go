package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
)

// Exit codes of health besides exitOK, exitError and exitUsage.
const (
	exitDegraded    = 3
	exitUnavailable = 4
)

// Defaults of health's thresholds.
const (
	defaultMaxLag     = 1000
	defaultMaxContact = 3 * time.Second
)

// healthCommand judges the cell's health for scripts and probes.
func healthCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "check the cell's health: every replica's reachability, lag, last contact and disk, and a verdict",
		ArgsUsage: " ",
		Description: "Asks every replica in --replicas, then every member their answers name (at once, up to " +
			statusTimeout.String() + " each; no session is opened), for its status with the health detail, and prints " +
			"one row per replica: id, address, role, voter or not, term, commit and applied index, lag (entries the " +
			"replica is behind the master's commit index; for a replica that does not answer, the master's match " +
			"index for it), last contact (how long ago the master heard from it), its disk (data folder, Raft log " +
			"store, snapshots, and the newest snapshot's size and index) and its problems; then the problems and a " +
			"verdict line.\n\n" +
			"The members are the master's configuration. A voter is healthy when it answers, the master heard from " +
			"it within --max-contact, and it is at most --max-lag entries behind. An address in --replicas whose " +
			"replica is not a member (removed, or never added) is shown as \"not a member\" and does not count; nor " +
			"do non-voters (a new member catching up), whose problems show in their row only.\n\n" +
			"The detail needs the cell's admin or the monitoring role: a principal listed in the ACL file " +
			"/ls/<cell>/acl/monitor (one principal a line, as every ACL file).\n\n" +
			"Exit codes: 0 healthy; 3 degraded (a voter is down, unreachable, not heard from or lagging, and a " +
			"quorum of voters is healthy); 4 unavailable (no master known or answering, or fewer healthy voters " +
			"than a quorum); 1 other errors (e.g. permission: the caller has neither role; or the cell refused " +
			"the caller's certificate); 2 usage.\n\n" +
			"With --json prints one document: {\"cell\", \"verdict\": \"healthy|degraded|unavailable\", \"master\": " +
			"{\"id\", \"addr\", \"term\"} or null, \"quorum\": {\"voters\", \"needed\", \"healthy_voters\", \"kept\"}, " +
			"\"replicas\": [{\"id\", \"addr\", \"member\", \"voter\", \"master\", \"reachable\", \"role\", \"term\", " +
			"\"commit_index\", \"applied_index\", \"match_index\", \"lag\", \"last_contact_ns\", \"disk\", \"healthy\", " +
			"\"problems\"}], \"problems\": [...]}.\n\n" +
			"Examples:\n" +
			"   lockcell health\n" +
			"   lockcell health --max-lag 5000 --max-contact 10s\n" +
			"   lockcell --json health | jq -r .verdict",
		Flags: []cli.Flag{
			&cli.Uint64Flag{Name: "max-lag", Value: defaultMaxLag,
				Usage: "entries a voter may be behind the master's commit index before it counts as unhealthy"},
			&cli.DurationFlag{Name: "max-contact", Value: defaultMaxContact,
				Usage: "how long ago the master may last have heard from a voter before it counts as unhealthy"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			lim := admin.HealthLimits{MaxLag: c.Uint64("max-lag"), MaxContact: c.Duration("max-contact")}
			if lim.MaxContact <= 0 {
				return usageErrorf(c, "--max-contact must be positive, got %v", lim.MaxContact)
			}
			if e.homeErr != nil {
				return e.homeErr
			}
			rows := e.queryStatusBy(admin.QueryStatusDetail)
			answers := make([]admin.StatusAnswer, len(rows))
			for i, r := range rows {
				// The caller's own problems are not the cell's: exit 1,
				// not a verdict a probe would page on.
				switch {
				case errors.Is(r.err, client.ErrPermission):
					return &opError{op: "health", err: r.err,
						hint: "use the admin's --cert and --key, or have the admin list your principal in acl/monitor"}
				case errors.Is(r.err, client.ErrCertificateRefused):
					return &opError{op: "health", err: r.err}
				}
				answers[i] = admin.StatusAnswer{Addr: r.Addr, Status: r.Status, Err: r.err}
				if r.err != nil {
					answers[i].Err = errors.New(r.Error) // without the client's "status of ADDR:" prefix
				}
			}
			rep := admin.JudgeHealth(e.cell, answers, lim)
			var err error
			if e.json {
				err = e.printJSON(rep)
			} else {
				err = e.printHealth(rep)
			}
			if err != nil {
				return err
			}
			switch rep.Verdict {
			case admin.HealthDegraded:
				return &exitStatus{code: exitDegraded}
			case admin.HealthUnavailable:
				return &exitStatus{code: exitUnavailable}
			}
			return nil
		},
	}
}

// printHealth prints health's table, its problems and the verdict line.
func (e *env) printHealth(rep *admin.HealthReport) error {
	master := "none known"
	if m := rep.Master; m != nil {
		master = fmt.Sprintf("%s (%s), term %d", m.ID, m.Addr, m.Term)
	}
	if _, err := fmt.Fprintf(e.stdout, "cell %s: master %s\n", rep.Cell, master); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tVOTER\tTERM\tCOMMIT\tAPPLIED\tLAG\tCONTACT\tDATA\tLOG\tSNAPSHOTS\tLAST SNAPSHOT\tHEALTH")
	for _, r := range rep.Replicas {
		role, voter := dash(r.Role), "no"
		switch {
		case !r.Member:
			role, voter = "not a member", "-"
		case !r.Reachable:
			role = "down"
		}
		if r.Voter {
			voter = "yes"
		}
		if r.Master {
			role += " *"
		}
		term, commit, applied := "-", "-", "-"
		if r.Reachable {
			term, commit, applied = strconv.FormatUint(r.Term, 10), strconv.FormatUint(r.CommitIndex, 10), strconv.FormatUint(r.AppliedIndex, 10)
		}
		lag, contact := "-", "-"
		if r.Lag != nil {
			lag = strconv.FormatUint(*r.Lag, 10)
		}
		if r.LastContact != nil {
			contact = r.LastContact.Round(time.Millisecond).String()
		}
		data, logs, snaps, last := "-", "-", "-", "-"
		if d := r.Disk; d != nil {
			data, logs, snaps = humanBytes(float64(d.DataBytes)), humanBytes(float64(d.LogStoreBytes)), humanBytes(float64(d.SnapshotsBytes))
			if d.LastSnapshotIndex > 0 {
				last = fmt.Sprintf("%s @%d", humanBytes(float64(d.LastSnapshotBytes)), d.LastSnapshotIndex)
			}
		}
		health := "ok"
		if !r.Healthy {
			health = strings.Join(r.Problems, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Addr), role, voter,
			term, commit, applied, lag, contact, data, logs, snaps, last, health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(e.stdout, "problem: %s\n", p)
	}
	q := rep.Quorum
	_, err := fmt.Fprintf(e.stdout, "verdict: %s (%d of %d voters healthy, a quorum needs %d)\n", rep.Verdict, q.HealthyVoters, q.Voters, q.Needed)
	return err
}
