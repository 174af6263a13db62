package master

import (
	"context"
	"sync"
	"time"

	"lockcell/fsm"
)

// lockDelays is the master's part that ends lock-delays. A lock whose
// holder failed stays free until its lock-delay ends, and the state
// machine then needs a Grant command to hand it to the first waiter: the
// part keeps one timer per such name on the master's clock and proposes
// the Grant when it fires, so waiters get the lock without polling. A new
// master re-arms a timer for every delay the state holds (Start).
//
// Its mutex is a leaf: the observer arms timers holding Server.mu, and a
// firing timer proposes its Grant holding no lock.
type lockDelays struct {
	clock Clock
	// grant proposes the hand-off of the lock at path; stop is the term
	// of service the timer belonged to.
	grant func(stop <-chan struct{}, path string)
	wg    *sync.WaitGroup // the Server's: Stop waits for hand-offs in flight

	mu     sync.Mutex
	stop   <-chan struct{} // the term the timers belong to; nil when not serving
	timers map[string]*delayTimer
}

type delayTimer struct{ t Timer }

func newLockDelays(clock Clock, wg *sync.WaitGroup, grant func(stop <-chan struct{}, path string)) *lockDelays {
	return &lockDelays{clock: clock, grant: grant, wg: wg, timers: map[string]*delayTimer{}}
}

// start begins a term of service that ends when stop is closed.
func (d *lockDelays) start(stop <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stop = stop
}

// arm schedules the hand-off of the lock at path for when its lock-delay
// ends (until, Unix ns), replacing a timer armed earlier for path. Outside
// a term of service it does nothing.
func (d *lockDelays) arm(path string, until int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop == nil {
		return
	}
	if old := d.timers[path]; old != nil {
		old.t.Stop()
	}
	wait := time.Unix(0, until).Sub(d.clock.Now())
	stop, dt := d.stop, &delayTimer{}
	d.timers[path] = dt
	// The extra millisecond: the state machine compares the delay's end
	// with the Grant's time, which must be past it.
	dt.t = d.clock.AfterFunc(max(wait, 0)+time.Millisecond, func() {
		d.mu.Lock()
		if d.stop != stop || d.timers[path] != dt {
			d.mu.Unlock() // a later term, or replaced by a later arm
			return
		}
		delete(d.timers, path)
		d.wg.Add(1)
		d.mu.Unlock()
		defer d.wg.Done()
		d.grant(stop, path)
	})
}

// stopAll ends the term of service: every timer is stopped, and one that
// fires anyway hands nothing off. Called before the Server waits for its
// goroutines, so no hand-off starts after that wait began.
func (d *lockDelays) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stop = nil
	for p, dt := range d.timers {
		dt.t.Stop()
		delete(d.timers, p)
	}
}

// armed counts the hand-offs scheduled.
func (d *lockDelays) armed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.timers)
}

// grantAfterDelay proposes the Grant that hands the lock at path to its
// first waiter once its lock-delay is over.
func (s *Server) grantAfterDelay(stop <-chan struct{}, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.w.applyInvalidating(ctx, stop, &fsm.Command{Time: s.now(), Payload: &fsm.GrantArgs{Path: path}}); err != nil {
		s.log.Warn("lock-delay hand-off failed", "path", path, "err", err)
	}
}
