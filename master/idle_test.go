package master

import (
	"slices"
	"testing"
	"time"

	"lockcell/wire"
)

// TestIdleCallsFindOnlyQuietSessions: the master's memory of sessions'
// calls names a session idle only once it has been seen with a lease for
// the timeout and made no call for as long, and never while a call of it
// is in progress, however long that call takes; calls of sessions it
// holds no entry for (no lease: a bogus id) are not remembered; a new
// term starts every clock afresh.
func TestIdleCallsFindOnlyQuietSessions(t *testing.T) {
	const timeout = time.Minute
	var ic idleCalls
	begin := func(session uint64, now time.Time) *idleEntry {
		e, draining := ic.begin(session, now)
		if draining {
			t.Fatalf("session %d draining", session)
		}
		return e
	}
	t0 := time.Unix(1000, 0)
	live := []uint64{1, 2, 3}
	if got := ic.idle(live, t0, timeout); len(got) != 0 {
		t.Fatalf("sessions first seen now are idle: %v", got)
	}
	if e := begin(99, t0); e != nil {
		t.Fatal("a call of a session without a lease made an entry")
	}
	// 2 calls and is answered; 3 calls and its call stays in progress.
	ic.end(begin(2, t0.Add(30*time.Second)), t0.Add(31*time.Second))
	long := begin(3, t0.Add(10*time.Second))

	if got := ic.idle(live, t0.Add(timeout-time.Second), timeout); len(got) != 0 {
		t.Fatalf("idle before the timeout: %v", got)
	}
	if got := ic.idle(live, t0.Add(timeout), timeout); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("idle at the timeout: %v, want [1]", got)
	}
	later := t0.Add(10 * timeout)
	got := ic.idle(live, later, timeout)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("idle long after: %v, want [1 2] (3 has a call in progress)", got)
	}
	ic.end(long, later)
	if got := ic.idle(live, later.Add(timeout-time.Second), timeout); slices.Contains(got, 3) {
		t.Fatalf("3 is idle less than a timeout after its long call ended: %v", got)
	}

	// A session without a lease is forgotten; a new term forgets all.
	ic.idle([]uint64{1}, later, timeout)
	if ic.calls[2] != nil {
		t.Fatal("the entry of a session without a lease was kept")
	}
	ic.forgetAll()
	if got := ic.idle([]uint64{1}, later.Add(timeout), timeout); len(got) != 0 {
		t.Fatalf("after a new term a session is idle at once: %v", got)
	}
}

// BenchmarkIdleCallsBeginEnd is what noting a call costs Dispatch while
// the idle timeout is on: begin and end on the leaf mutex, from parallel
// callers on a table of 100,000 sessions.
func BenchmarkIdleCallsBeginEnd(b *testing.B) {
	var ic idleCalls
	live := make([]uint64, 100000)
	for i := range live {
		live[i] = uint64(i + 1)
	}
	now := time.Now()
	ic.idle(live, now, time.Minute)
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			i++
			e, _ := ic.begin(i%100000+1, now)
			ic.end(e, now)
		}
	})
}

// TestIdleDrainLetsTheLeaseRunOut: a session the master finds idle is
// not closed while its lease runs (a client serves its cache for as long
// as its lease runs, master/idle.go): its parked KeepAlive is answered at
// once with the idle-closed message, a later KeepAlive is answered so
// too and extends nothing (its acknowledgement still counts), and only
// once the lease and the slack ran out does the expiry loop take the
// session, as an idle close. A call of the session before that ends the
// drain, and its next KeepAlive extends the lease again.
func TestIdleDrainLetsTheLeaseRunOut(t *testing.T) {
	const timeout = time.Second
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	var ic idleCalls
	ic.idle([]uint64{1}, clock.Now().Add(-timeout), timeout) // 1 made its last call a timeout ago
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	parked(t, ch)
	end := clock.Now().Add(ss.leaseLeft([]uint64{1}, clock.Now())[1])

	if !ss.markIdle(1, &ic, clock.Now(), timeout) {
		t.Fatal("an idle session's drain did not start")
	}
	if r := answered(t, ch); !wire.IsSessionIdleClosed(r.err) {
		t.Fatalf("the parked KeepAlive: %+v, %v; want the idle-closed answer at once", r.resp, r.err)
	}
	_, seq, _, ok := ss.queueInvalidation(1, "/ls/c/x")
	if !ok {
		t.Fatal("no invalidation queued on a draining session")
	}
	clock.Advance(time.Second)
	if r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, seq)); !wire.IsSessionIdleClosed(r.err) {
		t.Fatalf("a KeepAlive of a draining session: %+v, %v; want the idle-closed answer", r.resp, r.err)
	}
	if got := clock.Now().Add(ss.leaseLeft([]uint64{1}, clock.Now())[1]); !got.Equal(end) {
		t.Fatalf("a draining session's KeepAlive moved its lease end from %v to %v", end, got)
	}
	if done, _, _ := ss.ackState(ss.leases[1], seq); !done {
		t.Fatal("a draining session's acknowledgement was not recorded")
	}
	if ids := ss.expired(end); len(ids) != 0 || !ss.idleDraining(1) {
		t.Fatalf("expired at the lease's end, before the slack: %v (draining %v)", ids, ss.idleDraining(1))
	}
	if ids := ss.expired(end.Add(ss.expirySlack() + time.Millisecond)); !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("expired after the lease and slack: %v, want [1]", ids)
	}

	// A call before the close ends the drain.
	if _, draining := ic.begin(1, clock.Now()); !draining {
		t.Fatal("a call of a draining session was not told of the drain")
	}
	ss.unmarkIdle(1)
	if ss.idleDraining(1) {
		t.Fatal("the drain outlived a call of the session")
	}
	ch = keepAliveAsync(t, ss, clock, stop, 1, seq)
	parked(t, ch)
	if got := clock.Now().Add(ss.leaseLeft([]uint64{1}, clock.Now())[1]); !got.After(end) {
		t.Fatal("the KeepAlive after the drain ended did not extend the lease")
	}
	if ss.markIdle(1, &ic, clock.Now(), timeout) {
		t.Fatal("a session with a call in progress was drained")
	}
}

// A write held by a session whose lease the master lets run out to close
// it for idleness waits out that lease as for any cacher (the client may
// serve its cache until then), but the wait is the master's choice, not
// the principal's doing: however many such holds, the principal is never
// barred from caching.
func TestIdleDrainHoldsAreNotCharged(t *testing.T) {
	f := newInvFixture(t)
	const name = "/ls/c/f"
	for i := range 5 {
		id := uint64(1 + i)
		f.sess.add(id, f.clock.Now().Add(testLease))
		f.sess.mu.Lock()
		f.sess.leases[id].idle = true // draining: its KeepAlives are refused
		f.sess.mu.Unlock()
		if !f.inv.register(id, "p", name) {
			t.Fatalf("round %d: the principal was barred by its draining sessions' holds", i)
		}
		c := f.change(name)
		f.parked(t, 1)
		f.clock.Advance(testLease - time.Millisecond)
		if c.finished() {
			t.Fatalf("round %d: the write went ahead before the draining cacher's lease ran out", i)
		}
		f.clock.Advance(2 * time.Millisecond)
		c.wait(t)
	}
	if st := statsOf(f.inv); st.Bars != 0 {
		t.Fatalf("stats %+v; want no bar", st)
	}
}
