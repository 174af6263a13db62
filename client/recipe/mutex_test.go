package recipe_test

import (
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// holder reads who holds name's lock: the session id, 0 when free.
func holder(t *testing.T, ctx context.Context, c *client.Client, name string) uint64 {
	t.Helper()
	h, err := c.Open(ctx, name, client.Read, client.WithoutCache())
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Close()
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatalf("stat %s: %v", name, err)
	}
	if len(st.Holders) == 0 {
		return 0
	}
	return st.Holders[0].Session
}

// Nested Acquires on one Mutex count; another holder gets the lock only
// after the outermost Release, not after the inner one; Release beyond
// the count fails with ErrNotHeld.
func TestMutexIsReentrantPerValue(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("locks/db-migrate")
	a, b := c.Client(t), c.Client(t)
	ma, mb := recipe.NewMutex(a, name), recipe.NewMutex(b, name)
	for i := range 3 {
		if err := ma.Acquire(ctx); err != nil {
			t.Fatalf("acquire %d: %v", i+1, err)
		}
	}
	if ma.Depth() != 3 || holder(t, ctx, b, name) != a.Session() {
		t.Fatalf("after 3 acquires: depth %d, holder %d (a is %d)", ma.Depth(), holder(t, ctx, b, name), a.Session())
	}
	got := make(chan error, 1)
	go func() { got <- mb.Acquire(ctx) }()
	waitUntil(t, 10*time.Second, "b queued", func() bool {
		h, err := b.Open(ctx, name, client.Read, client.WithoutCache())
		if err != nil {
			return false
		}
		defer h.Close()
		st, err := h.GetStat(ctx)
		return err == nil && st.LockWaiters == 1
	})
	for i := range 2 {
		if err := ma.Release(ctx); err != nil {
			t.Fatalf("inner release %d: %v", i+1, err)
		}
		select {
		case err := <-got:
			t.Fatalf("b acquired (%v) after an inner release, depth %d", err, ma.Depth())
		default:
		}
		if h := holder(t, ctx, b, name); h != a.Session() {
			t.Fatalf("after inner release %d the holder is %d, not a (%d)", i+1, h, a.Session())
		}
	}
	if err := ma.Release(ctx); err != nil {
		t.Fatalf("outer release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("b acquires: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b did not get the lock after a's outermost release")
	}
	if h := holder(t, ctx, a, name); h != b.Session() {
		t.Fatalf("holder %d, want b (%d)", h, b.Session())
	}
	if err := ma.Release(ctx); !errorsIs(err, client.ErrNotHeld) {
		t.Fatalf("release beyond the count: %v, want ErrNotHeld", err)
	}
	if err := mb.Release(ctx); err != nil || mb.Depth() != 0 || mb.Handle() != nil {
		t.Fatalf("b releases: %v (depth %d)", err, mb.Depth())
	}
}
