package master

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The lock-delay hand-off and the acquire wake-ups against a fake clock,
// without Raft. End to end: cell.TestLockDelaySurvivesMasterFailover and
// fixtures/safety.TestLockDelay.

type grants struct {
	mu    sync.Mutex
	paths []string
}

func (g *grants) grant(_ <-chan struct{}, path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paths = append(g.paths, path)
}

func (g *grants) got() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.paths...)
}

func newTestDelays(t *testing.T) (*lockDelays, *fakeClock, *grants, chan struct{}) {
	clock, g := newFakeClock(), &grants{}
	var wg sync.WaitGroup
	d := newLockDelays(clock, &wg, g.grant)
	stop := make(chan struct{})
	d.start(stop)
	t.Cleanup(func() {
		d.stopAll()
		wg.Wait()
	})
	return d, clock, g, stop
}

func TestLockDelayHandsOffWhenTheDelayEnds(t *testing.T) {
	d, clock, g, _ := newTestDelays(t)
	d.arm("/ls/c/l", clock.Now().Add(time.Minute).UnixNano())
	clock.Advance(time.Minute) // the Grant must come after the delay's end
	if got := g.got(); len(got) != 0 {
		t.Fatalf("handed off %v at the delay's end; want strictly after", got)
	}
	clock.Advance(time.Millisecond)
	if got := g.got(); len(got) != 1 || got[0] != "/ls/c/l" {
		t.Fatalf("handed off %v; want /ls/c/l once", got)
	}
	if n := d.armed(); n != 0 {
		t.Errorf("%d timers left after the hand-off", n)
	}
}

func TestLockDelayRearmReplacesAndPastDelayFiresAtOnce(t *testing.T) {
	d, clock, g, _ := newTestDelays(t)
	d.arm("/ls/c/l", clock.Now().Add(time.Second).UnixNano())
	d.arm("/ls/c/l", clock.Now().Add(time.Minute).UnixNano()) // a later delay of the same lock
	clock.Advance(2 * time.Second)
	if got := g.got(); len(got) != 0 {
		t.Fatalf("the replaced timer handed off %v", got)
	}
	clock.Advance(time.Minute)
	if got := g.got(); len(got) != 1 {
		t.Fatalf("handed off %v; want one hand-off", got)
	}
	d.arm("/ls/c/m", clock.Now().Add(-time.Hour).UnixNano()) // already over (a new master's re-arm)
	clock.Advance(time.Millisecond)
	if got := g.got(); len(got) != 2 || got[1] != "/ls/c/m" {
		t.Fatalf("handed off %v; want /ls/c/m handed off at once", got)
	}
}

func TestLockDelayNothingAfterStop(t *testing.T) {
	d, clock, g, _ := newTestDelays(t)
	d.arm("/ls/c/l", clock.Now().Add(time.Second).UnixNano())
	d.stopAll()
	d.arm("/ls/c/m", clock.Now().Add(time.Second).UnixNano()) // not serving: ignored
	clock.Advance(time.Hour)
	if got := g.got(); len(got) != 0 {
		t.Fatalf("a stopped master handed off %v", got)
	}
	if n := d.armed(); n != 0 {
		t.Fatalf("%d timers armed on a stopped master", n)
	}
}

func TestAcquireWaitsWake(t *testing.T) {
	var w acquireWaits
	k := waitKey{session: 5, handle: 7, seq: 3}
	woke, err := w.attach(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	w.wake(waitKey{session: 5, handle: 7, seq: 4}) // another wait of the handle
	select {
	case <-woke:
		t.Fatal("woken by another wait's change")
	default:
	}
	w.wake(k)
	w.wake(k) // never blocks, however many changes come
	select {
	case <-woke:
	default:
		t.Fatal("not woken by its own grant")
	}
	w.leave(k, woke)
	w.wake(k) // unregistered: a no-op
	if len(w.waits) != 0 {
		t.Fatalf("%d waits registered after leave", len(w.waits))
	}
}

// newTestWaits is an acquireWaits on a fake clock, and a withdraw that
// counts its runs per key.
func newTestWaits(t *testing.T) (*acquireWaits, *fakeClock, func(waitKey) func(), func(waitKey) int) {
	clock := newFakeClock()
	var wg sync.WaitGroup
	w := &acquireWaits{clock: clock, wg: &wg}
	t.Cleanup(func() {
		w.stopAll()
		wg.Wait()
	})
	var mu sync.Mutex
	ran := map[waitKey]int{}
	withdraw := func(k waitKey) func() {
		return func() {
			mu.Lock()
			defer mu.Unlock()
			ran[k]++
		}
	}
	count := func(k waitKey) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[k]
	}
	return w, clock, withdraw, count
}

// fixedDue gives detach a due that keeps a wait d from the moment it is
// made.
func fixedDue(clock *fakeClock) func(time.Duration) func() time.Duration {
	return func(d time.Duration) func() time.Duration {
		deadline := clock.Now().Add(d)
		return func() time.Duration { return max(deadline.Sub(clock.Now()), 0) }
	}
}

// A detached wait is kept for as long as due says, asked again whenever
// that runs out: a session that renews its lease meanwhile (its client is
// alive) keeps it longer, up to due's bound.
func TestAcquireWaitsDetachAsksDueAgain(t *testing.T) {
	w, clock, withdraw, ran := newTestWaits(t)
	k := waitKey{session: 5, handle: 7, seq: 3}
	leaseEnd := clock.Now().Add(time.Second)
	bound := clock.Now().Add(3 * time.Second)
	due := func() time.Duration { return max(min(leaseEnd.Sub(clock.Now()), bound.Sub(clock.Now())), 0) }
	woke, _ := w.attach(context.Background(), k)
	w.detach(k, woke, make(chan struct{}), due, withdraw(k))
	clock.Advance(time.Second / 2)
	leaseEnd = clock.Now().Add(time.Second) // a KeepAlive renewed the lease
	clock.Advance(time.Second / 2)
	if n := ran(k); n != 0 {
		t.Fatalf("withdrawn at the old lease end of a session that renewed it")
	}
	clock.Advance(time.Second / 2)
	if n := ran(k); n != 1 {
		t.Fatalf("withdrawn %d time(s) when the renewed lease ran out; want 1", n)
	}
	woke, _ = w.attach(context.Background(), k)
	w.detach(k, woke, make(chan struct{}), due, withdraw(k))
	for range 10 { // renewed again and again: the bound still holds
		leaseEnd = clock.Now().Add(time.Second)
		clock.Advance(time.Second / 2)
	}
	if n := ran(k); n != 2 {
		t.Fatalf("withdrawn %d time(s) in all; want 2: the bound ends the wait of a session that lives on", n)
	}
}

// A call whose stream broke leaves its wait queued for a lease: the
// client's retry of the request id re-attaches and the wait keeps its
// place; without a retry it is withdrawn once the lease has passed.
func TestAcquireWaitsDetachKeepsThePlace(t *testing.T) {
	w, clock, withdraw, ran := newTestWaits(t)
	after := fixedDue(clock)
	stop := make(chan struct{})
	ctx := context.Background()
	k := waitKey{session: 5, handle: 7, seq: 3}
	woke, _ := w.attach(ctx, k)
	w.detach(k, woke, stop, after(time.Second), withdraw(k))
	if n := w.detached(); n != 1 {
		t.Fatalf("%d detached waits; want 1", n)
	}
	clock.Advance(time.Second / 2)
	again, _ := w.attach(ctx, k) // the client's retry, within the lease
	clock.Advance(time.Hour)
	if n := ran(k); n != 0 {
		t.Fatalf("a re-attached wait was withdrawn %d time(s)", n)
	}
	w.wake(k)
	select {
	case <-again:
	default:
		t.Fatal("the re-attached call is not woken by its grant")
	}
	w.detach(k, again, stop, after(time.Second), withdraw(k)) // broke again; no retry this time
	clock.Advance(time.Second - time.Millisecond)
	if n := ran(k); n != 0 {
		t.Fatalf("withdrawn %d time(s) before the lease passed", n)
	}
	clock.Advance(time.Millisecond)
	if n := ran(k); n != 1 {
		t.Fatalf("withdrawn %d time(s) a lease after the stream broke; want 1", n)
	}
	if len(w.waits) != 0 || w.detached() != 0 {
		t.Fatalf("%d waits (%d detached) kept after the withdraw", len(w.waits), w.detached())
	}
}

// Two calls of one request id at once (a retry that arrived before the
// broken call noticed): the one that breaks schedules nothing while the
// other waits.
func TestAcquireWaitsDetachWithACallStillAttached(t *testing.T) {
	w, clock, withdraw, ran := newTestWaits(t)
	after := fixedDue(clock)
	stop := make(chan struct{})
	k := waitKey{session: 5, handle: 7, seq: 3}
	old, _ := w.attach(context.Background(), k)
	retry, _ := w.attach(context.Background(), k)
	w.detach(k, old, stop, after(time.Second), withdraw(k))
	clock.Advance(time.Hour)
	if n := ran(k); n != 0 || w.detached() != 0 {
		t.Fatalf("withdrawn %d time(s) (%d detached) while a call of the request id waits", n, w.detached())
	}
	w.leave(k, retry)
	if len(w.waits) != 0 {
		t.Fatalf("%d waits registered after both calls ended", len(w.waits))
	}
}

// The client's own CancelAcquire, and the end of the term, each cancel a
// scheduled withdraw: the first withdraws the wait itself, and after the
// second the wait stays queued for the next master.
func TestAcquireWaitsForgetAndStop(t *testing.T) {
	w, clock, withdraw, ran := newTestWaits(t)
	after := fixedDue(clock)
	stop := make(chan struct{})
	a, b, c := waitKey{5, 1, 1}, waitKey{5, 2, 1}, waitKey{5, 3, 1}
	for _, k := range []waitKey{a, b} {
		woke, _ := w.attach(context.Background(), k)
		w.detach(k, woke, stop, after(time.Second), withdraw(k))
	}
	w.forget(a)
	w.stopAll()
	close(stop)
	woke, _ := w.attach(context.Background(), c)
	w.detach(c, woke, stop, after(time.Second), withdraw(c)) // after the term: nothing scheduled
	clock.Advance(time.Hour)
	for _, k := range []waitKey{a, b, c} {
		if n := ran(k); n != 0 {
			t.Fatalf("wait %v withdrawn %d time(s)", k, n)
		}
	}
	if len(w.waits) != 0 {
		t.Fatalf("%d waits kept after forget and stop", len(w.waits))
	}
}

// A call of the request id that comes back while its withdraw is being
// applied waits for the withdraw to finish, so it reads the state after
// it: it never answers as its own a grant the withdraw is undoing.
func TestAcquireWaitsAttachWaitsForAWithdrawInFlight(t *testing.T) {
	clock := newFakeClock()
	var wg sync.WaitGroup
	w := &acquireWaits{clock: clock, wg: &wg}
	k := waitKey{session: 5, handle: 7, seq: 3}
	entered, release := make(chan struct{}), make(chan struct{})
	woke, _ := w.attach(context.Background(), k)
	w.detach(k, woke, make(chan struct{}), fixedDue(clock)(time.Second), func() {
		close(entered)
		<-release
	})
	go clock.Advance(time.Second)
	<-entered
	attached := make(chan error, 1)
	go func() {
		_, err := w.attach(context.Background(), k)
		attached <- err
	}()
	select {
	case err := <-attached:
		t.Fatalf("attached (%v) while the withdraw was being applied", err)
	case <-time.After(50 * time.Millisecond): // a negative check: nothing may happen
	}
	close(release)
	if err := <-attached; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.attach(ctx, k); err != nil {
		t.Fatalf("attach after the withdraw finished: %v", err)
	}
}
