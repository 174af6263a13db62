package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

const rwc = client.Read | client.Write | client.Create

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, ctx context.Context, cl *client.Client, name string, mode client.OpenMode, opts ...client.OpenOption) *client.Handle {
	t.Helper()
	h, err := cl.Open(ctx, name, mode, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func acquire(t *testing.T, ctx context.Context, h *client.Handle) {
	t.Helper()
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatalf("acquire %s: %v", h.Name(), err)
	}
}

// ended reports whether ctx has ended, and its cause.
func ended(ctx context.Context) (bool, error) {
	select {
	case <-ctx.Done():
		return true, context.Cause(ctx)
	default:
		return false, nil
	}
}

// events records a client's session events.
type events struct {
	mu    sync.Mutex
	kinds []client.EventKind
}

func watchEvents(cl *client.Client) *events {
	e := &events{}
	go func() {
		for ev := range cl.Events() {
			e.mu.Lock()
			e.kinds = append(e.kinds, ev.Kind)
			e.mu.Unlock()
		}
	}()
	return e
}

func (e *events) has(k client.EventKind) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.kinds {
		if x == k {
			return true
		}
	}
	return false
}

func (e *events) list() []client.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]client.EventKind(nil), e.kinds...)
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The lock context ends within the client's lease of the client being cut
// off from the cell, with ErrJeopardy; a re-acquire after the session is
// safe again gives a new, live context for the same grant. It ends at
// once on Release and Close (of the handle and of the client), and when
// the lock's node is deleted; a handle without a lock has an ended one.
func TestLockContext(t *testing.T) {
	const lease = 2 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := testCtx(t, 90*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer = cut.Dial
	a := c.ClientWith(t, cfg)
	ev := watchEvents(a)
	other := c.Client(t)

	t.Run("EndsWithinTheLeaseOfACut", func(t *testing.T) {
		h := open(t, ctx, a, c.Name("cut"), rwc)
		if done, cause := ended(h.LockContext()); !done || !errors.Is(cause, client.ErrNotHeld) {
			t.Fatalf("lock context before any acquire: ended %v, cause %v; want ended with ErrNotHeld", done, cause)
		}
		acquire(t, ctx, h)
		st, err := h.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lctx := h.LockContext()
		if done, cause := ended(lctx); done {
			t.Fatalf("lock context ended while the lock is held: %v", cause)
		}
		cutAt := time.Now()
		cut.Cut()
		defer cut.Heal() // also when the test fails: the other subtests use the client
		select {
		case <-lctx.Done():
		case <-time.After(lease + 5*time.Second):
			t.Fatalf("lock context still live %v after the cut", time.Since(cutAt))
		}
		took := time.Since(cutAt)
		if cause := context.Cause(lctx); !errors.Is(cause, client.ErrJeopardy) {
			t.Fatalf("lock context's cause %v, want ErrJeopardy", cause)
		}
		if !errors.Is(lctx.Err(), context.Canceled) {
			t.Fatalf("lock context's Err %v, want context.Canceled", lctx.Err())
		}
		if took > lease+time.Second {
			t.Fatalf("lock context ended %v after the cut; want within the lease (%v) + 1s", took, lease)
		}
		t.Logf("lock context ended %v after the cut (lease %v)", took.Round(time.Millisecond), lease)

		cut.Heal()
		waitUntil(t, 20*time.Second, "safe after the heal", func() bool { return ev.has(client.Safe) })
		if done, _ := ended(h.LockContext()); !done {
			t.Fatal("the lock context came back to life after Safe; it must stay ended until a re-acquire")
		}
		// The session survived: a re-acquire confirms the same grant and
		// gives a new context.
		acquire(t, ctx, h)
		st2, err := h.GetStat(ctx)
		if err != nil || st2.LockGen != st.LockGen {
			t.Fatalf("after safe: lock generation %d -> %d (%v)", st.LockGen, st2.LockGen, err)
		}
		l2 := h.LockContext()
		if done, cause := ended(l2); done || l2 == lctx {
			t.Fatalf("re-acquire after safe: new context %v, ended %v (%v)", l2 != lctx, done, cause)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if done, cause := ended(l2); !done || !errors.Is(cause, client.ErrReleased) {
			t.Fatalf("after Release: ended %v, cause %v; want ErrReleased at once", done, cause)
		}
	})

	t.Run("ReleaseAndClose", func(t *testing.T) {
		h := open(t, ctx, a, c.Name("rc"), rwc)
		acquire(t, ctx, h)
		l1 := h.LockContext()
		if h.LockContext() != l1 {
			t.Fatal("LockContext changed while the lock is held")
		}
		// Acquiring the lock the handle holds keeps its context.
		if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if h.LockContext() != l1 {
			t.Fatal("a repeated grant of the held lock replaced its live context")
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if done, cause := ended(l1); !done || !errors.Is(cause, client.ErrClosed) {
			t.Fatalf("after Close: ended %v, cause %v; want ErrClosed at once", done, cause)
		}

		b := c.Client(t)
		hb := open(t, ctx, b, c.Name("rc"), rwc)
		acquire(t, ctx, hb)
		lb := hb.LockContext()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if done, cause := ended(lb); !done || !errors.Is(cause, client.ErrClosed) {
			t.Fatalf("after the client's Close: ended %v, cause %v; want ErrClosed at once", done, cause)
		}
	})

	t.Run("NodeDeleted", func(t *testing.T) {
		h := open(t, ctx, a, c.Name("del"), rwc, client.WithEvents(client.OnHandleInvalid))
		acquire(t, ctx, h)
		lctx := h.LockContext()
		o := open(t, ctx, other, c.Name("del"), client.Read|client.Write)
		if err := o.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("lock context live 10s after its node was deleted")
		}
		if cause := context.Cause(lctx); !errors.Is(cause, client.ErrHandleInvalid) {
			t.Fatalf("cause %v, want ErrHandleInvalid", cause)
		}
	})
}

// A master fail-over that the session rides out without jeopardy leaves
// the lock held at the same generation, so its context stays live.
func TestLockContextLivesThroughAFailover(t *testing.T) {
	// A long lease, and the master stopped just after a KeepAlive renewed
	// it, give the fail-over most of a lease to complete before the
	// client's local lease could run out.
	const lease = 5 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := testCtx(t, 90*time.Second)
	a := c.Client(t)
	ev := watchEvents(a)
	h := open(t, ctx, a, c.Name("fo"), rwc)
	acquire(t, ctx, h)
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := h.LockContext()
	waitUntil(t, 2*lease, "a fresh KeepAlive", func() bool {
		end, jeopardy := a.LeaseEnd()
		return !jeopardy && time.Until(end) > lease*3/4
	})
	stoppedAt := time.Now()
	old := c.StopMaster()
	waitUntil(t, 30*time.Second, "the fail-over event", func() bool { return ev.has(client.MasterFailover) })
	t.Logf("master %d stopped; the client heard of the new master %v later", old, time.Since(stoppedAt).Round(time.Millisecond))
	if ev.has(client.Jeopardy) {
		t.Fatalf("the client went into jeopardy during a fail-over inside its lease: %v", ev.list())
	}
	st2, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st2.LockGen != st.LockGen || st2.LockHolders != 1 {
		t.Fatalf("lock after the fail-over: %+v, before %+v", st2, st)
	}
	if done, cause := ended(lctx); done {
		t.Fatalf("lock context ended across a fail-over the session and lock survived: %v (events %v)", cause, ev.list())
	}
	if h.LockContext() != lctx {
		t.Fatal("the lock context was replaced across the fail-over")
	}
}
