package cell_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
)

// Tests of negative caching (docs/spec.md#caching): an Open of a missing
// name is answered from the cache with no call until a change that could
// make the name appear invalidates it, which happens before that change
// completes, across a master kill too; and a caller that may not read the
// parent directory, or that opens a name hidden from it, gets answers word
// for word the same as with caching off.

// expectMissingHits opens name n times with cl and fails unless every
// open answered ErrNotFound from the cache: n negative hits and at most
// one call (a KeepAlive of some client in the process may slip in).
func expectMissingHits(t *testing.T, cl *client.Client, name string, n int) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	h0, c0 := lcadmin.New(cl).CacheStats().NegativeHits, testhook.CallsSent()
	for range n {
		if h, err := cl.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
			if h != nil {
				h.Close()
			}
			t.Fatalf("open of missing %s: %v", name, err)
		}
	}
	if dh, dc := lcadmin.New(cl).CacheStats().NegativeHits-h0, testhook.CallsSent()-c0; dh != uint64(n) || dc > 1 {
		t.Fatalf("%d opens of missing %s: %d negative hits, %d calls; want %d hits and no call", n, name, dh, dc, n)
	}
}

// awaitNegativeCaching opens the missing name with cl until the open is
// answered from a cached absence, for at most 10 s.
func awaitNegativeCaching(t *testing.T, cl *client.Client, name string) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	pollUntil(t, 10*time.Second, "a cached absence of "+name, func() bool {
		h0 := lcadmin.New(cl).CacheStats().NegativeHits
		if h, err := cl.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
			if h != nil {
				h.Close()
			}
			t.Fatalf("open of missing %s: %v", name, err)
		}
		return lcadmin.New(cl).CacheStats().NegativeHits > h0
	})
}

func TestNegativeOpenCache(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	cfg := c.ClientConfig()
	cfg.DisableCache = true
	off := c.ClientWith(t, cfg)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, b, c.Name("d"), rw|client.Directory).Close()
	name := c.Name("d/f")
	// The master registers a session as a cacher only once one of its
	// KeepAlives has reached it (master/invalidate.go); the client sends
	// the first at once, but on a loaded machine it may arrive after the
	// first open below, whose answer would then not be kept. Wait for that
	// with another name, so every open of name counted below is served
	// as the cache promises.
	awaitNegativeCaching(t, a, c.Name("d/probe"))

	// The first open asks the master; the answer is the uncached one,
	// word for word, and so is every cached one after it.
	_, want := off.Open(ctx, name, client.Read)
	_, first := a.Open(ctx, name, client.Read)
	if !errors.Is(first, client.ErrNotFound) || first.Error() != want.Error() {
		t.Fatalf("first open: %v; uncached client: %v", first, want)
	}
	expectMissingHits(t, a, name, 100)
	if _, err := a.Open(ctx, name, client.Write); err == nil || err.Error() != want.Error() {
		t.Fatalf("cached answer %v, uncached %v", err, want)
	}
	// An open that may create always reaches the master.
	c0 := testhook.CallsSent()
	if _, err := a.Open(ctx, name+"/x", rw); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("create below a missing name: %v", err)
	}
	if testhook.CallsSent() == c0 {
		t.Fatal("an open with Create was answered from the cache")
	}

	// Another session creates the name: when its create returns, a's
	// cached absence is gone, so a's next open finds the file.
	mustOpen(t, ctx, b, name, rw, client.WithContents([]byte("v1"))).Close()
	h, err := a.Open(ctx, name, client.Read)
	if err != nil {
		t.Fatalf("open right after another session created the name: %v", err)
	}
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "v1" {
		t.Fatalf("read: %q %v", data, err)
	}
	h.Close()

	// Deleted again: the absence is cached again, and a create of a
	// sibling (which changes the directory) drops it too. (a's handle
	// above was kept idle; the delete drops it and the client closes it
	// in the background, maybe after the open below cached the absence:
	// a close of a handle whose file is gone invalidates nothing, so the
	// absence stays.)
	d := mustOpen(t, ctx, b, name, client.Read|client.Write)
	if err := d.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := a.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("open after delete: %v", err)
	}
	expectMissingHits(t, a, name, 10)
	mustOpen(t, ctx, b, c.Name("d/sibling"), rw).Close()
	n0 := lcadmin.New(a).CacheStats().NegativeHits
	if _, err := a.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("open after a sibling's create: %v", err)
	}
	if lcadmin.New(a).CacheStats().NegativeHits != n0 {
		t.Fatal("a cached absence outlived a change of its directory")
	}

	// Handles opened WithoutCache and clients with DisableCache always ask.
	c0 = testhook.CallsSent()
	for range 3 {
		a.Open(ctx, name, client.Read, client.WithoutCache())
		off.Open(ctx, name, client.Read)
	}
	if n := testhook.CallsSent() - c0; n < 6 {
		t.Fatalf("6 uncached opens made %d calls", n)
	}
	if st := lcadmin.New(off).CacheStats(); st.NegativeHits != 0 || st.Entries != 0 {
		t.Fatalf("DisableCache client cached: %+v", st)
	}
}

// A master kill loses the master's record of who cached what: the new
// master serves no write until every session heard of the fail-over (and
// so dropped its cache) or lost its lease, so no cached absence outlives
// a create made at the new master.
func TestNegativeCacheAcrossMasterKill(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 3 * time.Second})
	ctx := ctxT(t, 90*time.Second)
	a, b := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	name := c.Name("g")
	if _, err := a.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	expectMissingHits(t, a, name, 5)
	c.StopMaster()
	mustOpen(t, ctx, b, name, rw).Close() // retries until a new master serves it
	h, err := a.Open(ctx, name, client.Read)
	if err != nil {
		t.Fatalf("stale absence after a fail-over and a create: %v", err)
	}
	h.Close()
}

// A caller that may not read the parent directory is never registered
// for it, so it caches no absence and gets the uncached answers; a name
// hidden from a caller that may read the directory answers exactly as a
// missing one, cached alike, and the cached absence ends when an ACL
// change shows the node to it.
func TestNegativeCacheRevealsNothing(t *testing.T) {
	set := fixtures.TestCerts(t, "alice", "bob")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, Admin: "admin"})
	ctx := ctxT(t, 2*time.Minute)
	admin := c.Client(t)
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	cfg := c.ClientConfigAs("alice")
	cfg.DisableCache = true
	aliceOff := c.ClientWith(t, cfg)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Directory).Close()
	mustOpen(t, ctx, admin, c.Name("acl/team"), rw, client.WithContents([]byte("alice\n"))).Close()
	mustOpen(t, ctx, admin, c.Name("acl/none"), rw, client.WithContents([]byte("# nobody\n"))).Close()
	// priv: a directory alice may not read; pub: one she may, holding
	// sec, a file hidden from her.
	for _, d := range []string{"priv", "pub"} {
		mustOpen(t, ctx, admin, c.Name(d), rw|client.Directory).Close()
	}
	ph := mustOpen(t, ctx, admin, c.Name("priv"), client.Read)
	if _, err := ph.SetACL(ctx, client.ACL{Read: "none", Write: "none", ChangeACL: "none"}); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, ctx, admin, c.Name("priv/x"), rw).Close()
	sec := mustOpen(t, ctx, admin, c.Name("pub/sec"), rw)
	if _, err := sec.SetACL(ctx, client.ACL{Read: "none", Write: "none", ChangeACL: "none"}); err != nil {
		t.Fatal(err)
	}

	same := func(name string) {
		t.Helper()
		_, want := aliceOff.Open(ctx, name, client.Read)
		for range 3 {
			_, got := alice.Open(ctx, name, client.Read)
			if answerOf(got) != answerOf(want) {
				t.Fatalf("open %s: cached client %q, uncached %q", name, answerOf(got), answerOf(want))
			}
		}
	}
	// Below an unreadable directory: an existing and a missing name alike,
	// every open a call, nothing cached.
	n0 := lcadmin.New(alice).CacheStats()
	for _, n := range []string{"priv/x", "priv/y"} {
		c0 := testhook.CallsSent()
		same(c.Name(n))
		if testhook.CallsSent()-c0 < 3 {
			t.Fatalf("%s: opens below an unreadable directory were answered from the cache", n)
		}
	}
	if st := lcadmin.New(alice).CacheStats(); st.NegativeHits != n0.NegativeHits || st.Entries != n0.Entries {
		t.Fatalf("absences below an unreadable directory were cached: %+v", st)
	}
	// In a readable directory: the hidden file and a missing one answer
	// alike (names swapped), both from the cache after the first.
	same(c.Name("pub/sec"))
	same(c.Name("pub/nosuch"))
	_, hidden := alice.Open(ctx, c.Name("pub/sec"), client.Read)
	_, missing := alice.Open(ctx, c.Name("pub/nosuch"), client.Read)
	if swapped := strings.ReplaceAll(answerOf(hidden), "pub/sec", "pub/nosuch"); !errors.Is(hidden, client.ErrNotFound) || swapped != answerOf(missing) {
		t.Fatalf("hidden %v, missing %v", hidden, missing)
	}
	expectMissingHits(t, alice, c.Name("pub/sec"), 5)
	expectMissingHits(t, alice, c.Name("pub/nosuch"), 5)
	// The admin shows sec to alice: her cached absence is gone before the
	// change returns.
	if _, err := sec.SetACL(ctx, client.ACL{Read: "team", Write: "team", ChangeACL: "team"}); err != nil {
		t.Fatal(err)
	}
	// Uncached, so its Close is done at the master when it returns: a
	// pooled idle handle would be closed whenever the next change drops
	// it, and that close (which may delete an ephemeral node) would drop
	// the absences cached below at a moment of its own.
	h, err := alice.Open(ctx, c.Name("pub/sec"), client.Read, client.WithoutCache())
	if err != nil {
		t.Fatalf("open after the ACL change showed the file: %v", err)
	}
	h.Close()
	// And a change of an ACL file's members reveals too: hidden again by
	// a group alice is not in, then the group gains her.
	if _, err := sec.SetACL(ctx, client.ACL{Read: "none", Write: "none", ChangeACL: "team"}); err != nil {
		t.Fatal(err)
	}
	expectMissingAfterFirst := func() {
		t.Helper()
		if _, err := alice.Open(ctx, c.Name("pub/sec"), client.Read); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("hidden again: %v", err)
		}
		expectMissingHits(t, alice, c.Name("pub/sec"), 3)
	}
	expectMissingAfterFirst()
	nh := mustOpen(t, ctx, admin, c.Name("acl/none"), client.Read|client.Write)
	if err := nh.SetContents(ctx, []byte("alice\n")); err != nil {
		t.Fatal(err)
	}
	nh.Close()
	if h, err := alice.Open(ctx, c.Name("pub/sec"), client.Read); err != nil {
		t.Fatalf("open after the ACL file gained alice: %v", err)
	} else {
		h.Close()
	}
}

// Under churn (a writer creating and deleting a name, readers opening it
// from other sessions with their caches on), every open that overlapped
// no write answers as the last completed write left the name: never a
// cached absence after a create completed, never a reused handle after a
// delete completed.
func TestNegativeCacheNeverStaleUnderChurn(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 6 * time.Second})
	ctx := ctxT(t, 90*time.Second)
	w := c.Client(t)
	readers := []*client.Client{c.Client(t), c.Client(t)}
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, w, c.Name("d"), rw|client.Directory).Close()
	name := c.Name("d/f")
	// started and done count the writer's operations begun and completed:
	// odd counts leave the name existing, even ones missing.
	var started, done, checked atomic.Int64
	progress := make(chan struct{}, 1) // a reader checked an open
	failed := make(chan struct{})      // closed when a reader failed
	var failOnce sync.Once
	fail := func(format string, args ...any) bool {
		t.Errorf(format, args...)
		failOnce.Do(func() { close(failed) })
		return false
	}
	// next is closed when the writer completes an operation: readers
	// open a batch per state, then wait for the next state.
	var nextMu sync.Mutex
	next := make(chan struct{})
	nextState := func() <-chan struct{} {
		nextMu.Lock()
		defer nextMu.Unlock()
		return next
	}
	// check opens the name once and checks the answer if no write
	// overlapped the open; false means the test failed.
	check := func(r *client.Client) bool {
		s0, d0 := started.Load(), done.Load()
		h, err := r.Open(ctx, name, client.Read)
		s1 := started.Load()
		if h != nil {
			h.Close()
		}
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return fail("open: %v", err)
		}
		if s0 != d0 || s1 != d0 {
			return true // a write overlapped: either answer is right
		}
		if exists := d0%2 == 1; exists != (err == nil) {
			return fail("after %d completed writes (exists=%v) an open answered %v", d0, exists, err)
		}
		checked.Add(1)
		select {
		case progress <- struct{}{}:
		default:
		}
		return true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				changed := nextState()
				for range 25 {
					if !check(r) {
						return
					}
				}
				select {
				case <-stop:
					return
				case <-changed:
				}
			}
		}()
	}
writes:
	for i := range 40 {
		started.Add(1)
		if i%2 == 0 {
			mustOpen(t, ctx, w, name, rw).Close()
		} else {
			h := mustOpen(t, ctx, w, name, client.Read|client.Write)
			if err := h.Delete(ctx); err != nil {
				t.Fatal(err)
			}
			h.Close()
		}
		done.Add(1)
		select {
		case <-progress:
		default:
		}
		nextMu.Lock()
		close(next)
		next = make(chan struct{})
		nextMu.Unlock()
		// Let the readers see each state: wait until one checked an open
		// since the write completed.
		select {
		case <-progress:
		case <-failed:
			break writes
		case <-ctx.Done():
			t.Fatal("the readers checked no open")
		}
	}
	close(stop)
	wg.Wait()
	var hits uint64
	for _, r := range readers {
		hits += lcadmin.New(r).CacheStats().NegativeHits
	}
	t.Logf("%d opens checked, %d answered from cached absences", checked.Load(), hits)
	if hits == 0 {
		t.Fatal("no open was answered from a cached absence: the test checked nothing of it")
	}
}
