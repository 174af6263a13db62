package cell_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/cell/wire"
	"lockcell/client"
	"lockcell/fixtures"
)

// bigChildren is enough 255-byte names that the whole listing, encoded as
// one reply, is over the frame limit (each entry costs 260 bytes).
const bigChildren = 6200

// bigName is the i-th child name of a big directory: 255 bytes, sorting in
// creation order.
func bigName(i int) string {
	p := fmt.Sprintf("%06d-", i)
	return p + strings.Repeat("x", 255-len(p))
}

// fillDir creates n children of dir named by name(i), from 16 goroutines
// of one session. The creating handles stay open (closing each would be a
// second write); the client's Close at the end of the test closes them.
func fillDir(t testing.TB, ctx context.Context, cl *client.Client, dir string, n int, name func(int) string) {
	t.Helper()
	const workers = 16
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if _, err := cl.Open(ctx, dir+"/"+name(i), client.Read|client.Write|client.Create); err != nil {
					errs <- fmt.Errorf("create child %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// A directory whose listing is larger than a frame lists completely, in
// order, through Handle.ReadDir (cached and uncached); before listings
// paged, the master's reply overflowed the frame, the stream closed with
// no status, and the client retried until it reported ErrNoMaster.
func TestLargeDirectoryListsCompletely(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 5*time.Minute)
	maker := c.ClientWith(t, c.ClientConfig())
	mustOpen(t, ctx, maker, c.Name("big"), client.Read|client.Write|client.Create|client.Directory).Close()
	fillDir(t, ctx, maker, c.Name("big"), bigChildren, bigName)
	want := make([]string, bigChildren)
	for i := range want {
		want[i] = bigName(i)
	}
	if size := bigChildren * (255 + 5); size <= wire.MaxFrameSize {
		t.Fatalf("the listing (%d bytes) would fit in one frame: the test proves nothing", size)
	}

	cfg := c.ClientConfig()
	cfg.RetryTimeout = 5 * time.Second // a listing that cannot be answered fails fast
	lister := c.ClientWith(t, cfg)
	names := func(ents []client.DirEntry) []string {
		out := make([]string, len(ents))
		for i, e := range ents {
			out[i] = e.Name
			if e.Dir {
				t.Errorf("%s listed as a directory", e.Name)
			}
		}
		return out
	}
	for _, opts := range [][]client.OpenOption{nil, {client.WithoutCache()}} {
		h := mustOpen(t, ctx, lister, c.Name("big"), client.Read, opts...)
		for round := range 2 { // the second may come from the cache
			ents, err := h.ReadDir(ctx)
			if err != nil {
				t.Fatalf("ReadDir (cache %v, round %d): %v", opts == nil, round, err)
			}
			if got := names(ents); !slices.Equal(got, want) {
				t.Fatalf("ReadDir (cache %v, round %d): %d names, want %d in order", opts == nil, round, len(got), len(want))
			}
		}
		h.Close()
	}
}

// Listings and child events show a caller only the children it may read
// or write (a child it may do neither with is as absent as a missing
// name, as Open says); the admin sees everything. Caches follow the ACLs:
// a child's ACL change or an ACL file rewrite that hides or reveals a
// child invalidates the parent's cached listing.
func TestListingHidesUnreadableChildren(t *testing.T) {
	set := fixtures.TestCerts(t, "alice", "bob")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, Admin: "admin"})
	ctx := ctxT(t, 2*time.Minute)
	admin := c.Client(t)
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Directory).Close()
	for name, who := range map[string]string{"team": "alice\n", "bobw": "bob\n", "none": "# nobody\n"} {
		mustOpen(t, ctx, admin, c.Name("acl/"+name), rw, client.WithContents([]byte(who))).Close()
	}
	mustOpen(t, ctx, admin, c.Name("d"), rw|client.Directory).Close()
	setACL := func(name string, a client.ACL) {
		t.Helper()
		h := mustOpen(t, ctx, admin, c.Name(name), client.Read)
		defer h.Close()
		if _, err := h.SetACL(ctx, a); err != nil {
			t.Fatalf("SetACL %s: %v", name, err)
		}
	}
	// pub: default ACLs, readable by all. sec: alice's only. wonly: bob
	// may write it but not read it, alice neither.
	for _, n := range []string{"pub", "sec", "wonly"} {
		mustOpen(t, ctx, admin, c.Name("d/"+n), rw).Close()
	}
	setACL("d/sec", client.ACL{Read: "team", Write: "team", ChangeACL: "team"})
	setACL("d/wonly", client.ACL{Read: "none", Write: "bobw"})

	list := func(cl *client.Client) []string {
		t.Helper()
		h := mustOpen(t, ctx, cl, c.Name("d"), client.Read)
		defer h.Close()
		ents, err := h.ReadDir(ctx)
		if err != nil {
			t.Fatalf("ReadDir: %v", err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name)
		}
		return out
	}
	expect := func(who string, cl *client.Client, want ...string) {
		t.Helper()
		if got := list(cl); !slices.Equal(got, want) {
			t.Fatalf("%s lists d as %q, want %q", who, got, want)
		}
	}
	expect("admin", admin, "pub", "sec", "wonly")
	expect("alice", alice, "pub", "sec")
	expect("bob", bob, "pub", "wonly")

	t.Run("CachedListingFollowsACLs", func(t *testing.T) {
		hits := bob.CacheStats().Hits
		expect("bob", bob, "pub", "wonly")
		if bob.CacheStats().Hits == hits {
			t.Fatal("bob's second listing was no cache hit: the test would prove nothing about the cache")
		}
		setACL("d/pub", client.ACL{Read: "team", Write: "team"}) // hide pub from bob
		expect("bob after pub was hidden", bob, "wonly")
		setACL("d/pub", client.ACL{}) // and show it again
		expect("bob after pub was shown", bob, "pub", "wonly")
		// Rewriting an ACL file changes what its names show.
		teamH := mustOpen(t, ctx, admin, c.Name("acl/team"), client.Read|client.Write)
		defer teamH.Close()
		expect("bob", bob, "pub", "wonly")
		if err := teamH.SetContents(ctx, []byte("alice\nbob\n")); err != nil {
			t.Fatal(err)
		}
		expect("bob after joining team", bob, "pub", "sec", "wonly")
		if err := teamH.SetContents(ctx, []byte("alice\n")); err != nil {
			t.Fatal(err)
		}
		expect("bob after leaving team", bob, "pub", "wonly")
	})

	t.Run("NoEventNamesAHiddenChild", func(t *testing.T) {
		mustOpen(t, ctx, admin, c.Name("d/gone"), rw).Close()
		setACL("d/gone", client.ACL{Read: "team", Write: "team"})
		ev := collectEvents(bob)
		w := mustOpen(t, ctx, bob, c.Name("d"), client.Read, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
		defer w.Close()
		del := mustOpen(t, ctx, admin, c.Name("d/gone"), client.Read|client.Write)
		if err := del.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		del.Close()
		// Events come in order: the marker's arriving proves the hidden
		// child's removal was not sent.
		mustOpen(t, ctx, admin, c.Name("d/marker"), rw).Close()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ev.mu.Lock()
			evs := slices.Clone(ev.evs)
			ev.mu.Unlock()
			seen := false
			for _, e := range evs {
				if e.Child == "gone" {
					t.Fatalf("bob heard of a child he may neither read nor write: %+v", e)
				}
				seen = seen || e.Kind == client.ChildAdded && e.Child == "marker"
			}
			if seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("bob never heard of the marker; events %+v", evs)
			}
			select {
			case <-ev.cond:
			case <-time.After(time.Until(deadline)):
			}
		}
		// The hidden child's name is not found either.
		if _, err := bob.Open(ctx, c.Name("d/sec"), client.Read); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("bob opens the hidden d/sec: %v, want not found", err)
		}
	})
}
