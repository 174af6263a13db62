package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// TestCloseWhileUnreachable stops every replica and closes handles and the
// client: each Close returns within its bound (not RetryTimeout, 20 s
// here) with its local state released. The close of a lock-holding handle
// that could not get through goes on in the background, so once the cell
// is back another session gets the lock at once, with the first session
// still alive (a session that had expired would have left a minute of
// lock-delay).
func TestCloseWhileUnreachable(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{DefaultLockDelay: time.Minute})
	cfg := c.ClientConfig()
	cfg.CloseTimeout = 500 * time.Millisecond
	a := c.ClientWith(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	h := open(t, ctx, a, "x", rwc)
	acquire(t, ctx, h)
	h2 := open(t, ctx, a, "y", rwc)
	lockCtx := h.LockContext()

	for i := range c.Addrs() {
		c.Stop(i)
	}
	within := func(what string, bound time.Duration, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		took := time.Since(start)
		if took > bound {
			t.Fatalf("%s took %v, bound %v", what, took, bound)
		}
		t.Logf("%s with the cell down: %v", what, took.Round(time.Millisecond))
		return err
	}
	err := within("Handle.CloseContext", 2*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return h.CloseContext(cctx)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CloseContext with the cell down: %v, want DeadlineExceeded", err)
	}
	if done, cause := ended(lockCtx); !done || !errors.Is(cause, client.ErrClosed) {
		t.Fatalf("lock context after Close: ended %v, cause %v", done, cause)
	}
	if _, err := h.GetStat(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("GetStat after Close: %v, want ErrClosed", err)
	}
	within("Handle.Close (CloseTimeout)", 2*time.Second, h2.Close)

	// The cell comes back: the background close releases x.
	for i := range c.Addrs() {
		c.Start(i)
	}
	b := c.Client(t)
	hb := open(t, ctx, b, "x", rwc)
	for {
		ok, err := hb.TryAcquire(ctx, client.Exclusive)
		if err != nil {
			t.Fatalf("try acquire x: %v", err)
		}
		if ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("x stayed held after its handle was closed")
		}
		time.Sleep(20 * time.Millisecond) // polling the lock, bounded by ctx
	}
	if _, err := a.Open(ctx, "y", client.Read); err != nil {
		t.Fatalf("the closing session did not survive: %v", err)
	}
	hb.Close()
	if err := b.Close(); err != nil {
		t.Fatalf("close b: %v", err)
	}

	for i := range c.Addrs() {
		c.Stop(i)
	}
	err = within("Client.CloseContext", 2*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return a.CloseContext(cctx)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Client.CloseContext with the cell down: %v, want DeadlineExceeded", err)
	}
	if _, err := a.Open(ctx, "y", client.Read); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
	select {
	case _, ok := <-a.Events():
		for ok {
			_, ok = <-a.Events()
		}
	case <-time.After(time.Second):
		t.Fatal("Events not closed by Close")
	}
}
