package client_test

import (
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/fsm"
)

// A follower's staleness bound, alone (the reader's floor forgotten
// before each read, so only the bound can keep an old state from it),
// against a real five-replica cell whose Raft links the test controls
// (docs/flows.md, "Flow: a follower read"). A follower whose appends are
// stuck while heartbeats still reach it (raft's LastContact stays fresh,
// so a rule built on it would answer), and one cut off from the leader,
// never answer a state older than the bound: every read begun more than
// the bound after a write sees it, and the cut-off follower stops
// answering once its proof is older than the bound; reads sent to it go
// to the master.
func TestFollowerReadRefusesPastTheBound(t *testing.T) {
	c, link := fixtures.NewLinkedCell(t, 5, fixtures.Options{})
	ctx := testCtx(t, 90*time.Second)
	m := c.WaitForMaster(30 * time.Second)
	writer, reader := c.Client(t), c.Client(t)
	w := open(t, ctx, writer, c.Name("f"), client.Read|client.Write|client.Create)
	if err := w.SetContents(ctx, []byte("old")); err != nil {
		t.Fatal(err)
	}
	r := open(t, ctx, reader, c.Name("f"), client.Read)
	const bound = 600 * time.Millisecond
	f := (m + 1) % 5 // a follower
	fid := c.Server(f).ID()
	for _, mode := range []fixtures.LinkMode{fixtures.LinkHoldAppends, fixtures.LinkCut} {
		waitUntil(t, 10*time.Second, "follower "+fid+" answers", func() bool {
			var info client.ReadInfo
			_, _, err := r.GetContentsAndStat(ctx, client.MaxStaleness(bound), client.WithReadInfo(&info))
			return err == nil && info.Replica == fid
		})
		link(fid).Set(mode)
		cutAt := time.Now()
		want := []byte{'n', byte('0' + mode)}
		st, err := w.SetContentsAndStat(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		fellBack, fromF, late := false, 0, 0
		for end := written.Add(4 * bound); time.Now().Before(end); {
			reader.ForgetReadFloor()
			start := time.Now()
			var info client.ReadInfo
			got, _, err := r.GetContentsAndStat(ctx, client.MaxStaleness(bound), client.WithReadInfo(&info))
			if err != nil {
				t.Fatalf("mode %d: %v", mode, err)
			}
			if start.After(written.Add(bound)) {
				late++
				if string(got) != string(want) {
					t.Fatalf("mode %d: read %q begun %v after the write of %q, past the bound of %v (answered by %+v)",
						mode, got, start.Sub(written), want, bound, info)
				}
			}
			if info.Replica == fid {
				fromF++
				if start.After(cutAt.Add(bound)) {
					t.Fatalf("mode %d: the cut-off follower answered %v after the cut: %+v", mode, start.Sub(cutAt), info)
				}
			}
			fellBack = fellBack || !info.Follower
		}
		if !fellBack || late < 8 {
			t.Fatalf("mode %d: fell back to the master: %v; reads past the bound: %d", mode, fellBack, late)
		}
		var behind bool
		_ = c.Server(f).Replica().FSM().Read(func(v fsm.View) error {
			_, idx := v.Indexes()
			behind = idx < st.ContentGen
			return nil
		})
		if !behind {
			t.Fatalf("mode %d: the follower applied the write: the link did not hold it", mode)
		}
		link(fid).Set(fixtures.LinkOpen)
		t.Logf("mode %d: the follower answered %d reads within the bound of its last proof, then refused", mode, fromF)
	}
}
