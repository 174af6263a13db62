package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Poison ends a blocking Acquire in flight (its wait withdrawn at the
// master), leaves the handle's lock held until Close, and makes every
// later call fail with ErrPoisoned at once: with the client cut off from
// the cell, where any call would wait for a master until RetryTimeout.
func TestPoison(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.RetryTimeout = cut.Dial, 10*time.Second
	b := c.ClientWith(t, cfg)
	a := c.Client(t)

	ha := open(t, ctx, a, c.Name("p"), rwc)
	acquire(t, ctx, ha)
	hb := open(t, ctx, b, c.Name("p"), rwc)
	if _, _, err := hb.GetContentsAndStat(ctx); err != nil { // now cached
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
	waitUntil(t, 10*time.Second, "b queued", func() bool { st, err := ha.GetStat(ctx); return err == nil && st.LockWaiters == 1 })
	hb.Poison()
	select {
	case err := <-got:
		if !errors.Is(err, client.ErrPoisoned) {
			t.Fatalf("the Acquire in flight when the handle was poisoned: %v, want ErrPoisoned", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Acquire in flight did not end when the handle was poisoned")
	}
	waitUntil(t, 10*time.Second, "b's wait withdrawn", func() bool { st, err := ha.GetStat(ctx); return err == nil && st.LockWaiters == 0 })

	// A poisoned handle that holds a lock keeps it, and its lock context,
	// until Close.
	hl := open(t, ctx, b, c.Name("q"), rwc)
	acquire(t, ctx, hl)
	lctx := hl.LockContext()
	hl.Poison()
	hl.Poison() // idempotent
	if err := hl.Release(ctx); !errors.Is(err, client.ErrPoisoned) {
		t.Fatalf("Release of a poisoned handle: %v, want ErrPoisoned", err)
	}
	if done, cause := ended(lctx); done {
		t.Fatalf("Poison ended the lock context: %v", cause)
	}
	if st, err := ha.GetStat(ctx); err != nil {
		t.Fatal(err)
	} else if hq := open(t, ctx, a, c.Name("q"), rwc); func() bool { ok, _ := hq.TryAcquire(ctx, client.Exclusive); return ok }() {
		t.Fatalf("another session took the lock of a poisoned handle (%+v)", st)
	}
	if err := hl.Close(); err != nil {
		t.Fatalf("Close of a poisoned handle: %v", err)
	}
	if done, cause := ended(lctx); !done || !errors.Is(cause, client.ErrClosed) {
		t.Fatalf("lock context after Close: ended %v, cause %v", done, cause)
	}

	// Cut off: every call on the poisoned handle still fails at once.
	t.Cleanup(cut.Heal) // before the handles' and client's Close
	cut.Cut()
	calls := map[string]func(context.Context) error{
		"GetContentsAndStat": func(ctx context.Context) error { _, _, err := hb.GetContentsAndStat(ctx); return err },
		"GetStat":            func(ctx context.Context) error { _, err := hb.GetStat(ctx); return err },
		"SetContents":        func(ctx context.Context) error { return hb.SetContents(ctx, []byte("x")) },
		"Acquire":            func(ctx context.Context) error { return hb.Acquire(ctx, client.Shared) },
		"TryAcquire":         func(ctx context.Context) error { _, err := hb.TryAcquire(ctx, client.Shared); return err },
		"Release":            func(ctx context.Context) error { return hb.Release(ctx) },
		"GetSequencer":       func(ctx context.Context) error { _, err := hb.GetSequencer(ctx); return err },
		"SetSequencer":       func(ctx context.Context) error { return hb.SetSequencer(ctx, []byte("x")) },
		"ReadDir":            func(ctx context.Context) error { _, err := hb.ReadDir(ctx); return err },
		"ReadDirPage":        func(ctx context.Context) error { _, _, err := hb.ReadDirPage(ctx, "", 0); return err },
		"Delete":             func(ctx context.Context) error { return hb.Delete(ctx) },
		"SetACL":             func(ctx context.Context) error { _, err := hb.SetACL(ctx, client.ACL{}); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call(ctx)
		if took := time.Since(start); !errors.Is(err, client.ErrPoisoned) || took > time.Second {
			t.Errorf("%s on a poisoned handle, cut off: %v after %v; want ErrPoisoned at once", name, err, took)
		}
		var oe *client.OpError
		if !errors.As(err, &oe) || oe.Path != c.Name("p") {
			t.Errorf("%s: %v does not name the handle's file", name, err)
		}
	}
}
