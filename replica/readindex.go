package replica

import "sync"

// applyWake is a broadcast of "an entry was applied": a channel closed at
// the next apply, made only while someone waits, so an apply with no
// waiter costs one uncontended lock.
type applyWake struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next apply.
func (w *applyWake) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// fire closes the waiters' channel, if any.
func (w *applyWake) fire() {
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// AppliedWake returns a channel closed once the next entry is applied to
// the state machine: what a read waiting for an index waits on between
// looks at the state.
func (r *Replica) AppliedWake() <-chan struct{} { return r.rf.wake.wait() }
