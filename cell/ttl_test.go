package cell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// exists reports whether cl can open name: the caching client's answer,
// so a cache the cell failed to invalidate keeps a deleted name here.
func exists(t *testing.T, ctx context.Context, cl *client.Client, name string) bool {
	t.Helper()
	h, err := cl.Open(ctx, name, client.Read)
	if errors.Is(err, client.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	h.Close()
	return true
}

// waitGone polls until name is gone and returns when it saw it gone.
func waitGone(t *testing.T, ctx context.Context, cl *client.Client, name string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for exists(t, ctx, cl, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after %v", name, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

// A TTL file not written is gone after its TTL, never before; one written
// more often than its TTL lives on, and goes once the writes stop. Its
// stat reports the TTL, and a reader holding it open (cached) sees it go.
func TestTTLNodesExpireUnlessWritten(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t)
	const ttl = time.Second
	mode := client.Read | client.Write | client.Create | client.Excl

	t0 := time.Now()
	idle := mustOpen(t, ctx, cl, c.Name("idle"), mode, client.WithTTL(ttl))
	st, err := idle.GetStat(ctx)
	if err != nil || st.TTL != ttl || st.Container {
		t.Fatalf("stat of a TTL file: %+v %v", st, err)
	}
	kept := mustOpen(t, ctx, cl, c.Name("kept"), mode, client.WithTTL(ttl))
	reader := c.Client(t)
	rh := mustOpen(t, ctx, reader, c.Name("idle"), client.Read)
	if _, _, err := rh.GetContentsAndStat(ctx); err != nil { // cached now
		t.Fatal(err)
	}

	// kept is written every 300ms while idle expires.
	writes := 0
	stop := time.Now().Add(2500 * time.Millisecond)
	var goneAt, lastWrite time.Time
	for time.Now().Before(stop) {
		// Sent at lastWrite: the master stamps the write's mtime no
		// sooner, so kept may go no sooner than lastWrite+TTL.
		lastWrite = time.Now()
		if err := kept.SetContents(ctx, []byte{byte(writes)}); err != nil {
			t.Fatalf("write %d to kept: %v", writes, err)
		}
		writes++
		if goneAt.IsZero() && !exists(t, ctx, cl, c.Name("idle")) {
			goneAt = time.Now()
		}
		time.Sleep(300 * time.Millisecond)
	}
	if goneAt.IsZero() {
		goneAt = waitGone(t, ctx, cl, c.Name("idle"), 5*time.Second)
	}
	if early := t0.Add(ttl).Sub(goneAt); early > 0 {
		t.Fatalf("idle went %v before its TTL", early)
	}
	t.Logf("idle gone %v after its create (TTL %v)", goneAt.Sub(t0), ttl)
	if _, _, err := rh.GetContentsAndStat(ctx); err == nil {
		t.Fatal("a reader's handle on the expired file still reads it")
	}
	if !exists(t, ctx, cl, c.Name("kept")) {
		t.Fatalf("kept, written %d times every 300ms, expired", writes)
	}
	gone := waitGone(t, ctx, cl, c.Name("kept"), 5*time.Second)
	if gone.Sub(lastWrite) < ttl {
		t.Fatalf("kept went %v after its last write was sent, before its TTL %v", gone.Sub(lastWrite), ttl)
	}
	if err := kept.SetContents(ctx, []byte("late")); !errors.Is(err, client.ErrHandleInvalid) {
		t.Fatalf("write through the expired file's handle: %v", err)
	}
}

// The TTL survives the master: a file whose master is stopped right after
// its create is deleted by the new master once mtime+TTL passed, not
// never, and not before.
func TestTTLNodeExpiresAfterMasterFailover(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 3 * time.Second})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t)
	const ttl = 2 * time.Second
	t0 := time.Now()
	mustOpen(t, ctx, cl, c.Name("f"), client.Read|client.Write|client.Create|client.Excl, client.WithTTL(ttl)).Close()
	old := c.StopMaster()
	if m := c.WaitForMaster(30 * time.Second); m == old {
		t.Fatal("the master did not change")
	}
	gone := waitGone(t, ctx, cl, c.Name("f"), 20*time.Second)
	if gone.Before(t0.Add(ttl)) {
		t.Fatalf("f went %v after its create, before its TTL %v", gone.Sub(t0), ttl)
	}
	t.Logf("f gone %v after its create across a fail-over (TTL %v)", gone.Sub(t0), ttl)
}

// A container outlives being empty before its first child, and goes in
// the same step as its last one, whatever removes it: a Delete, a TTL
// expiry, an ephemeral child's session.
func TestContainerGoesWithItsLastChild(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t)
	dir := client.Read | client.Create | client.Excl | client.Directory | client.Container
	file := client.Read | client.Write | client.Create | client.Excl

	h := mustOpen(t, ctx, cl, c.Name("jobs"), dir)
	st, err := h.GetStat(ctx)
	h.Close()
	if err != nil || !st.Container || !st.Dir {
		t.Fatalf("stat of a container: %+v %v", st, err)
	}
	a := mustOpen(t, ctx, cl, c.Name("jobs/a"), file)
	b := mustOpen(t, ctx, cl, c.Name("jobs/b"), file)
	if err := a.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, ctx, cl, c.Name("jobs")) {
		t.Fatal("the container went with a child left")
	}
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	// The same step: no polling.
	if exists(t, ctx, cl, c.Name("jobs")) {
		t.Fatal("the container outlived the delete of its last child")
	}

	// By a TTL, and by an ephemeral child's session.
	mustOpen(t, ctx, cl, c.Name("t"), dir).Close()
	mustOpen(t, ctx, cl, c.Name("t/f"), file, client.WithTTL(time.Second)).Close()
	waitGone(t, ctx, cl, c.Name("t"), 10*time.Second)
	mustOpen(t, ctx, cl, c.Name("e"), dir).Close()
	other := c.Client(t)
	mustOpen(t, ctx, other, c.Name("e/member"), file|client.Ephemeral)
	if err := other.CloseContext(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, ctx, cl, c.Name("e")) {
		t.Fatal("the container outlived its ephemeral child's session")
	}
}
