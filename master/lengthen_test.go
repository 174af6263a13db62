package master

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// Lease lengthening under load (sessions.grantTTLLocked), against a fake
// clock. End to end: cell.TestLeasesLengthenUnderLoad.

// newLengtheningSessions is newTestSessions with leases that lengthen up
// to maxTTL above target KeepAlives a second; ids are the sessions of the
// state at the term's start (a fail-over).
func newLengtheningSessions(t *testing.T, maxTTL time.Duration, target int, ids ...uint64) (*sessions, *fakeClock, chan struct{}) {
	clock := newFakeClock()
	ss := newSessions(clock, testLease, alwaysLeader{clock}, &masterStats{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ss.lengthen(maxTTL, target)
	ss.start(testEpoch, ids)
	stop := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	})
	return ss, clock, stop
}

func TestLeaseLengthensWithTheSessionCountWithinItsBounds(t *testing.T) {
	ss, _, _ := newLengtheningSessions(t, 6*testLease, 1)
	// One KeepAlive a second: n sessions on a lease of L call n/(0.75 L)
	// times a second, so the lease is n/0.75 seconds, whole, within
	// [testLease, 6 testLease].
	for _, c := range []struct {
		sessions int
		want     time.Duration
	}{
		{1, testLease},
		{7, testLease},          // 9.33 s: the lease itself is longer
		{9, 12 * time.Second},   // exactly 12 s
		{10, 14 * time.Second},  // 13.33 s, rounded up
		{30, 40 * time.Second},  // exactly 40 s
		{1000, 6 * testLease},   // capped
		{100000, 6 * testLease}, // capped
	} {
		for id := uint64(len(ss.leases) + 1); len(ss.leases) < c.sessions; id++ {
			ss.created(id, 0)
		}
		if got := ss.grantTTL(); got != c.want {
			t.Errorf("%d sessions at one KeepAlive a second: lease %v; want %v", c.sessions, got, c.want)
		}
	}

	// Off: the lease never lengthens, however many sessions.
	off, _, _ := newTestSessions(t)
	for id := uint64(1); id <= 1000; id++ {
		off.created(id, 0)
	}
	if got := off.grantTTL(); got != testLease {
		t.Fatalf("without lengthening, 1,000 sessions get %v; want %v", got, testLease)
	}
}

func TestKeepAliveGrantsTheLengthenedLease(t *testing.T) {
	const maxTTL = 4 * testLease
	ss, clock, stop := newLengtheningSessions(t, maxTTL, 1)
	for id := uint64(1); id <= 1000; id++ {
		ss.created(id, 0)
	}
	// Session 1 was told a plain lease at its creation, and has less than
	// a quarter of the long lease left: its first KeepAlive is answered
	// at once, with the long lease.
	r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.HeldMillis != 0 || r.resp.LeaseMillis != maxTTL.Milliseconds() {
		t.Fatalf("reply held %d ms and grants %d ms; want at once, with the lengthened lease, %v", r.resp.HeldMillis, r.resp.LeaseMillis, maxTTL)
	}
	// The next call is held until a quarter of the long lease is left.
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	clock.Advance(maxTTL*3/4 - time.Millisecond)
	parked(t, ch)
	clock.Advance(time.Millisecond)
	if r := answered(t, ch); r.err != nil || r.resp.HeldMillis != (maxTTL*3/4).Milliseconds() {
		t.Fatalf("second KeepAlive: %+v, %v; want held %v", r.resp, r.err, maxTTL*3/4)
	}
	if slices.Contains(ss.expired(clock.Now().Add(maxTTL-time.Millisecond)), 1) {
		t.Fatalf("session 1 is expired within its lengthened lease")
	}
}

func TestFailoverHonoursTheLongestLeaseAnyMasterGrants(t *testing.T) {
	const maxTTL = 5 * testLease
	// Two sessions at the start of a term, and a target no load reaches:
	// the new master grants nothing long itself, but its predecessor may
	// have, so no session expires before the longest lease from the start.
	ss, clock, stop := newLengtheningSessions(t, maxTTL, 1_000_000, 1, 2)
	if left := ss.leaseLeft([]uint64{1, 2}, clock.Now()); left[1] != maxTTL || left[2] != maxTTL {
		t.Fatalf("leases left at the start of the term %v; want %v each", left, maxTTL)
	}
	if n := len(ss.expired(clock.Now().Add(maxTTL - time.Millisecond))); n != 0 {
		t.Fatalf("%d sessions expire within the longest lease after a fail-over", n)
	}
	// Session 1 acknowledges the fail-over; its next KeepAlive must not be
	// held past the plain lease it was just told, although the master
	// keeps its lease far longer.
	r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if r.err != nil || len(r.resp.Events) != 1 {
		t.Fatalf("first KeepAlive after the fail-over: %+v, %v", r.resp, r.err)
	}
	if r.resp.LeaseMillis != testLease.Milliseconds() {
		t.Fatalf("unloaded master grants %d ms; want %v", r.resp.LeaseMillis, testLease)
	}
	ch := keepAliveAsync(t, ss, clock, stop, 1, r.resp.Events[0].Seq)
	clock.Advance(testLease*3/4 - time.Millisecond)
	parked(t, ch)
	clock.Advance(time.Millisecond)
	if r := answered(t, ch); r.err != nil || r.resp.HeldMillis != (testLease*3/4).Milliseconds() {
		t.Fatalf("KeepAlive after the fail-over: %+v, %v; want held %v, within the lease the client was told", r.resp, r.err, testLease*3/4)
	}
	// Session 2 never called: it expires only after the longest lease
	// and the slack.
	clock.Advance(maxTTL - testLease*3/4 - time.Millisecond)
	for _, id := range ss.expired(clock.Now()) {
		if id == 2 {
			t.Fatalf("session 2 expired before the longest lease from the fail-over")
		}
	}
	clock.Advance(ss.expirySlack() + 2*time.Millisecond)
	if !slices.Contains(ss.expired(clock.Now()), 2) {
		t.Fatalf("session 2 is not expired after the longest lease and the slack")
	}
}
