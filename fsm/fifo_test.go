package fsm

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fifoCheck is the FIFO property of lock queues (docs/spec.md#locks),
// checked on the FSM itself after every entry of the model-based test
// (TestFSMMatchesModel), independently of the model (which could share a
// mistake with the FSM): it numbers every blocking Acquire in the order it
// first appears in a lock's queue and checks that
//
//   - a queue always holds its waiters in that order (nobody is re-queued
//     ahead of a waiter that came before, nor moved behind one that came
//     after);
//   - a waiter is granted only once every waiter that queued before it
//     on that lock has left the queue (granted, cancelled, closed or
//     expired): a release, a Grant after lock-delay, a cancel or a
//     break hands the lock to the head, or to the run of shared waiters
//     at the head;
//   - an immediate grant never barges past a waiter that was queued
//     before the entry and still is.
type fifoCheck struct {
	next    uint64
	arrived map[fifoKey]uint64 // a queued wait -> its place in arrival order
	queued  map[fifoKey]bool   // the waits queued after the last entry
	changes []Change           // the entry's, from the FSM's observer
}

// fifoKey names one blocking Acquire: the lock, the handle and the
// request id.
type fifoKey struct {
	path          string
	handle, waitq uint64
}

func newFIFOCheck() *fifoCheck {
	return &fifoCheck{arrived: map[fifoKey]uint64{}, queued: map[fifoKey]bool{}}
}

// observe is the FSM's observer: it keeps the entry's changes for check.
func (fc *fifoCheck) observe(_ uint64, ch []Change) { fc.changes = append(fc.changes, ch...) }

// check looks at f after an entry whose changes observe kept and returns
// what broke FIFO, or "".
func (fc *fifoCheck) check(f *FSM) string {
	changes := fc.changes
	fc.changes = nil
	return fc.checkChanges(f, changes)
}

// checkChanges is check given the entry's changes.
func (fc *fifoCheck) checkChanges(f *FSM, changes []Change) string {
	before := fc.queued
	live := map[fifoKey]bool{}
	for path, n := range f.nodes {
		prev := uint64(0)
		for _, w := range n.Waiters {
			k := fifoKey{path, w.Handle, w.Seq}
			a, ok := fc.arrived[k]
			if !ok {
				// New waiters join at the tail, so numbering them in queue
				// order numbers them in arrival order.
				fc.next++
				a = fc.next
				fc.arrived[k] = a
			}
			if a <= prev {
				return fmt.Sprintf("%s: queue out of arrival order: handle %d's wait %d (arrival %d) is behind arrival %d",
					path, w.Handle, w.Seq, a, prev)
			}
			prev = a
			live[k] = true
		}
	}
	for _, c := range changes {
		if c.Kind != ChangeLockGranted {
			continue
		}
		n := f.nodes[c.Path]
		if n == nil {
			continue
		}
		if c.Seq == 0 {
			// An immediate grant: every waiter queued before this entry
			// must have left the queue first.
			for _, w := range n.Waiters {
				if before[fifoKey{c.Path, w.Handle, w.Seq}] {
					return fmt.Sprintf("%s: handle %d granted at once past handle %d's wait %d, queued earlier", c.Path, c.Handle, w.Handle, w.Seq)
				}
			}
			continue
		}
		ga, ok := fc.arrived[fifoKey{c.Path, c.Handle, c.Seq}]
		if !ok {
			continue // queued and granted within one entry: nothing to order
		}
		for _, w := range n.Waiters {
			if a := fc.arrived[fifoKey{c.Path, w.Handle, w.Seq}]; a < ga {
				return fmt.Sprintf("%s: handle %d's wait %d (arrival %d) granted while handle %d's wait %d (arrival %d) still queues",
					c.Path, c.Handle, c.Seq, ga, w.Handle, w.Seq, a)
			}
		}
	}
	for k := range fc.arrived {
		if !live[k] {
			delete(fc.arrived, k)
		}
	}
	fc.queued = live
	return ""
}

// TestFSMLockQueueIsFIFO drives one lock hard, the way TestFSMMatchesModel
// (whose namespace is wide, so its queues are short) rarely does: a few
// sessions with handles on one file queue, try, release, cancel their
// waits, close handles, end cleanly or expire (with lock-delays the master's
// Grant ends), and the admin breaks the lock, in shared and exclusive
// modes; after every entry fifoCheck must hold.
func TestFSMLockQueueIsFIFO(t *testing.T) {
	modelFlags(t)
	handOffs := 0
	rapid.Check(t, func(rt *rapid.T) {
		h := newFSMT(t)
		fc := newFIFOCheck()
		var trace []string
		after := func(what string, r *Result) {
			trace = append(trace, fmt.Sprintf("%d %s -> granted=%v queued=%v err=%v", h.idx, what, r.Granted, r.Queued, r.Err))
			for _, c := range h.changes {
				if c.Kind == ChangeLockGranted && c.Seq != 0 {
					handOffs++
				}
			}
			if why := fc.checkChanges(h.f, h.changes); why != "" {
				rt.Fatalf("after entry %d FIFO is broken: %s\n%s", h.idx, why, fmt.Sprint(trace))
			}
		}
		const name = "l"
		type locker struct{ s, h, wait uint64 }
		newLocker := func() *locker {
			l := &locker{s: h.session()}
			delay := time.Duration(rapid.IntRange(0, 2).Draw(rt, "lock-delay s")) * time.Second
			l.h = h.openDelay(l.s, name, fsmtRWC, delay)
			return l
		}
		ls := make([]*locker, 4)
		for i := range ls {
			ls[i] = newLocker()
		}
		modes := []uint8{LockExclusive, LockShared}
		steps := rapid.IntRange(10, 120).Draw(rt, "steps")
		for range steps {
			i := rapid.IntRange(0, len(ls)-1).Draw(rt, "locker")
			l := ls[i]
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1, 2: // a blocking Acquire
				mode := rapid.SampledFrom(modes).Draw(rt, "mode")
				r, seq := h.acquire(l.s, l.h, mode, true)
				if r.Queued {
					l.wait = seq
				}
				after(fmt.Sprintf("s%d acquire(wait) mode %d", l.s, mode), r)
			case 3: // TryAcquire
				r, _ := h.acquire(l.s, l.h, rapid.SampledFrom(modes).Draw(rt, "mode"), false)
				after(fmt.Sprintf("s%d try", l.s), r)
			case 4, 5:
				after(fmt.Sprintf("s%d release", l.s), h.release(l.s, l.h))
			case 6: // the client withdraws its wait (or undoes its grant)
				after(fmt.Sprintf("s%d cancel wait %d", l.s, l.wait), h.do(l.s, Command{Payload: &CancelWaitArgs{Handle: l.h, WaitSeq: l.wait}}))
			case 7: // the handle closes, or the session ends cleanly or expires
				var r *Result
				switch how := rapid.IntRange(0, 2).Draw(rt, "how"); how {
				case 0:
					r = h.closeH(l.s, l.h)
					l.h = h.openDelay(l.s, name, fsmtRWC, 0)
				default:
					r = h.do(l.s, Command{Payload: &CloseSessionArgs{Expired: how == 2}})
					ls[i] = newLocker()
				}
				after(fmt.Sprintf("s%d ends (close/clean/expire)", l.s), r)
			case 8: // time passes; the master's Grant after a lock-delay
				h.now += int64(rapid.IntRange(0, 3).Draw(rt, "seconds")) * int64(time.Second)
				after("grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath(name)}}))
			case 9:
				after("break", h.raw(Command{Principal: "admin", Admin: true, Payload: &BreakLockArgs{Path: fsmtPath(name), Reason: "test"}}))
			}
		}
		fsmtCheckInvariants(t, h.f)
	})
	if handOffs == 0 {
		t.Fatal("no waiter was ever handed the lock: the test exercised nothing")
	}
	t.Logf("%d hand-offs to waiters checked", handOffs)
}
