package cell_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A Stat names who holds a lock and who waits for it as their clients
// declared themselves (host, pid, program), with when each got the lock
// or queued; once the holder's session expires, it names that session as
// the cause of the running lock-delay, until when, and the waiter gets the
// lock only after it. A client that declares nothing is shown as the
// process it is; an identity a Stat could not show is refused at Dial.
func TestStatNamesIdentitiesTimesAndLockDelayCause(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 60*time.Second)
	cut := fixtures.NewCutter()
	idA := client.Identity{Host: "host-a", PID: 1111, Program: "prog-a"}
	idB := client.Identity{Host: "host-b", PID: 2222, Program: "prog-b"}
	cfgA := c.ClientConfig()
	cfgA.Identity, cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = idA, cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	cfgB := c.ClientConfig()
	cfgB.Identity = idB
	b := c.ClientWith(t, cfgB)
	watcher := c.Client(t) // declares the process it is
	const delay = 2 * time.Second
	const rw = client.Read | client.Write | client.Create

	start := time.Now()
	lockA := mustOpen(t, ctx, a, c.Name("lock"), rw, client.WithLockDelay(delay))
	if ok, err := lockA.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("a acquires: %v %v", ok, err)
	}
	lockB := mustOpen(t, ctx, b, c.Name("lock"), rw)
	got := make(chan error, 1)
	go func() { got <- lockB.Acquire(ctx, client.Exclusive) }()
	view := mustOpen(t, ctx, watcher, c.Name("lock"), client.Read)
	var st client.Stat
	pollUntil(t, 10*time.Second, "b queued", func() bool {
		var err error
		st, err = view.GetStat(ctx)
		return err == nil && st.LockWaiters == 1
	})
	queuedBy := time.Now()
	if len(st.Holders) != 1 || st.Holders[0].Session != a.Session() || st.Holders[0].Identity != idA {
		t.Fatalf("holders %+v, want a's session %d declaring %+v", st.Holders, a.Session(), idA)
	}
	// The master's clock is this machine's: times fall inside the test's.
	held := st.Holders[0].Since
	if held.Before(start.Add(-time.Second)) || held.After(queuedBy) {
		t.Errorf("a holds since %v, not between %v and %v", held, start, queuedBy)
	}
	if len(st.Waiters) != 1 || st.Waiters[0].Session != b.Session() || st.Waiters[0].Identity != idB ||
		st.Waiters[0].Mode != client.Exclusive || st.Waiters[0].Since.Before(held) || st.Waiters[0].Since.After(queuedBy) {
		t.Fatalf("waiters %+v, want b's session %d declaring %+v, queued after %v", st.Waiters, b.Session(), idB, held)
	}
	if st.LockDelayBy != nil {
		t.Fatalf("a lock never delayed names a lock-delay cause: %+v", st.LockDelayBy)
	}

	// A's session expires: the lock-delay runs, and the Stat says why.
	cutAt := time.Now()
	cut.Cut()
	pollUntil(t, 20*time.Second, "a's session expired", func() bool {
		var err error
		st, err = view.GetStat(ctx)
		return err == nil && st.LockDelayBy != nil
	})
	by := st.LockDelayBy
	if by.Session != a.Session() || by.Identity != idA || by.Expired.Before(cutAt) {
		t.Fatalf("lock-delay by %+v, want a's session %d declaring %+v, expired after the cut at %v", by, a.Session(), idA, cutAt)
	}
	if d := st.LockDelayUntil.Sub(by.Expired); d != delay {
		t.Errorf("lock-delay from %v until %v: %v, want a's %v", by.Expired, st.LockDelayUntil, d, delay)
	}
	if err := <-got; err != nil {
		t.Fatalf("b acquires: %v", err)
	}
	st, err := view.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Identity != idB || st.Holders[0].Since.Before(st.LockDelayUntil) || len(st.Waiters) != 0 {
		t.Fatalf("after the lock-delay: holders %+v waiters %+v, want b holding since %v or later", st.Holders, st.Waiters, st.LockDelayUntil)
	}
	if st.LockDelayBy == nil || st.LockDelayBy.Session != a.Session() {
		t.Errorf("the ended lock-delay's cause is gone: %+v", st.LockDelayBy)
	}

	// Declaring nothing declares this process.
	mine := mustOpen(t, ctx, watcher, c.Name("mine"), rw)
	if ok, err := mine.TryAcquire(ctx, client.Shared); !ok || err != nil {
		t.Fatalf("watcher acquires: %v %v", ok, err)
	}
	if st, err := mine.GetStat(ctx); err != nil || len(st.Holders) != 1 || st.Holders[0].Identity != client.ProcessIdentity() ||
		st.Holders[0].Identity.PID == 0 || st.Holders[0].Identity.Program == "" {
		t.Fatalf("default identity: %+v, %v; want %+v", st.Holders, err, client.ProcessIdentity())
	}

	// An identity a Stat could not show is refused, typed.
	for _, id := range []client.Identity{{Host: "two\nlines"}, {Program: strings.Repeat("p", client.MaxIdentityLen+1)}, {PID: -1}} {
		cfg := c.ClientConfig()
		cfg.Identity = id
		if cl, err := client.Dial(ctx, cfg); !errors.Is(err, client.ErrBadRequest) {
			if cl != nil {
				cl.Close()
			}
			t.Errorf("dial declaring %.60v: %v, want ErrBadRequest", id, err)
		}
	}
}
