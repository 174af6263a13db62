package master

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"lockcell/wire"
)

// parkedCall is a KeepAlive held at the master as data, not as a
// goroutine: a master holds one per session for most of every lease, so
// at a hundred thousand sessions a goroutine each (and its stack) would
// be most of its memory. The hold ends, whichever comes first, at
//
//   - its timer (Clock.AfterFunc), a quarter of the lease before the
//     lease it arrived under ends;
//   - an event queued for the session, or the session's end
//     (lease.wakeLocked);
//   - the stale signal: the master went half a lease without a proof of
//     leadership (staleWatch), answered NotMaster;
//   - the end of the term of service (sessions.stop), answered NotMaster;
//   - the end of the client connection it came over (connClosed).
//
// Whoever ends the hold first takes the call off every list under the
// sessions' lock (unparkLocked), so it is answered exactly once. A hold
// that ends at its timer or by a wake-up is answered as it would have
// been at once: leadership proven (answer), then the reply, in a
// goroutine started then and gone once the reply is handed to done.
type parkedCall struct {
	ss      *sessions
	l       *lease
	a       keepAliveArgs
	arrived time.Time
	conn    uint64          // the client connection (0: none)
	stale   <-chan struct{} // the stale signal it was parked under
	ctx     context.Context // the term's
	timer   Timer
	done    func(*wire.KeepAliveResponse, error)
	// prev and next link the connection's parked calls.
	prev, next *parkedCall
	parked     bool
}

// maxAnswerers bounds the goroutines that answer parked calls all at
// once (stop, the stale signal): each answer is a small write, but a
// client that does not read can hold one until the transport's write
// deadline, and a goroutine per call for a hundred thousand calls would
// cost their stacks at once.
const maxAnswerers = 64

// errConnClosed answers a parked call whose connection closed: nobody
// reads it; it lets the transport release what the call held.
var errConnClosed = fmt.Errorf("master: the call's connection closed: %w", context.Canceled)

// errClientLeft answers a parked call its client left (it reset or
// closed the call's stream, or sent more on it).
var errClientLeft = fmt.Errorf("master: the client left the call: %w", context.Canceled)

// isClosed reports whether ch is closed (nil never is: it never
// receives).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// parkLocked puts p on its lease's and its connection's lists.
func (ss *sessions) parkLocked(p *parkedCall) {
	p.parked = true
	p.l.parked = append(p.l.parked, p)
	if p.conn == 0 {
		return
	}
	if head := ss.connParked[p.conn]; head != nil {
		p.next = head
		head.prev = p
	}
	ss.connParked[p.conn] = p
}

// unparkLocked takes p off every list and stops its timer, and reports
// whether it was parked: the caller that gets true answers it.
func (ss *sessions) unparkLocked(p *parkedCall) bool {
	if !p.parked {
		return false
	}
	p.parked = false
	p.timer.Stop()
	ps := p.l.parked
	for i, q := range ps {
		if q == p {
			ps[i] = ps[len(ps)-1]
			ps[len(ps)-1] = nil
			p.l.parked = ps[:len(ps)-1]
			break
		}
	}
	if len(p.l.parked) == 0 {
		p.l.parked = nil // the lease holds no array for a call long gone
	}
	if p.conn != 0 {
		if p.prev != nil {
			p.prev.next = p.next
		} else if p.next != nil {
			ss.connParked[p.conn] = p.next
		} else {
			delete(ss.connParked, p.conn)
		}
		if p.next != nil {
			p.next.prev = p.prev
		}
		p.prev, p.next = nil, nil
	}
	return true
}

// holdEndedLocked ends p's hold (an event, the session's end): p is
// answered in a goroutine of its own.
func (ss *sessions) holdEndedLocked(p *parkedCall) {
	if ss.unparkLocked(p) {
		ss.wg.Add(1)
		go ss.finish(p)
	}
}

// holdOver is p's timer: the hold is over.
func (p *parkedCall) holdOver() {
	p.ss.mu.Lock()
	defer p.ss.mu.Unlock()
	p.ss.holdEndedLocked(p)
}

// finish answers p after its hold: leadership proven, then the reply.
func (ss *sessions) finish(p *parkedCall) {
	resp, err := ss.answer(p.ctx, p.l, p.a, p.arrived)
	ss.wg.Done() // the reply is made; writing it is the transport's
	p.done(resp, err)
}

// cancelParked ends p's park with err, unless its hold already ended
// (then its answer is on its way).
func (ss *sessions) cancelParked(p *parkedCall, err error) {
	ss.mu.Lock()
	ok := ss.unparkLocked(p)
	ss.mu.Unlock()
	if ok {
		p.done(nil, err)
	}
}

// unparkAllLocked takes every parked call off its lists (those parked
// under the stale signal sig, if sig is not nil) and returns them.
func (ss *sessions) unparkAllLocked(sig <-chan struct{}) []*parkedCall {
	var out []*parkedCall
	for _, l := range ss.leases {
		for i := len(l.parked) - 1; i >= 0; i-- {
			if p := l.parked[i]; sig == nil || p.stale == sig {
				ss.unparkLocked(p)
				out = append(out, p)
			}
		}
	}
	return out
}

// answerAll answers every call of ps with err, from at most maxAnswerers
// goroutines that end when ps is done.
func answerAll(ps []*parkedCall, err error) {
	if len(ps) == 0 {
		return
	}
	var next atomic.Int64
	for range min(len(ps), maxAnswerers) {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ps)) {
					return
				}
				ps[i].done(nil, err)
			}
		}()
	}
}

// staleWatch is the term's one watch on the stale signal (the master
// went half a lease without a proof of leadership): every call parked
// under it is answered NotMaster at that moment, while its client still
// trusts its lease, rather than at the end of its hold. The signal stays
// closed until a proof comes back, and a KeepAlive arriving meanwhile is
// refused at its arrival, so the watch waits for the next call to park
// before it looks at the signal again. It ends with the term (done).
func (ss *sessions) staleWatch(done <-chan struct{}) {
	defer ss.wg.Done()
	for {
		sig := ss.auth.stale()
		if sig == nil {
			return // never stale
		}
		select {
		case <-done:
			return
		case <-sig:
		}
		ss.mu.Lock()
		ps := ss.unparkAllLocked(sig)
		ss.wakeHeldLocked(sig, errStopped)
		ss.mu.Unlock()
		answerAll(ps, errStopped)
		select {
		case <-done:
			return
		case <-ss.kick:
		}
	}
}

// connClosed ends every call parked over conn, which closed: each is
// answered errConnClosed, in this goroutine.
func (ss *sessions) connClosed(conn uint64) {
	if conn == 0 {
		return
	}
	ss.mu.Lock()
	var ps []*parkedCall
	for p := ss.connParked[conn]; p != nil; p = ss.connParked[conn] {
		ss.unparkLocked(p)
		ps = append(ps, p)
	}
	ss.mu.Unlock()
	for _, p := range ps {
		p.done(nil, errConnClosed)
	}
}

// parkedCount returns how many KeepAlives are parked (a held batch's
// sessions counted one each), and over how many connections.
func (ss *sessions) parkedCount() (calls, conns int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, l := range ss.leases {
		calls += len(l.parked)
	}
	return calls + ss.heldCountLocked(), len(ss.connParked)
}
