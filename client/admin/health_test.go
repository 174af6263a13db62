package admin_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"lockcell/client/admin"
)

// healthCell builds the answers of a five-voter cell whose master is
// replica 1: each replica at 127.0.0.1:700<id>, every one applied up to
// the master's commit index and heard from 50 ms ago.
func healthCell() []admin.StatusAnswer {
	var members []admin.ReplicaStatus
	for _, id := range []string{"1", "2", "3", "4", "5"} {
		members = append(members, admin.ReplicaStatus{ID: id, ClientAddr: "127.0.0.1:700" + id, Master: id == "1",
			Suffrage: admin.SuffrageVoter, Healthy: true, LastContact: 50 * time.Millisecond, MatchIndex: 100})
	}
	members[0].LastContact, members[0].MatchIndex = 0, 0
	var out []admin.StatusAnswer
	for _, m := range members {
		st := &admin.CellStatus{Cell: "c", Self: m.ID, State: "Follower", Master: "127.0.0.1:7001", Term: 3,
			CommitIndex: 100, AppliedIndex: 100, Replicas: members, Detail: true, Disk: &admin.DiskUsage{DataBytes: 1}}
		if m.Master {
			st.State = "Leader"
			st.Replicas = append([]admin.ReplicaStatus(nil), members...)
		}
		out = append(out, admin.StatusAnswer{Addr: m.ClientAddr, Status: st})
	}
	return out
}

func down(a *admin.StatusAnswer) {
	a.Status, a.Err = nil, errors.New("connection refused")
}

// TestJudgeHealth: the verdict follows the voters (answering, heard from,
// not lagging) and the quorum; non-voters and addresses that are not
// members never count against the cell.
func TestJudgeHealth(t *testing.T) {
	lim := admin.HealthLimits{MaxLag: 10, MaxContact: time.Second}
	cases := []struct {
		name     string
		change   func(a []admin.StatusAnswer) []admin.StatusAnswer
		verdict  string
		healthy  int
		problems []string
	}{
		{"all well", nil, admin.HealthHealthy, 5, nil},
		{"one voter down", func(a []admin.StatusAnswer) []admin.StatusAnswer { down(&a[2]); return a },
			admin.HealthDegraded, 4, []string{"replica 3 (127.0.0.1:7003): does not answer: connection refused"}},
		{"one voter lagging", func(a []admin.StatusAnswer) []admin.StatusAnswer { a[3].Status.AppliedIndex = 80; return a },
			admin.HealthDegraded, 4, []string{"replica 4 (127.0.0.1:7004): 20 entries behind the master (more than 10)"}},
		{"one voter not heard from", func(a []admin.StatusAnswer) []admin.StatusAnswer {
			a[0].Status.Replicas[4].LastContact = 3 * time.Second
			return a
		}, admin.HealthDegraded, 4, []string{"replica 5 (127.0.0.1:7005): the master last heard from it 3s ago (more than 1s)"}},
		{"three voters down", func(a []admin.StatusAnswer) []admin.StatusAnswer {
			down(&a[1])
			down(&a[2])
			down(&a[3])
			return a
		}, admin.HealthUnavailable, 2, []string{"only 2 of 5 voters are healthy, short of a quorum of 3",
			"replica 2 (127.0.0.1:7002): does not answer"}},
		{"no master", func(a []admin.StatusAnswer) []admin.StatusAnswer {
			down(&a[0])
			for _, x := range a[1:] {
				x.Status.Master = ""
			}
			return a
		}, admin.HealthUnavailable, 4, []string{"no replica knows a master"}},
		{"the master does not answer", func(a []admin.StatusAnswer) []admin.StatusAnswer { down(&a[0]); return a },
			admin.HealthUnavailable, 4, []string{"named by the replicas does not answer"}},
		{"a removed replica still answering, and a dead address", func(a []admin.StatusAnswer) []admin.StatusAnswer {
			gone := &admin.CellStatus{Cell: "c", Self: "9", State: "Follower", Term: 2}
			return append(a, admin.StatusAnswer{Addr: "127.0.0.1:7009", Status: gone},
				admin.StatusAnswer{Addr: "127.0.0.1:7010", Err: errors.New("connection refused")})
		}, admin.HealthHealthy, 5, nil},
		{"a non-voter down and catching up", func(a []admin.StatusAnswer) []admin.StatusAnswer {
			nv := admin.ReplicaStatus{ID: "6", ClientAddr: "127.0.0.1:7006", Suffrage: admin.SuffrageNonvoter, LastContact: time.Millisecond, MatchIndex: 5}
			a[0].Status.Replicas = append(a[0].Status.Replicas, nv)
			return append(a, admin.StatusAnswer{Addr: nv.ClientAddr, Err: errors.New("connection refused")})
		}, admin.HealthHealthy, 5, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := healthCell()
			if tc.change != nil {
				a = tc.change(a)
			}
			rep := admin.JudgeHealth("c", a, lim)
			if rep.Verdict != tc.verdict || rep.Quorum.HealthyVoters != tc.healthy || rep.Quorum.Voters != 5 || rep.Quorum.Needed != 3 {
				t.Fatalf("verdict %s, quorum %+v, problems %q; want %s with %d healthy voters", rep.Verdict, rep.Quorum, rep.Problems, tc.verdict, tc.healthy)
			}
			if (len(rep.Problems) == 0) != (len(tc.problems) == 0) {
				t.Fatalf("problems %q; want %q", rep.Problems, tc.problems)
			}
			for _, p := range tc.problems {
				if !slices.ContainsFunc(rep.Problems, func(q string) bool { return strings.Contains(q, p) }) {
					t.Fatalf("problems %q; want one saying %q", rep.Problems, p)
				}
			}
			for _, p := range rep.Problems {
				if strings.HasSuffix(p, ": ") {
					t.Fatalf("a problem that says nothing: %q", rep.Problems)
				}
			}
			for _, r := range rep.Replicas {
				if r.Member != (r.ID != "9" && r.ID != "?") {
					t.Fatalf("replica %s at %s: member %v", r.ID, r.Addr, r.Member)
				}
			}
		})
	}
}

// TestJudgeHealthLagOfASilentMember: a member that does not answer is
// judged by the master's match index for it.
func TestJudgeHealthLagOfASilentMember(t *testing.T) {
	a := healthCell()
	down(&a[4])
	a[0].Status.Replicas[4].MatchIndex = 40
	rep := admin.JudgeHealth("c", a, admin.HealthLimits{MaxLag: 10, MaxContact: time.Second})
	r := rep.Replicas[4]
	if r.ID != "5" || r.Reachable || r.Lag == nil || *r.Lag != 60 || r.Healthy || rep.Verdict != admin.HealthDegraded {
		t.Fatalf("silent member: %+v (lag %v); verdict %s", r, r.Lag, rep.Verdict)
	}
}
