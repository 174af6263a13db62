package cell_test

import (
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Blocking Acquires are granted in the order they queued
// (docs/spec.md#locks), whatever happens to the waiters' calls while they
// wait: a broken connection the client redials, a master fail-over, a
// holder whose session expires (the queue's head gets the lock when the
// lock-delay ends), waits far longer than the client's RetryTimeout.
// Each waiter is its own client (its own session and connection), queued
// only once the one before it shows in the lock's queue, so the order
// they queued in is known.

// fifoWaiter is one client blocked in Acquire on the lock.
type fifoWaiter struct {
	name string
	cl   *client.Client
	cut  *fixtures.Cutter // nil: its links are never cut
	h    *client.Handle
	got  chan error // the Acquire's result
}

// fifoQueue opens the lock for each waiter and starts their Acquires one
// after another, each once the previous one is queued behind the holder.
// It returns when all are queued, in that order.
func fifoQueue(t *testing.T, ctx context.Context, name string, holder *client.Handle, ws []*fifoWaiter) {
	t.Helper()
	for i, w := range ws {
		w.h = mustOpen(t, ctx, w.cl, name, client.Read|client.Write|client.Create)
		w.got = make(chan error, 1)
		go func() { w.got <- w.h.Acquire(ctx, client.Exclusive) }()
		pollUntil(t, 10*time.Second, w.name+" queued", func() bool {
			st, err := holder.GetStat(ctx)
			return err == nil && len(st.Waiters) == i+1 && st.Waiters[i].Session == w.cl.Session()
		})
	}
	fifoWantQueue(t, ctx, holder, ws)
}

// fifoWantQueue checks that the lock's queue holds ws in that order.
func fifoWantQueue(t *testing.T, ctx context.Context, h *client.Handle, ws []*fifoWaiter) {
	t.Helper()
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []uint64
	for _, w := range st.Waiters {
		got = append(got, w.Session)
	}
	for _, w := range ws {
		want = append(want, w.cl.Session())
	}
	if len(got) != len(want) {
		t.Fatalf("queue holds sessions %v; want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("queue holds sessions %v; want %v (in that order)", got, want)
		}
	}
}

// fifoWantGrants waits for the waiters' grants, checking that they come
// in the order of ws: each grant must come while every later waiter still
// waits, must be the lock's one holding, and must be the grantee's to
// release (a grant undone behind the grantee's back fails its Release).
func fifoWantGrants(t *testing.T, ctx context.Context, ws []*fifoWaiter) {
	t.Helper()
	for i, w := range ws {
		select {
		case err := <-w.got:
			if err != nil {
				t.Fatalf("%s's Acquire: %v", w.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not granted the lock", w.name)
		}
		for _, later := range ws[i+1:] {
			select {
			case err := <-later.got:
				t.Fatalf("%s's Acquire returned (%v) before %s released: granted out of queue order", later.name, err, w.name)
			default:
			}
		}
		st, err := w.h.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Session != w.cl.Session() {
			t.Fatalf("%s's Acquire returned, but the lock's holders are %+v; want only session %d", w.name, st.Holders, w.cl.Session())
		}
		if err := w.h.Release(ctx); err != nil {
			t.Fatalf("%s releases the lock it was granted: %v", w.name, err)
		}
	}
}

func TestAcquireFIFO(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
	ctx := ctxT(t, 3*time.Minute)
	const rw = client.Read | client.Write | client.Create
	newWaiter := func(name string, cuttable bool, retry time.Duration) *fifoWaiter {
		cfg := c.ClientConfig()
		w := &fifoWaiter{name: name}
		if cuttable {
			w.cut = fixtures.NewCutter()
			cfg.Dialer = w.cut.Dial
		}
		if retry > 0 {
			cfg.RetryTimeout = retry
		}
		w.cl = c.ClientWith(t, cfg)
		return w
	}
	holderCl := c.Client(t)
	lockHeld := func(name string, opts ...client.OpenOption) *client.Handle {
		h := mustOpen(t, ctx, holderCl, c.Name(name), rw, opts...)
		if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("the holder takes %s: %v %v", name, ok, err)
		}
		return h
	}

	// A waiter whose connection breaks while it waits (a network blip,
	// or its client dropping a frozen connection) redials and retries the
	// same request id: its wait must still be at the head of the queue,
	// not withdrawn by the master when the stream broke and queued again
	// behind the waiters that came after it.
	t.Run("BrokenConnection", func(t *testing.T) {
		holder := lockHeld("fifo-blip")
		a, b, cw := newWaiter("a", true, 0), newWaiter("b", false, 0), newWaiter("c", false, 0)
		ws := []*fifoWaiter{a, b, cw}
		fifoQueue(t, ctx, c.Name("fifo-blip"), holder, ws)
		srv := c.Server(c.WaitForMaster(10 * time.Second))
		conns := srv.ConnStats().Conns
		a.cut.Cut()
		// The master has seen a's connection close (and with it the stream
		// its Acquire was parked on).
		pollUntil(t, 10*time.Second, "the master sees a's connection close", func() bool { return srv.ConnStats().Conns < conns })
		a.cut.Heal()
		pollUntil(t, 10*time.Second, "a reconnects", func() bool { _, err := a.h.GetStat(ctx); return err == nil })
		pollUntil(t, 10*time.Second, "three waiters", func() bool { st, err := holder.GetStat(ctx); return err == nil && st.LockWaiters == 3 })
		fifoWantQueue(t, ctx, holder, ws)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fifoWantGrants(t, ctx, ws)
	})

	// The other side of keeping a broken-off wait: a waiter whose client
	// is gone for good, handed the lock after it went, must not keep the
	// lock from the next waiter until its session expires, nor leave the
	// lock-delay its handle asked for behind: the master withdraws its wait
	// when its lease runs out, before the expiry, undoing the grant.
	t.Run("DeadWaiterIsWithdrawn", func(t *testing.T) {
		holder := lockHeld("fifo-dead")
		a, b := newWaiter("a", true, 0), newWaiter("b", false, 0)
		ws := []*fifoWaiter{a, b}
		for _, w := range ws {
			w.h = mustOpen(t, ctx, w.cl, c.Name("fifo-dead"), rw, client.WithLockDelay(time.Minute))
		}
		for i, w := range ws {
			w.got = make(chan error, 1)
			go func() { w.got <- w.h.Acquire(ctx, client.Exclusive) }()
			pollUntil(t, 10*time.Second, w.name+" queued", func() bool {
				st, err := holder.GetStat(ctx)
				return err == nil && len(st.Waiters) == i+1 && st.Waiters[i].Session == w.cl.Session()
			})
		}
		a.cut.Cut() // for good
		cut := time.Now()
		srv := c.Server(c.WaitForMaster(10 * time.Second))
		pollUntil(t, 10*time.Second, "a's wait detached", func() bool { return srv.Master().Stats().DetachedWaits == 1 })
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-b.got:
			if err != nil {
				t.Fatalf("b's Acquire: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("b was not granted the lock after a's client went (the lock stayed with a's session, or under its lock-delay)")
		}
		took := time.Since(cut)
		st, err := b.h.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Session != b.cl.Session() {
			t.Fatalf("holders %+v; want b's session %d", st.Holders, b.cl.Session())
		}
		if st.LockDelayBy != nil && st.LockDelayBy.Session == a.cl.Session() {
			t.Fatalf("a's expiry left a lock-delay (%+v): its wait was not withdrawn before its session expired", st.LockDelayBy)
		}
		if err := b.h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("b got the lock %v after a's client was cut off (lease %v)", took.Round(time.Millisecond), c.Options().LeaseTTL)
	})

	// Waits much longer than the client's RetryTimeout keep their places:
	// RetryTimeout bounds the search for a master, not the wait.
	t.Run("OutlivesRetryTimeout", func(t *testing.T) {
		const retry = 200 * time.Millisecond
		holder := lockHeld("fifo-retry")
		a, b := newWaiter("a", false, retry), newWaiter("b", false, retry)
		ws := []*fifoWaiter{a, b}
		queued := time.Now()
		fifoQueue(t, ctx, c.Name("fifo-retry"), holder, ws)
		// The scenario, not a synchronisation: both waits outlive
		// several RetryTimeouts before the holder lets go.
		pollUntil(t, 10*time.Second, "waits outlive RetryTimeout", func() bool { return time.Since(queued) > 5*retry })
		fifoWantQueue(t, ctx, holder, ws)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fifoWantGrants(t, ctx, ws)
	})

	// The holder's session expires: after its lock-delay the Grant the
	// master proposes hands the lock to the head of the queue.
	t.Run("LockDelayAfterExpiry", func(t *testing.T) {
		const delay = time.Second
		hcut := fixtures.NewCutter()
		hcfg := c.ClientConfig()
		hcfg.Dialer, hcfg.GracePeriod, hcfg.RetryTimeout = hcut.Dial, time.Second, time.Second
		hcl := c.ClientWith(t, hcfg)
		holder := mustOpen(t, ctx, hcl, c.Name("fifo-delay"), rw, client.WithLockDelay(delay))
		if ok, err := holder.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("the holder takes the lock: %v %v", ok, err)
		}
		a, b, cw := newWaiter("a", false, 0), newWaiter("b", false, 0), newWaiter("c", false, 0)
		ws := []*fifoWaiter{a, b, cw}
		watch := mustOpen(t, ctx, holderCl, c.Name("fifo-delay"), client.Read)
		fifoQueue(t, ctx, c.Name("fifo-delay"), watch, ws)
		hcut.Cut()
		pollUntil(t, 20*time.Second, "the holder's session expires", func() bool {
			st, err := watch.GetStat(ctx)
			return err == nil && st.LockDelayBy != nil && st.LockDelayBy.Session == hcl.Session()
		})
		fifoWantQueue(t, ctx, watch, ws)
		fifoWantGrants(t, ctx, ws)
	})

	// The master fails over while the waiters wait: the stopping master
	// closes their connections, and they retry at the new master, in
	// whatever order their clients get there.
	t.Run("MasterFailover", func(t *testing.T) {
		holder := lockHeld("fifo-failover")
		a, b, cw := newWaiter("a", false, 0), newWaiter("b", false, 0), newWaiter("c", false, 0)
		ws := []*fifoWaiter{a, b, cw}
		fifoQueue(t, ctx, c.Name("fifo-failover"), holder, ws)
		old := c.StopMaster()
		t.Cleanup(func() { c.Start(old) })
		c.WaitForMaster(30 * time.Second)
		for _, w := range ws {
			pollUntil(t, 30*time.Second, w.name+" reaches the new master", func() bool { _, err := w.h.GetStat(ctx); return err == nil })
		}
		fifoWantQueue(t, ctx, holder, ws)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fifoWantGrants(t, ctx, ws)
	})
}
