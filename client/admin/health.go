package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"lockcell/client"
	"lockcell/wire"
)

// DiskUsage is what one replica keeps on disk, in bytes: the whole data
// folder, the Raft log store within it, the snapshots it retains, and the
// newest snapshot's size and the log index it covers (0 when it has
// none). The replica measures at most every few seconds; Age is how old
// the figures were when it answered.
type DiskUsage struct {
	DataBytes         int64         `json:"data_bytes"`
	LogStoreBytes     int64         `json:"log_store_bytes"`
	SnapshotsBytes    int64         `json:"snapshots_bytes"`
	LastSnapshotBytes int64         `json:"last_snapshot_bytes"`
	LastSnapshotIndex uint64        `json:"last_snapshot_index"`
	Age               time.Duration `json:"age_ns"`
}

// QueryStatusDetail is QueryStatusWith with the health detail: the
// replica's disk usage and, from the master, each member's health, last
// contact and match index (CellStatus.Detail says it was given; a replica
// of a version that predates it answers without). Only the cell's admin
// and the principals listed in the ACL file /ls/<cell>/acl/monitor may
// ask; anyone else gets an error that wraps client.ErrPermission and names that
// file.
func QueryStatusDetail(ctx context.Context, cfg client.Config, addr string) (*CellStatus, error) {
	resp, err := cellStatus(ctx, cfg, addr, &wire.CellStatusRequest{Detail: true})
	if err != nil {
		return nil, err
	}
	return cellStatusOf(resp), nil
}

// Verdicts of a HealthReport.
const (
	// HealthHealthy: a master serves, and every voter answers, was heard
	// from by the master lately and is not lagging.
	HealthHealthy = "healthy"
	// HealthDegraded: a master serves and a quorum of voters is healthy,
	// but at least one voter is not.
	HealthDegraded = "degraded"
	// HealthUnavailable: no master is known or reachable, or fewer voters
	// are healthy than a quorum of them: the cell cannot, or soon may
	// not, serve.
	HealthUnavailable = "unavailable"
)

// HealthLimits are the thresholds past which a member that answers
// counts as unhealthy.
type HealthLimits struct {
	// MaxLag is how many log entries a member may be behind the master:
	// the master's commit index minus the member's applied index (or,
	// when the member does not answer, minus the master's match index
	// for it).
	MaxLag uint64
	// MaxContact is how long ago the master may last have heard from a
	// member (0: not checked).
	MaxContact time.Duration
}

// StatusAnswer is one replica's answer to a status query, or why there
// is none: Addr is where it was asked, Status its answer (nil when Err
// says why not).
type StatusAnswer struct {
	Addr   string
	Status *CellStatus
	Err    error
}

// HealthMaster names the master a HealthReport found.
type HealthMaster struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	Term uint64 `json:"term"`
}

// HealthQuorum counts the voters of the master's configuration, how many
// a quorum needs, and how many are healthy; Kept says the healthy ones
// make a quorum.
type HealthQuorum struct {
	Voters        int  `json:"voters"`
	Needed        int  `json:"needed"`
	HealthyVoters int  `json:"healthy_voters"`
	Kept          bool `json:"kept"`
}

// ReplicaHealth is one replica in a HealthReport. Member is false for an
// address that no member of the master's configuration has (a removed
// replica, or one never added): such a row never counts against the
// cell's health. Lag and LastContact are nil when unknown; LastContact is
// the master's view (0 for the master itself).
type ReplicaHealth struct {
	ID           string         `json:"id"`
	Addr         string         `json:"addr"`
	Member       bool           `json:"member"`
	Voter        bool           `json:"voter"`
	Master       bool           `json:"master"`
	Reachable    bool           `json:"reachable"`
	Error        string         `json:"error,omitempty"`
	Role         string         `json:"role,omitempty"`
	Term         uint64         `json:"term,omitempty"`
	CommitIndex  uint64         `json:"commit_index,omitempty"`
	AppliedIndex uint64         `json:"applied_index,omitempty"`
	MatchIndex   uint64         `json:"match_index,omitempty"`
	Lag          *uint64        `json:"lag"`
	LastContact  *time.Duration `json:"last_contact_ns"`
	Disk         *DiskUsage     `json:"disk,omitempty"`
	Healthy      bool           `json:"healthy"`
	Problems     []string       `json:"problems,omitempty"`
}

// HealthReport is the cell's health as JudgeHealth finds it: the verdict,
// the master, the quorum, every replica, and the problems that made the
// verdict what it is (a non-voter's or a non-member's problems are in its
// row only: they do not count against the cell).
type HealthReport struct {
	Cell     string          `json:"cell"`
	Verdict  string          `json:"verdict"`
	Master   *HealthMaster   `json:"master"`
	Quorum   HealthQuorum    `json:"quorum"`
	Replicas []ReplicaHealth `json:"replicas"`
	Problems []string        `json:"problems"`
}

// JudgeHealth judges cell's health from the replicas' answers (from
// QueryStatusDetail; plain QueryStatusWith answers give no disk figures,
// match indexes or last contacts, so those go unchecked). The master is
// the one named by the answer with the highest term, and must answer as
// the leader itself; the members are its configuration. A member is
// healthy when it answers, the master heard from it within
// lim.MaxContact, and it is at most lim.MaxLag entries behind the
// master's commit index. The verdict: HealthUnavailable when no master is
// known or answers, or fewer voters are healthy than a quorum of them;
// else HealthDegraded when a voter is unhealthy; else HealthHealthy.
func JudgeHealth(cell string, answers []StatusAnswer, lim HealthLimits) *HealthReport {
	rep := &HealthReport{Cell: cell, Problems: []string{}, Replicas: []ReplicaHealth{}}
	var named *CellStatus // the answer naming a master, with the highest term
	var newest *CellStatus
	for _, a := range answers {
		st := a.Status
		if st == nil {
			continue
		}
		if newest == nil || st.Term > newest.Term {
			newest = st
		}
		if st.Master != "" && (named == nil || st.Term > named.Term) {
			named = st
		}
	}
	var masterID string
	if named != nil {
		for _, r := range named.Replicas {
			if r.Master {
				masterID = r.ID
			}
		}
	}
	var ms *CellStatus // the master's own answer
	for _, a := range answers {
		if st := a.Status; st != nil && masterID != "" && st.Self == masterID && st.State == "Leader" {
			ms = st
		}
	}
	view := ms // whose configuration says who the members are
	switch {
	case ms != nil:
		rep.Master = &HealthMaster{ID: ms.Self, Addr: ms.Master, Term: ms.Term}
	case named != nil:
		view = named
		who := named.Master
		if masterID != "" {
			who = masterID + " (" + named.Master + ")"
		}
		rep.Problems = append(rep.Problems, "the master "+who+" named by the replicas does not answer as the master")
	default:
		view = newest
		rep.Problems = append(rep.Problems, "no replica knows a master: no quorum of voters elects one")
	}

	used := make([]bool, len(answers))
	if view != nil {
		for _, m := range view.Replicas {
			h := judgeMember(m, answers, used, ms, masterID, lim)
			rep.Replicas = append(rep.Replicas, h)
			if !h.Voter {
				continue
			}
			rep.Quorum.Voters++
			if h.Healthy {
				rep.Quorum.HealthyVoters++
			} else {
				rep.Problems = append(rep.Problems, "replica "+h.ID+" ("+dashed(h.Addr)+"): "+strings.Join(h.Problems, "; "))
			}
		}
	}
	members := map[string]bool{}
	for _, h := range rep.Replicas {
		members[h.ID] = true
	}
	for i, a := range answers {
		if used[i] || a.Status != nil && members[a.Status.Self] {
			continue // a member asked twice, under two spellings of its address
		}
		h := ReplicaHealth{ID: "?", Addr: a.Addr, Problems: []string{"not a member of the cell's configuration"}}
		fillAnswer(&h, a)
		rep.Replicas = append(rep.Replicas, h)
	}
	rep.Quorum.Needed = rep.Quorum.Voters/2 + 1
	rep.Quorum.Kept = view != nil && rep.Quorum.HealthyVoters >= rep.Quorum.Needed
	switch {
	case ms == nil:
		rep.Verdict = HealthUnavailable
	case !rep.Quorum.Kept:
		rep.Verdict = HealthUnavailable
		rep.Problems = append(rep.Problems, fmt.Sprintf("only %d of %d voters are healthy, short of a quorum of %d",
			rep.Quorum.HealthyVoters, rep.Quorum.Voters, rep.Quorum.Needed))
	case rep.Quorum.HealthyVoters < rep.Quorum.Voters:
		rep.Verdict = HealthDegraded
	default:
		rep.Verdict = HealthHealthy
	}
	return rep
}

// judgeMember judges member m of the master's configuration: its own
// answer (found by id, else by its client address, and marked used), and
// the master's view of it.
func judgeMember(m ReplicaStatus, answers []StatusAnswer, used []bool, ms *CellStatus, masterID string, lim HealthLimits) ReplicaHealth {
	h := ReplicaHealth{ID: m.ID, Addr: m.ClientAddr, Member: true, Voter: m.Suffrage != SuffrageNonvoter, Master: m.ID == masterID}
	found := -1
	for i, a := range answers {
		if !used[i] && a.Status != nil && a.Status.Self == m.ID {
			found = i
			break
		}
	}
	for i, a := range answers {
		if found < 0 && !used[i] && a.Status == nil && a.Addr == m.ClientAddr && m.ClientAddr != "" {
			found = i
		}
	}
	var st *CellStatus
	if found >= 0 {
		used[found] = true
		h.Addr = answers[found].Addr
		fillAnswer(&h, answers[found])
		st = answers[found].Status
	} else {
		h.Error = "no client address known"
		if m.ClientAddr != "" {
			h.Error = "no answer came from it"
		}
		h.Problems = append(h.Problems, "does not answer: "+h.Error)
	}
	if ms == nil {
		// Without the master's answer, answering is all that can be
		// judged (the verdict is unavailable anyway).
		h.Healthy = len(h.Problems) == 0
		return h
	}
	// The master's view of the member.
	var mv *ReplicaStatus
	for i := range ms.Replicas {
		if ms.Replicas[i].ID == m.ID {
			mv = &ms.Replicas[i]
		}
	}
	switch {
	case h.Master:
		zero := time.Duration(0)
		h.LastContact = &zero
	case mv != nil && ms.Detail:
		h.MatchIndex = mv.MatchIndex
		if mv.LastContact > 0 {
			c := mv.LastContact
			h.LastContact = &c
			if lim.MaxContact > 0 && c > lim.MaxContact {
				h.Problems = append(h.Problems, fmt.Sprintf("the master last heard from it %v ago (more than %v)",
					c.Round(time.Millisecond), lim.MaxContact))
			}
		} else {
			h.Problems = append(h.Problems, "the master has not heard from it in this term")
		}
	}
	var lag uint64
	switch {
	case st != nil:
		lag = behind(ms.CommitIndex, st.AppliedIndex)
	case h.MatchIndex > 0:
		lag = behind(ms.CommitIndex, h.MatchIndex)
	default:
		h.Healthy = len(h.Problems) == 0
		return h
	}
	h.Lag = &lag
	if lag > lim.MaxLag {
		what := fmt.Sprintf("%d entries behind the master (more than %d)", lag, lim.MaxLag)
		if !h.Voter {
			what += ": catching up"
		}
		h.Problems = append(h.Problems, what)
	}
	h.Healthy = len(h.Problems) == 0
	return h
}

// fillAnswer copies what replica answer a says into h.
func fillAnswer(h *ReplicaHealth, a StatusAnswer) {
	st := a.Status
	if st == nil {
		h.Error = "no answer"
		if a.Err != nil {
			h.Error = a.Err.Error()
		}
		h.Problems = append(h.Problems, "does not answer: "+h.Error)
		return
	}
	h.Reachable = true
	if h.ID == "?" {
		h.ID = st.Self
	}
	h.Role, h.Term, h.CommitIndex, h.AppliedIndex, h.Disk = strings.ToLower(st.State), st.Term, st.CommitIndex, st.AppliedIndex, st.Disk
}

// behind is how far b is behind a (0 when it is not).
func behind(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
