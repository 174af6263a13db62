package cell_test

import (
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
)

// Re-opening a name the client closed reuses the idle handle with no call
// to the cell; a delete or re-create of the node by anyone drops it, so a
// reopen then sees the truth; handles used for locks are never reused.
func TestOpenHandleCache(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, b, c.Name("f"), rw, client.WithContents([]byte("v1"))).Close()

	h := mustOpen(t, ctx, a, c.Name("f"), client.Read)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if testhook.PooledHandles(a) != 1 {
		t.Fatalf("closed clean handle not kept idle: %d", testhook.PooledHandles(a))
	}
	before := testhook.CallsSent()
	var reopened []*client.Handle
	for range 100 {
		h := mustOpen(t, ctx, a, c.Name("f"), client.Read)
		reopened = append(reopened, h)
		h.Close()
	}
	if n := testhook.CallsSent() - before; n > 1 { // a KeepAlive may slip in
		t.Fatalf("100 re-opens made %d calls", n)
	}
	// The reused handle works.
	if data, _, err := reopened[99].GetContentsAndStat(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("closed handle read: %q %v", data, err)
	}
	h = mustOpen(t, ctx, a, c.Name("f"), client.Read)
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "v1" {
		t.Fatalf("reused handle read: %q %v", data, err)
	}
	h.Close()

	// Another client deletes the node: the idle handle is dropped and a
	// reopen is told the truth.
	d := mustOpen(t, ctx, b, c.Name("f"), client.Read|client.Write)
	if err := d.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Open(ctx, c.Name("f"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("reopen after delete: %v", err)
	}
	pollUntil(t, 10*time.Second, "idle handle dropped", func() bool { return testhook.PooledHandles(a) == 0 })

	// Re-created: a reopen gets the new instance.
	mustOpen(t, ctx, b, c.Name("f"), rw, client.WithContents([]byte("v2"))).Close()
	h = mustOpen(t, ctx, a, c.Name("f"), client.Read)
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "v2" {
		t.Fatalf("after re-create: %q %v", data, err)
	}
	h.Close()

	// A handle that took a lock is closed at the master (releasing it).
	l := mustOpen(t, ctx, a, c.Name("f"), client.Read|client.Write)
	if ok, err := l.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	pooled := testhook.PooledHandles(a)
	l.Close()
	if testhook.PooledHandles(a) != pooled {
		t.Fatal("a handle that held a lock was kept idle")
	}
	other := mustOpen(t, ctx, b, c.Name("f"), client.Read|client.Write)
	if ok, err := other.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock not released by Close: %v %v", ok, err)
	}
}

// A handle on a deleted node never reads the re-created node's data from
// the cache: it is invalid.
func TestStaleHandleDoesNotReadNewIncarnationFromCache(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	old := mustOpen(t, ctx, a, c.Name("f"), rw, client.WithContents([]byte("v1")))
	d := mustOpen(t, ctx, b, c.Name("f"), client.Read|client.Write)
	if err := d.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, ctx, b, c.Name("f"), rw, client.WithContents([]byte("v2"))).Close()
	fresh := mustOpen(t, ctx, a, c.Name("f"), client.Read)
	if data, _, err := fresh.GetContentsAndStat(ctx); err != nil || string(data) != "v2" {
		t.Fatalf("new handle: %q %v", data, err)
	}
	// The new incarnation is now cached; the old handle must not see it.
	if data, _, err := old.GetContentsAndStat(ctx); !errors.Is(err, client.ErrHandleInvalid) {
		t.Fatalf("old handle read %q, %v; want ErrHandleInvalid", data, err)
	}
	if _, err := old.GetStat(ctx); !errors.Is(err, client.ErrHandleInvalid) {
		t.Fatalf("old handle stat: %v", err)
	}
}
