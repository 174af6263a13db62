package master

import (
	"context"
	"sync"
	"time"
)

// acquireWaits is the master's part that wakes blocked acquires and keeps
// their places when their calls break. Each Acquire parked here attaches
// to its (handle, request id); the observer wakes every call attached to a
// key when the state machine grants it the lock or ends its wait.
//
// A call whose stream ends while it waits (the connection broke, the
// client redialled, the replica is shutting down) does not withdraw its
// wait: a client that still wants the lock retries the same request id,
// here or at the next master, and must find its place in the queue
// unchanged, or FIFO would be broken by every network blip (the retry
// would find the wait withdrawn and queue again at the tail). The wait
// detaches instead, and is withdrawn only if no call of that request id
// comes back before the session's lease runs out, or within one lease
// (the lease KeepAlives grant now) even if the session lives on: the
// client is then taken for gone, and a grant it never hears of must not
// hold the lock until its session expires and then add a lock-delay (the
// withdraw comes at the lease's end, before the expiry's slack has
// passed), nor for as long as a session that never retries lives. A
// client that gives up says so itself (CancelAcquire), which withdraws the
// wait at once.
//
// Its mutex is a leaf.
type acquireWaits struct {
	clock Clock
	wg    *sync.WaitGroup // the Server's: Stop waits for withdraws in flight

	mu    sync.Mutex
	waits map[waitKey]*waitEntry
}

// waitKey names one blocking Acquire: the session that made it (so no
// other session's call, naming a handle not its own, can touch its
// wait here before the state machine refuses it), the handle and the
// request id.
type waitKey struct{ session, handle, seq uint64 }

// waitEntry is one request id's wait at this master: the calls attached
// to it, or the withdraw scheduled (pending) or being applied
// (withdrawing, closed when it is done) since the last one detached.
type waitEntry struct {
	woke        []chan struct{}
	pending     *detachTimer
	withdrawing chan struct{}
}

type detachTimer struct{ t Timer }

// attach registers a call waiting on key and cancels a withdraw scheduled
// for it (the client came back: the wait keeps its place). A withdraw
// already being applied is waited for, so the call then reads the state
// after it and never takes for its own a grant that is being undone.
// woke receives when the call should look at the state again.
func (w *acquireWaits) attach(ctx context.Context, key waitKey) (woke chan struct{}, err error) {
	for {
		w.mu.Lock()
		if w.waits == nil {
			w.waits = map[waitKey]*waitEntry{}
		}
		e := w.waits[key]
		if e != nil && e.withdrawing != nil {
			ch := e.withdrawing
			w.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if e == nil {
			e = &waitEntry{}
			w.waits[key] = e
		}
		if e.pending != nil {
			e.pending.t.Stop()
			e.pending = nil
		}
		woke = make(chan struct{}, 1)
		e.woke = append(e.woke, woke)
		w.mu.Unlock()
		return woke, nil
	}
}

// leave unregisters a call that is done with its wait (granted, gone, or
// answered for another master to finish).
func (w *acquireWaits) leave(key waitKey, woke chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(key, woke)
}

// dropLocked takes woke off key's calls and forgets key once nothing is
// attached, scheduled or in flight for it.
func (w *acquireWaits) dropLocked(key waitKey, woke chan struct{}) *waitEntry {
	e := w.waits[key]
	if e == nil {
		return nil
	}
	for i, ch := range e.woke {
		if ch == woke {
			e.woke = append(e.woke[:i:i], e.woke[i+1:]...)
			break
		}
	}
	if len(e.woke) == 0 && e.pending == nil && e.withdrawing == nil {
		delete(w.waits, key)
	}
	return e
}

// detach unregisters a call whose stream ended while it waited. When no
// other call of key is attached, withdraw runs once due reports nothing
// left to wait (due is asked when the call detaches and again each time
// the wait it gave runs out: it may give more), unless a call of key
// attaches first, forget is called, or the term (stop) ends. due takes
// other parts' locks, so it is never called holding w.mu.
func (w *acquireWaits) detach(key waitKey, woke chan struct{}, stop <-chan struct{}, due func() time.Duration, withdraw func()) {
	d := due()
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.dropLocked(key, woke)
	if e == nil || len(e.woke) > 0 || e.withdrawing != nil || isClosed(stop) {
		return
	}
	w.armLocked(key, e, d, stop, due, withdraw)
}

// armLocked schedules e's withdraw check d from now, replacing one
// scheduled before.
func (w *acquireWaits) armLocked(key waitKey, e *waitEntry, d time.Duration, stop <-chan struct{}, due func() time.Duration, withdraw func()) {
	if e.pending != nil {
		e.pending.t.Stop()
	}
	dt := &detachTimer{}
	e.pending = dt
	w.waits[key] = e
	// current reports whether dt is still e's scheduled withdraw in this
	// term (not re-attached, forgotten, replaced or stopped).
	current := func() bool { return w.waits[key] == e && e.pending == dt && !isClosed(stop) }
	dt.t = w.clock.AfterFunc(d, func() {
		w.mu.Lock()
		ok := current()
		w.mu.Unlock()
		if !ok {
			return
		}
		more := due()
		w.mu.Lock()
		if !current() {
			w.mu.Unlock()
			return
		}
		if more > 0 {
			w.armLocked(key, e, more, stop, due, withdraw)
			w.mu.Unlock()
			return
		}
		e.pending = nil
		done := make(chan struct{})
		e.withdrawing = done
		w.wg.Add(1) // under mu: stopAll, before Stop's Wait, orders it
		w.mu.Unlock()
		defer w.wg.Done()
		withdraw()
		w.mu.Lock()
		e.withdrawing = nil
		close(done)
		if len(e.woke) == 0 && e.pending == nil {
			delete(w.waits, key)
		}
		w.mu.Unlock()
	})
}

// forget cancels a withdraw scheduled for key: the client withdrew the
// wait itself (CancelAcquire).
func (w *acquireWaits) forget(key waitKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.waits[key]; e != nil && e.pending != nil {
		e.pending.t.Stop()
		e.pending = nil
		if len(e.woke) == 0 && e.withdrawing == nil {
			delete(w.waits, key)
		}
	}
}

// stopAll ends the term's scheduled withdraws: a detached wait stays
// queued in the state, for its client to find at the next master (or for
// its session's end to remove). Called before the Server waits for its
// goroutines, so no withdraw starts after that wait began.
func (w *acquireWaits) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, e := range w.waits {
		if e.pending != nil {
			e.pending.t.Stop()
			e.pending = nil
		}
		if len(e.woke) == 0 && e.withdrawing == nil {
			delete(w.waits, key)
		}
	}
}

// detached counts the waits whose calls ended without an answer and that
// are kept for their clients to come back to.
func (w *acquireWaits) detached() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.waits {
		if e.pending != nil {
			n++
		}
	}
	return n
}

// wake tells every call attached to key, if any, to look again. It never
// blocks: one pending wake-up is as good as many.
func (w *acquireWaits) wake(key waitKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.waits[key]; e != nil {
		for _, ch := range e.woke {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
