package cell_test

import (
	"errors"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// A read replica (docs/operations.md, "Read replicas"): in a cell of three
// voters, a member added with AddReadReplica receives the log as a
// non-voter, is never promoted (by this master nor by the next), never
// becomes master, serves reads given MaxStaleness, and its death does not
// touch writes.
func TestReadReplicaServesStaleReadsNeverVotes(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 90*time.Second)
	cl := c.Client(t)
	h := mustOpen(t, ctx, cl, c.Name("f"), client.Read|client.Write|client.Create)
	if err := h.SetContents(ctx, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	rs, p := c.StartJoiner("r1", nil)
	adm := lcadmin.New(cl)
	l, err := adm.AddReadReplica(ctx, "r1", p.ClientAddr, p.RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := l.Find("r1"); !ok || m.Role != "read-replica" || m.Suffrage != lcadmin.SuffrageNonvoter {
		t.Fatalf("after the add: %+v %v", m, ok)
	}
	if _, err := adm.AddReplica(ctx, "r1", p.ClientAddr, p.RaftAddr); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("adding the read replica again as a voter: %v, want ErrBadRequest", err)
	}
	caughtUp := func() bool {
		l, err := adm.Replicas(ctx)
		m, _ := l.Find("r1")
		return err == nil && m.Healthy && m.MatchIndex > 0
	}
	pollUntil(t, 20*time.Second, "the read replica receives the log", caughtUp)
	// It stays a non-voter while the master's promoter runs (every half
	// heartbeat timeout) over a caught-up, healthy non-voter.
	stays := func(who string) {
		t.Helper()
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			l, err := adm.Replicas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m, _ := l.Find("r1"); m.Suffrage != lcadmin.SuffrageNonvoter || m.Role != "read-replica" || l.Voters() != 3 {
				t.Fatalf("%s: the read replica %+v; voters %d", who, m, l.Voters())
			}
			if ok, _ := rs.IsMaster(); ok || rs.Replica().IsLeader() {
				t.Fatalf("%s: the read replica leads", who)
			}
			time.Sleep(100 * time.Millisecond) // observation interval, not synchronisation
		}
	}
	stays("first master")
	// Every replica's status names the role (it is replicated).
	for _, addr := range []string{p.ClientAddr, c.Addrs()[0]} {
		st, err := lcadmin.QueryStatus(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		var role string
		for _, r := range st.Replicas {
			if r.ID == "r1" {
				role = r.Role
			}
		}
		if role != "read-replica" {
			t.Fatalf("the status from %s gives r1 the role %q", addr, role)
		}
	}
	pollUntil(t, 20*time.Second, "the read replica answers a stale read", func() bool {
		var info client.ReadInfo
		got, _, err := h.GetContentsAndStat(ctx, client.MaxStaleness(2*time.Second), client.WithReadInfo(&info))
		return err == nil && string(got) == "v1" && info.Replica == "r1" && info.Follower
	})

	// A fail-over: the next master does not promote it either, and it
	// does not stand for election.
	old := c.StopMaster()
	m := c.WaitForMaster(30 * time.Second)
	if ok, _ := rs.IsMaster(); ok {
		t.Fatal("the read replica became master")
	}
	t.Logf("master %d stopped, %d took over", old, m)
	stays("next master")
	c.Start(old)

	// Its death does not touch writes.
	if err := rs.Close(); err != nil {
		t.Logf("closing the read replica: %v", err)
	}
	for i := range 5 {
		wctx := ctxT(t, 10*time.Second)
		if err := h.SetContents(wctx, []byte{'w', byte('0' + i)}); err != nil {
			t.Fatalf("write %d with the read replica down: %v", i, err)
		}
	}
	got, _, err := h.GetContentsAndStat(ctx, client.MaxStaleness(time.Second))
	if err != nil || string(got) != "w4" {
		t.Fatalf("stale read with the read replica down: %q %v", got, err)
	}
}
