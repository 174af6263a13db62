package cell_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
	"lockcell/wire"
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
		for round := range 2 {
			hits := lcadmin.New(lister).CacheStats().Hits
			ents, err := h.ReadDir(ctx)
			if err != nil {
				t.Fatalf("ReadDir (cache %v, round %d): %v", opts == nil, round, err)
			}
			if got := names(ents); !slices.Equal(got, want) {
				t.Fatalf("ReadDir (cache %v, round %d): %d names, want %d in order", opts == nil, round, len(got), len(want))
			}
			// The whole multi-page listing was cached: read again, it is
			// a hit (only with the cache on).
			if hit := lcadmin.New(lister).CacheStats().Hits > hits; hit != (round == 1 && opts == nil) {
				t.Fatalf("ReadDir (cache %v, round %d): cache hit %v", opts == nil, round, hit)
			}
		}
		h.Close()
	}

	// A create invalidates the cached listing; the next one has the child.
	h := mustOpen(t, ctx, lister, c.Name("big"), client.Read)
	defer h.Close()
	mustOpen(t, ctx, maker, c.Name("big/zz-late"), client.Read|client.Write|client.Create)
	ents, err := h.ReadDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(ents); len(got) != bigChildren+1 || got[bigChildren] != "zz-late" {
		t.Fatalf("after a create: %d names, last %q", len(got), got[len(got)-1])
	}

	// ReadDirPage streams the listing; pages are bounded by bytes, so a
	// page of 255-byte names holds fewer than the page size.
	var got []string
	pages := 0
	for after := ""; ; pages++ {
		page, more, err := h.ReadDirPage(ctx, after, 0)
		if err != nil {
			t.Fatalf("ReadDirPage after %.10q: %v", after, err)
		}
		got = append(got, names(page)...)
		if len(page) > wire.MaxDirPage || more && len(page) == 0 {
			t.Fatalf("page of %d entries, more %v", len(page), more)
		}
		if !more {
			pages++
			break
		}
		after = page[len(page)-1].Name
	}
	if len(got) != bigChildren+1 || !slices.Equal(got[:bigChildren], want) || pages < 2 {
		t.Fatalf("ReadDirPage: %d names in %d pages", len(got), pages)
	}
	t.Logf("%d children of 255-byte names: %d pages", len(got), pages)
}

// Pages are separate reads: while children come and go between pages, a
// listing names no child twice, keeps name order, and names every child
// present throughout exactly once.
func TestListingPagesUnderChurn(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 2*time.Minute)
	cl, churner := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, cl, c.Name("d"), rw|client.Directory).Close()
	// Stable children k0000-s .. k0299-s; churn names k<i>-c sort among
	// them.
	const stable = 300
	var want []string
	for i := range stable {
		want = append(want, fmt.Sprintf("k%04d-s", i))
	}
	fillDir(t, ctx, cl, c.Name("d"), stable, func(i int) string { return want[i] })

	stop := make(chan struct{})
	const churners = 4
	churnDone := make(chan error, churners)
	var churned atomic.Int64
	for w := range churners {
		go func() {
			for i := w; ; i += churners {
				select {
				case <-stop:
					churnDone <- nil
					return
				default:
				}
				name := c.Name(fmt.Sprintf("d/k%04d-c", (i*37)%stable))
				h, err := churner.Open(ctx, name, rw)
				if err != nil {
					churnDone <- err
					return
				}
				if i/churners%2 == 1 { // every other one goes again
					if err := h.Delete(ctx); err != nil && !errors.Is(err, client.ErrHandleInvalid) {
						churnDone <- err
						return
					}
				}
				h.Close()
				churned.Add(1)
			}
		}()
	}
	h := mustOpen(t, ctx, cl, c.Name("d"), client.Read)
	before := churned.Load()
	for round := range 5 {
		var got []string
		for after := ""; ; {
			page, more, err := h.ReadDirPage(ctx, after, 9)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 9 {
				t.Fatalf("a page of %d entries for a limit of 9", len(page))
			}
			for _, e := range page {
				got = append(got, e.Name)
			}
			if !more {
				break
			}
			after = page[len(page)-1].Name
		}
		var stableSeen []string
		for i, n := range got {
			if i > 0 && got[i-1] >= n {
				t.Fatalf("round %d: %q listed after %q: out of order or twice", round, n, got[i-1])
			}
			if strings.HasSuffix(n, "-s") {
				stableSeen = append(stableSeen, n)
			} else if !strings.HasSuffix(n, "-c") {
				t.Fatalf("round %d: unknown name %q", round, n)
			}
		}
		if !slices.Equal(stableSeen, want) {
			t.Fatalf("round %d: %d of the %d stable children listed", round, len(stableSeen), stable)
		}
	}
	during := churned.Load() - before
	close(stop)
	for range churners {
		if err := <-churnDone; err != nil {
			t.Fatalf("churn: %v", err)
		}
	}
	if during == 0 {
		t.Fatal("no child came or went while the listings ran: the test proved nothing")
	}
	t.Logf("%d churn operations during 5 listings", during)
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
	// The admin's handles stay open: closing one counts as a change of
	// the parent's listing (it could delete an ephemeral node), which
	// would invalidate cached listings for another reason than the ACL.
	handles := map[string]*client.Handle{}
	setACL := func(t *testing.T, name string, a client.ACL) {
		t.Helper()
		h := handles[name]
		if h == nil {
			h = mustOpen(t, ctx, admin, c.Name(name), client.Read)
			handles[name] = h
		}
		if _, err := h.SetACL(ctx, a); err != nil {
			t.Fatalf("SetACL %s: %v", name, err)
		}
	}
	// pub: default ACLs, readable by all. sec: alice's only. wonly: bob
	// may write it but not read it, alice neither.
	for _, n := range []string{"pub", "sec", "wonly"} {
		mustOpen(t, ctx, admin, c.Name("d/"+n), rw).Close()
	}
	setACL(t, "d/sec", client.ACL{Read: "team", Write: "team", ChangeACL: "team"})
	setACL(t, "d/wonly", client.ACL{Read: "none", Write: "bobw"})

	dirs := map[*client.Client]*client.Handle{}
	for _, cl := range []*client.Client{admin, alice, bob} {
		dirs[cl] = mustOpen(t, ctx, cl, c.Name("d"), client.Read)
	}
	list := func(t *testing.T, cl *client.Client) []string {
		t.Helper()
		ents, err := dirs[cl].ReadDir(ctx)
		if err != nil {
			t.Fatalf("ReadDir: %v", err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name)
		}
		return out
	}
	expect := func(t *testing.T, who string, cl *client.Client, want ...string) {
		t.Helper()
		if got := list(t, cl); !slices.Equal(got, want) {
			t.Fatalf("%s lists d as %q, want %q", who, got, want)
		}
	}
	expect(t, "admin", admin, "pub", "sec", "wonly")
	expect(t, "alice", alice, "pub", "sec")
	expect(t, "bob", bob, "pub", "wonly")

	t.Run("CachedListingFollowsACLs", func(t *testing.T) {
		hits, calls := lcadmin.New(bob).CacheStats().Hits, testhook.CallsSent()
		expect(t, "bob", bob, "pub", "wonly")
		if lcadmin.New(bob).CacheStats().Hits != hits+1 || testhook.CallsSent() > calls+1 { // a KeepAlive may go out meanwhile
			t.Fatal("bob's second listing was no cache hit: the test would prove nothing about the cache")
		}
		setACL(t, "d/pub", client.ACL{Read: "team", Write: "team"}) // hide pub from bob
		expect(t, "bob after pub was hidden", bob, "wonly")
		setACL(t, "d/pub", client.ACL{}) // and show it again
		expect(t, "bob after pub was shown", bob, "pub", "wonly")
		// Rewriting an ACL file changes what its names show.
		teamH := mustOpen(t, ctx, admin, c.Name("acl/team"), client.Read|client.Write)
		defer teamH.Close()
		expect(t, "bob", bob, "pub", "wonly")
		if err := teamH.SetContents(ctx, []byte("alice\nbob\n")); err != nil {
			t.Fatal(err)
		}
		expect(t, "bob after joining team", bob, "pub", "sec", "wonly")
		if err := teamH.SetContents(ctx, []byte("alice\n")); err != nil {
			t.Fatal(err)
		}
		expect(t, "bob after leaving team", bob, "pub", "wonly")
	})

	t.Run("NoEventNamesAHiddenChild", func(t *testing.T) {
		mustOpen(t, ctx, admin, c.Name("d/gone"), rw).Close()
		setACL(t, "d/gone", client.ACL{Read: "team", Write: "team"})
		w := mustOpen(t, ctx, bob, c.Name("d"), client.Read, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
		defer w.Close()
		ev := collectHandleEvents(w)
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
