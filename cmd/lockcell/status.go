package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/admin"
)

// statusTimeout bounds how long status waits for any one replica.
const statusTimeout = 3 * time.Second

// statusCommand shows every replica's view of the cell.
func statusCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the replicas, the master, epoch, term and sessions",
		ArgsUsage: " ",
		Description: "Asks every replica in --replicas (at once, up to " + statusTimeout.String() + " each; " +
			"no session is opened), then every member their answers name that --replicas lacks, for its view of the cell and prints a table: replica id, client " +
			"address, role, master marker (* for the master, - for the others), epoch, term, commit index, applied index, sessions and " +
			"nodes. A replica that does not answer is shown as down, with the error. A replica, or an address in --replicas, " +
			"that is not in the master's configuration (a removed replica, or one never added) is marked \"not a member\". " +
			"The first line names the cell and its master. For a verdict a probe can act on, see `lockcell health`.\n\n" +
			"Exits 0 when a master is known, 1 when no replica knows one (\"no quorum\"). With --json " +
			"prints a list of {\"addr\", \"up\", \"is_master\", \"not_member\", \"error\", \"status\"}, one per replica.\n\n" +
			"Example: lockcell --json status | jq '.[] | select(.is_master) | .addr'",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			if e.homeErr != nil {
				return e.homeErr
			}
			rows := e.queryStatus()
			masterID, masterAddr := pickMaster(rows)
			for i := range rows {
				rows[i].IsMaster = masterID != "" && rows[i].Status != nil && rows[i].Status.Self == masterID
			}
			markNonMembers(rows, masterID)
			var err error
			if e.json {
				err = e.printJSON(rows)
			} else {
				err = e.printStatus(rows, masterID, masterAddr)
			}
			if err != nil {
				return err
			}
			if masterID == "" && masterAddr == "" {
				msg := "status: no quorum: no replica knows a master"
				if !slices.ContainsFunc(rows, func(r statusRow) bool { return !r.refused }) {
					msg += " (every replica refused the connection: is the cell running? are --replicas right?)"
				}
				return &exitStatus{code: exitError, kind: "no_quorum", err: errors.New(msg)}
			}
			return nil
		},
	}
}

// statusRow is one replica in status's output.
type statusRow struct {
	Addr     string `json:"addr"`
	Up       bool   `json:"up"`
	IsMaster bool   `json:"is_master"`
	// NotMember: the replica answering at Addr (or, when none answers,
	// the address) is not in the master's configuration.
	NotMember bool              `json:"not_member,omitempty"`
	Error     string            `json:"error,omitempty"`
	Status    *admin.CellStatus `json:"status,omitempty"`

	refused bool  // nothing listens at Addr
	err     error // why Status is nil
}

// statusQuery asks the replica at addr for its status.
type statusQuery func(ctx context.Context, cfg client.Config, addr string) (*admin.CellStatus, error)

// queryStatus asks every replica in --replicas at once, then every member
// the answers name that --replicas lacks (a replica that joined after the
// flags were written), so the table shows the cell as it is.
func (e *env) queryStatus() []statusRow { return e.queryStatusBy(admin.QueryStatusWith) }

// queryStatusBy is queryStatus asking each replica with query.
func (e *env) queryStatusBy(query statusQuery) []statusRow {
	rows := e.queryAddrs(e.replicas, query)
	answered := map[string]bool{} // by id: --replicas may spell an address another way
	for _, r := range rows {
		if r.Status != nil {
			answered[r.Status.Self] = true
		}
	}
	var more []string
	for _, r := range rows {
		if r.Status == nil {
			continue
		}
		for _, rep := range r.Status.Replicas {
			if rep.ClientAddr != "" && !answered[rep.ID] && !slices.Contains(e.replicas, rep.ClientAddr) && !slices.Contains(more, rep.ClientAddr) {
				more = append(more, rep.ClientAddr)
			}
		}
	}
	return append(rows, e.queryAddrs(more, query)...)
}

// queryAddrs asks the replicas at addrs at once.
func (e *env) queryAddrs(addrs []string, query statusQuery) []statusRow {
	rows := make([]statusRow, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		rows[i].Addr = addr
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(e.ctx, min(e.timeout, statusTimeout))
			defer cancel()
			st, err := query(ctx, client.Config{TLS: e.tls, Dialer: e.dialer()}, addr)
			switch {
			case err != nil:
				msg := errText(err)
				msg = strings.TrimPrefix(msg, "status of "+addr+": ")
				rows[i].Error, rows[i].err = msg, err
				rows[i].refused = errors.Is(err, syscall.ECONNREFUSED)
			case st.Cell != e.cell:
				rows[i].Error = fmt.Sprintf("serves cell %q, not %q", st.Cell, e.cell)
				rows[i].err = errors.New(rows[i].Error)
			default:
				rows[i].Up, rows[i].Status = true, st
			}
		}()
	}
	wg.Wait()
	return rows
}

// pickMaster returns the master as the answering replica with the highest
// term sees it (an old master cut off from the rest may still believe in
// itself under an older term): its id, when known, and client address.
func pickMaster(rows []statusRow) (id, addr string) {
	var best *admin.CellStatus
	for _, r := range rows {
		if st := r.Status; st != nil && st.Master != "" && (best == nil || st.Term > best.Term) {
			best = st
		}
	}
	if best == nil {
		return "", ""
	}
	for _, rep := range best.Replicas {
		if rep.Master {
			return rep.ID, best.Master
		}
	}
	return "", best.Master
}

// markNonMembers marks the rows whose replica is not a member: not in the
// configuration of the master's own answer (or, when the master did not
// answer, of the answer that names it with the highest term). An
// answering replica is judged by its id, a silent one by its address.
// Nothing is marked when no answer names a master: no configuration is
// current enough to judge by.
func markNonMembers(rows []statusRow, masterID string) {
	var view *admin.CellStatus
	for _, r := range rows {
		st := r.Status
		switch {
		case st == nil || st.Master == "":
		case masterID != "" && st.Self == masterID:
			view = st
		case view == nil || view.Self != masterID && st.Term > view.Term:
			view = st
		}
	}
	if view == nil {
		return
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, rep := range view.Replicas {
		ids[rep.ID] = true
		addrs[rep.ClientAddr] = true
	}
	for i, r := range rows {
		if r.Status != nil {
			rows[i].NotMember = !ids[r.Status.Self]
		} else {
			rows[i].NotMember = !addrs[r.Addr]
		}
	}
}

// printStatus prints status's table.
func (e *env) printStatus(rows []statusRow, masterID, masterAddr string) error {
	// Replicas that are down are named by what the others know of them.
	ids := map[string]string{}
	for _, r := range rows {
		if r.Status != nil {
			for _, rep := range r.Status.Replicas {
				ids[rep.ClientAddr] = rep.ID
			}
		}
	}
	master := "none known (no quorum)"
	switch {
	case masterID != "":
		master = masterID + " (" + masterAddr + ")"
	case masterAddr != "":
		master = masterAddr
	}
	if _, err := fmt.Fprintf(e.stdout, "cell %s: master %s\n", e.cell, master); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tMASTER\tEPOCH\tTERM\tCOMMIT\tAPPLIED\tSESSIONS\tNODES")
	for _, r := range rows {
		st := r.Status
		if st == nil {
			id := ids[r.Addr]
			if id == "" {
				id = "?"
			}
			role := "down"
			if r.NotMember {
				role = "down (not a member)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\t\t\t\t\t%s\n", id, r.Addr, role, r.Error)
			continue
		}
		mark := "-"
		if r.IsMaster {
			mark = "*"
		}
		role := strings.ToLower(st.State)
		for _, rep := range st.Replicas {
			if rep.ID == st.Self && rep.Role != "" {
				role += " (" + rep.Role + ")"
			}
		}
		if r.NotMember {
			role += " (not a member)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", st.Self, r.Addr, role, mark,
			st.Epoch, st.Term, st.CommitIndex, st.AppliedIndex, st.Sessions, st.Nodes)
	}
	return tw.Flush()
}
