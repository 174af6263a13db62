package master

import (
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
	k := waitKey{handle: 7, seq: 3}
	woke, done := w.add(k)
	w.wake(waitKey{handle: 7, seq: 4}) // another wait of the handle
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
	done()
	w.wake(k) // unregistered: a no-op
	if len(w.waits) != 0 {
		t.Fatalf("%d waits registered after done", len(w.waits))
	}
}
