package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// The invalidator against fake sessions and a fake clock: no Raft, no
// network. The end-to-end cases (real clients, real caches) are in
// cell/cache_test.go and cell/nonack_test.go.

const testLease = 10 * time.Second

type invFixture struct {
	clock *fakeClock
	sess  *fakeSessions
	inv   *invalidator
	stop  chan struct{}
}

func newInvFixture(t *testing.T) *invFixture {
	clock, sess := newFakeClock(), newFakeSessions()
	f := &invFixture{clock: clock, sess: sess, stop: make(chan struct{}),
		inv: newInvalidator(clock, sess, "admin", testLease, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	t.Cleanup(func() { close(f.stop) })
	return f
}

// session starts a session whose lease ends a lease from now.
func (f *invFixture) session(id uint64) { f.sess.add(id, f.clock.Now().Add(testLease)) }

type change struct {
	done    chan struct{}
	err     error
	release func()
}

// change starts a change of names in its own goroutine, as a write would.
func (f *invFixture) change(names ...string) *change {
	c := &change{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.release, c.err = func() { f.inv.release(names) }, f.inv.invalidate(context.Background(), f.stop, names)
	}()
	return c
}

func (c *change) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait waits for the change's invalidations and releases its names.
func (c *change) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a change still waits for its invalidations")
	}
	if c.err != nil {
		t.Fatalf("invalidate: %v", c.err)
	}
	c.release()
}

// parked waits until n waits are parked on the clock, so advancing it
// reaches them.
func (f *invFixture) parked(t *testing.T, n int) {
	t.Helper()
	eventually(t, "the changes wait on the clock", func() bool { return f.clock.armed() == n })
}

func TestInvalidatorWriteWaitsForAck(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	if !f.inv.register(1, "p", "/ls/c/a") {
		t.Fatal("a live session with nothing outstanding may not cache")
	}
	c := f.change("/ls/c/a")
	f.parked(t, 1)
	if ev := f.sess.queued(1); len(ev) != 1 || ev[0].Path != "/ls/c/a" {
		t.Fatalf("cacher's queue holds %v; want one invalidation of /ls/c/a", ev)
	}
	if f.inv.register(2, "p", "/ls/c/a") {
		t.Fatal("a name with a change in flight was registered as cached")
	}
	f.clock.Advance(testLease - time.Second)
	if c.finished() {
		t.Fatal("the change went ahead before the cacher acknowledged or its lease ran out")
	}
	f.sess.ackAll(1)
	c.wait(t)
	if sent, late := f.inv.counts(); sent != 1 || late != 0 {
		t.Errorf("sent %d late %d; want 1 and 0", sent, late)
	}
}

func TestInvalidatorWaitsOutTheLeaseHeldAtQueueTime(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.inv.register(1, "p", "/ls/c/a")
	c := f.change("/ls/c/a")
	f.parked(t, 1)
	// KeepAlives go on extending the lease, but the event never gets
	// acknowledged: the change waits out only the lease of queue time.
	f.sess.extend(1, f.clock.Now().Add(10*testLease))
	f.clock.Advance(testLease - time.Millisecond)
	if c.finished() {
		t.Fatal("the change went ahead before the lease held at queue time ran out")
	}
	f.clock.Advance(2 * time.Millisecond)
	c.wait(t)
	if _, late := f.inv.counts(); late != 1 {
		t.Errorf("late %d; want 1", late)
	}
}

func TestInvalidatorSecondChangeWaitsOnFirstsInvalidations(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.inv.register(1, "p", "/ls/c/a")
	first := f.change("/ls/c/a")
	f.parked(t, 1)
	second := f.change("/ls/c/a")
	f.parked(t, 2)
	if sent, _ := f.inv.counts(); sent != 1 {
		t.Fatalf("sent %d invalidations; want 1 (the second change has no cacher of its own)", sent)
	}
	if second.finished() {
		t.Fatal("the second change went ahead while the first's invalidation was unacknowledged")
	}
	f.sess.ackAll(1)
	first.wait(t)
	second.wait(t)
	// Both released: the name may be cached again.
	if !f.inv.register(1, "p", "/ls/c/a") {
		t.Fatal("after both changes, a session in good standing may not cache the name")
	}
}

func TestInvalidatorLateInvalidationCountedOnce(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.inv.register(1, "p", "/ls/c/a")
	first := f.change("/ls/c/a")
	f.parked(t, 1)
	second := f.change("/ls/c/a")
	f.parked(t, 2)
	f.clock.Advance(testLease + time.Millisecond)
	first.wait(t)
	second.wait(t)
	if sent, late := f.inv.counts(); sent != 1 || late != 1 {
		t.Errorf("sent %d late %d; want one invalidation, counted late once", sent, late)
	}
}

func TestInvalidatorBarsNonAckingPrincipal(t *testing.T) {
	f := newInvFixture(t)
	for id := uint64(1); id <= 4; id++ {
		f.session(id)
	}
	f.inv.register(1, "p", "/ls/c/a")
	f.inv.register(2, "admin", "/ls/c/a")
	c := f.change("/ls/c/a")
	f.parked(t, 1) // one change waits for its invalidations one at a time
	// Both were sent the event and kept calling without acknowledging.
	f.sess.ignore(1)
	f.sess.ignore(2)
	f.clock.Advance(testLease + time.Millisecond)
	c.wait(t)
	if f.inv.register(3, "p", "/ls/c/b") {
		t.Error("a principal whose session ignored an invalidation to its deadline may still cache")
	}
	if !f.inv.register(4, "q", "/ls/c/b") {
		t.Error("another principal was barred too")
	}
	if !f.inv.register(4, "admin", "/ls/c/b") {
		t.Error("the admin was barred")
	}
	f.clock.Advance(cachePenaltyLeases * testLease)
	if !f.inv.register(3, "p", "/ls/c/b") {
		t.Error("the bar outlasted its penalty")
	}
}

func TestInvalidatorOutstandingInvalidationStopsRegistering(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.inv.register(1, "p", "/ls/c/a")
	c := f.change("/ls/c/a")
	f.parked(t, 1)
	if f.inv.register(1, "p", "/ls/c/b") {
		t.Fatal("a session with an unacknowledged invalidation was registered for another name")
	}
	f.sess.ackAll(1)
	c.wait(t)
	if !f.inv.register(1, "p", "/ls/c/b") {
		t.Fatal("a session that acknowledged everything may not cache")
	}
}

func TestInvalidatorEndedSessionReleasesTheChange(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.session(2)
	f.inv.register(1, "p", "/ls/c/a")
	f.inv.register(2, "p", "/ls/c/a")
	f.inv.forget(2) // session 2 ended before the change: nothing to send it
	c := f.change("/ls/c/a")
	f.parked(t, 1)
	f.sess.end(1)
	c.wait(t)
	if sent, late := f.inv.counts(); sent != 1 || late != 0 {
		t.Errorf("sent %d late %d; want 1 and 0 (an ended session is neither acked nor late)", sent, late)
	}
	if q := f.sess.queued(2); len(q) != 0 {
		t.Errorf("a forgotten session was sent %v", q)
	}
}

func TestInvalidatorStopEndsTheWait(t *testing.T) {
	f := newInvFixture(t)
	f.session(1)
	f.inv.register(1, "p", "/ls/c/a")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		err := f.inv.invalidate(context.Background(), stop, []string{"/ls/c/a"})
		f.inv.release([]string{"/ls/c/a"})
		done <- err
	}()
	f.parked(t, 1)
	close(stop)
	select {
	case err := <-done:
		if !errors.Is(err, errStopped) {
			t.Fatalf("a change on a stopped master returned %v; want errStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the change still waits after the master stopped")
	}
	if f.inv.register(2, "p", "/ls/c/a") {
		t.Fatal("a session without a lease was registered")
	}
}
