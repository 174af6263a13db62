package cell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
	"lockcell/master"
	"lockcell/wire"
)

// Follower reads of bounded staleness (docs/flows.md, "Flow: a follower
// read"; docs/spec.md, "Reads of bounded staleness"), against real cells:
// a read given MaxStaleness is answered by a replica that is not the
// master, within the bound, never from or into the cache; a follower that
// cannot prove its state fresh refuses and the read goes to the master;
// a denial is word for word the master's.

// A read given MaxStaleness is answered by followers, spread over them,
// within the bound, and sees the caller's own write at once (its floor).
// It neither reads nor fills the cache.
func TestFollowerReadServedByFollowers(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	m := c.WaitForMaster(30 * time.Second)
	masterID := c.Server(m).ID()
	cl := c.Client(t)
	h := mustOpen(t, ctx, cl, c.Name("f"), client.Read|client.Write|client.Create)
	const bound = 2 * time.Second
	seen := map[string]bool{}
	want := []byte("v1")
	if err := h.SetContents(ctx, want); err != nil {
		t.Fatal(err)
	}
	// Right after its own write, a caller reads it, from whichever
	// replica holds it (the floor), then from every follower in turn.
	for i := 0; len(seen) < 4; i++ {
		var info client.ReadInfo
		got, st, err := h.GetContentsAndStat(ctx, client.MaxStaleness(bound), client.WithReadInfo(&info))
		if err != nil {
			t.Fatalf("stale read %d: %v", i, err)
		}
		if string(got) != string(want) {
			t.Fatalf("stale read %d after the caller's own write: %q, want %q", i, got, want)
		}
		if i > 200 {
			t.Fatalf("after %d stale reads, followers %v answered: want all four", i, seen)
		}
		if !info.Follower {
			continue // a follower not yet caught up: the master answered
		}
		if info.Replica == masterID {
			t.Fatalf("stale read %d answered by the master %s as a follower: %+v", i, masterID, info)
		}
		if info.Age > bound || info.Index < st.ContentGen {
			t.Fatalf("stale read %d: %+v; bound %v, content generation %d", i, info, bound, st.ContentGen)
		}
		seen[info.Replica] = true
	}
	if len(seen) < 2 {
		t.Fatalf("stale reads answered by followers %v: want them spread over at least two", seen)
	}
	var info client.ReadInfo
	if _, err := h.GetStat(ctx, client.MaxStaleness(bound), client.WithReadInfo(&info)); err != nil || !info.Follower {
		t.Fatalf("stale stat: %+v %v", info, err)
	}
	d := mustOpen(t, ctx, cl, c.Name("d"), client.Read|client.Write|client.Create|client.Directory)
	for _, n := range []string{"a", "b", "c"} {
		mustOpen(t, ctx, cl, c.Name("d/"+n), client.Read|client.Write|client.Create).Close()
	}
	ents, err := d.ReadDir(ctx, client.MaxStaleness(bound), client.WithReadInfo(&info))
	if err != nil || len(ents) != 3 || !info.Follower {
		t.Fatalf("stale listing: %v %+v %v", ents, info, err)
	}

	// The cache: a stale read never fills it (the next read goes out)
	// and never answers from it (it goes out though the name is cached).
	g := mustOpen(t, ctx, cl, c.Name("g"), client.Read|client.Write|client.Create)
	if err := g.SetContents(ctx, []byte("g1")); err != nil {
		t.Fatal(err)
	}
	calls := func(read func() error) uint64 {
		t.Helper()
		before := testhook.CallsSent()
		if err := read(); err != nil {
			t.Fatal(err)
		}
		return testhook.CallsSent() - before
	}
	stale := func() error { _, _, err := g.GetContentsAndStat(ctx, client.MaxStaleness(bound)); return err }
	fresh := func() error { _, _, err := g.GetContentsAndStat(ctx); return err }
	if n := calls(stale); n == 0 {
		t.Fatal("a stale read sent no call")
	}
	if n := calls(fresh); n == 0 {
		t.Fatal("a stale read filled the cache: the next linearizable read sent no call")
	}
	if n := calls(fresh); n != 0 {
		t.Fatalf("the linearizable read did not fill the cache (%d calls on the second)", n)
	}
	if n := calls(stale); n == 0 {
		t.Fatal("a stale read was answered from the cache")
	}
}

// A caller without read permission gets from a follower exactly the
// error the master gives (code and words), so it learns nothing more of
// the name there; a caller with it reads the same contents from both.
func TestFollowerReadDenialIsTheMasters(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "reader")
	c := fixtures.NewCell(t, 5, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx := ctxT(t, 60*time.Second)
	m := c.WaitForMaster(30 * time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	reader := c.ClientWith(t, c.ClientConfigAs("reader"))
	mk := func(rel string, mode client.OpenMode, contents string, a *client.ACL) {
		t.Helper()
		h := mustOpen(t, ctx, admin, c.Name(rel), mode|client.Read|client.Write|client.Create, client.WithContents([]byte(contents)))
		if a != nil {
			if _, err := h.SetACL(ctx, *a); err != nil {
				t.Fatalf("SetACL %s: %v", rel, err)
			}
		}
		h.Close()
	}
	mk("acl", client.Directory, "", nil)
	mk("acl/nobody", 0, "# no one\n", nil)
	mk("acl/pubw", 0, "reader\n", nil)
	mk("secret", 0, "s3cret", &client.ACL{Read: "nobody", Write: "pubw"})
	h := mustOpen(t, ctx, reader, c.Name("secret"), client.Write)
	_, _, masterErr := h.GetContentsAndStat(ctx)
	if !errors.Is(masterErr, client.ErrPermission) {
		t.Fatalf("the master's answer to a read without permission: %v", masterErr)
	}
	masterAddr := c.Server(m).ClientAddr()
	followers := map[string]bool{}
	for i := 0; len(followers) < 4; i++ {
		if i > 200 {
			t.Fatalf("after %d stale reads, followers %v denied: want all four", i, followers)
		}
		var info client.ReadInfo
		_, _, err := h.GetContentsAndStat(ctx, client.MaxStaleness(2*time.Second), client.WithReadInfo(&info))
		if err == nil {
			t.Fatalf("a stale read without read permission succeeded: %+v", info)
		}
		if !info.Follower {
			continue // a follower that could not answer: the master did
		}
		if info.Addr == masterAddr {
			t.Fatalf("the master answered as a follower: %+v", info)
		}
		if err.Error() != masterErr.Error() || wire.CodeOf(err) != wire.CodeOf(masterErr) {
			t.Fatalf("follower %s denied with %q (%s), the master with %q (%s)", info.Addr, err, wire.CodeOf(err).Name(),
				masterErr, wire.CodeOf(masterErr).Name())
		}
		followers[info.Addr] = true
	}
	a := mustOpen(t, ctx, admin, c.Name("secret"), client.Read)
	var info client.ReadInfo
	got, _, err := a.GetContentsAndStat(ctx, client.MaxStaleness(2*time.Second), client.WithReadInfo(&info))
	if err != nil || string(got) != "s3cret" {
		t.Fatalf("the admin's stale read: %q %v (%+v)", got, err, info)
	}
}

// A principal's follower reads are rationed on the follower that answers
// them, as its reads are on the master: a reader pulling a 60 KiB file
// through the followers as fast as it can gets about the ration's worth
// of bytes a second from each, not what the replicas could serve.
func TestFollowerReadRationed(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "reader")
	const rate = 64 << 10
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: certs, Admin: "admin", SessionLimits: master.Limits{ReadBytesPerSecond: rate}})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	reader := c.ClientWith(t, c.ClientConfigAs("reader"))
	big := make([]byte, 60<<10)
	mustOpen(t, ctx, admin, c.Name("big"), client.Read|client.Write|client.Create, client.WithContents(big)).Close()
	h := mustOpen(t, ctx, reader, c.Name("big"), client.Read)
	const window = 2 * time.Second
	answered := 0
	for end := time.Now().Add(window); time.Now().Before(end); {
		var info client.ReadInfo
		rctx, cancel := context.WithDeadline(ctx, end)
		got, _, err := h.GetContentsAndStat(rctx, client.MaxStaleness(5*time.Second), client.WithReadInfo(&info))
		cancel()
		if err != nil {
			if rctx.Err() != nil {
				break // the window ended while the ration held the read
			}
			t.Fatal(err)
		}
		if len(got) != len(big) {
			t.Fatalf("read %d bytes", len(got))
		}
		if info.Follower {
			answered++
		}
	}
	// Two followers, each a bucket of one second's ration that refills
	// at the ration and lets a read in while not in debt: at most two
	// reads on the full bucket, then the window's refill, from each.
	limit := int(2 * (2 + window.Seconds()*rate/float64(len(big)+2<<10)))
	if answered == 0 || answered > limit+1 {
		t.Fatalf("followers answered %d reads of %d KiB in %v, want 1 to %d under a ration of %d KiB/s each",
			answered, len(big)>>10, window, limit+1, rate>>10)
	}
	t.Logf("followers answered %d reads in %v (at most %d under the ration)", answered, window, limit+1)
}
