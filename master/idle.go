package master

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Idle sessions (docs/spec.md#idle-sessions). Chubby closes a session
// that is idle, with no open handles and no calls for a minute, so a
// client that leaked its session (a program that never calls Close and
// never exits) cannot hold one of the cell's session slots forever. Here
// the master does the same: a session that has held no open handle and
// made no call other than KeepAlive for Limits.IdleSessionTimeout is
// closed through the log, by the expiry loop, like an expiry
// (expireLoop), with CloseSessionArgs.Idle.
//
// What the master knows of a session's calls is its memory, like its
// leases: a new master starts every session's idle clock afresh, which
// is safe, since closing later never hurts. What makes the close safe is
// the state: the entry closes the session only if it has no open handle
// when it applies (fsm closeSession), so a handle opened after the
// master looked keeps the session, and an idle close never takes a lock,
// a queued Acquire (which needs a handle) or an ephemeral node (an
// ephemeral file goes when its last handle closes; an ephemeral directory
// kept by its children is not deleted by a session's close either).
//
// The client is told with a distinct expiry (wire.SessionIdleClosedMsg):
// on the KeepAlive parked when the close applies, and for a while after
// on any call of the session (sessions.idleGone), so a client may open a
// new session in its place on its next call, as the Go client does.

// DefaultIdleSessionTimeout is the idle-session timeout of a cell that
// sets none: Chubby's minute.
const DefaultIdleSessionTimeout = time.Minute

// idleCalls is the master's memory of each session's calls other than
// KeepAlive: when the last one began or ended, and how many are in
// progress (a session with a call in progress is never idle, however long
// the call takes). Its mutex is a leaf; Dispatch takes it twice a call,
// and only while the idle timeout is on. It holds an entry per session
// with a lease, no more (begin).
type idleCalls struct {
	mu    sync.Mutex
	calls map[uint64]*idleEntry
	// due is when the next look for idle sessions is; closed counts the
	// sessions closed for idleness (every term of this process).
	due    time.Time
	closed atomic.Uint64
}

type idleEntry struct {
	last     time.Time
	inflight int
}

// begin records a call of session arriving at now and returns its entry,
// for end to record its answer; nil when the session has no entry yet.
// Entries are made only by idle, for the sessions with a lease, so calls
// naming sessions that do not exist cost no memory; a session made since
// the last look starts its idle clock at the next one, later than its
// last call, which never closes it sooner.
func (ic *idleCalls) begin(session uint64, now time.Time) *idleEntry {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	e := ic.calls[session]
	if e != nil {
		e.last = now
		e.inflight++
	}
	return e
}

// end records the answer of the call begin returned e for (nil: none).
// An entry forgotten meanwhile is no longer in the table, so counting on
// it is harmless.
func (ic *idleCalls) end(e *idleEntry, now time.Time) {
	if e == nil {
		return
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	e.last = now
	e.inflight--
}

// touch restarts session's idle clock at now (its idle close was
// refused: the session is in use).
func (ic *idleCalls) touch(session uint64, now time.Time) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if e := ic.calls[session]; e != nil {
		e.last = now
	}
}

// forgetAll starts a term: no session has been seen yet.
func (ic *idleCalls) forgetAll() {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.calls, ic.due = nil, time.Time{}
}

// lookNow reports whether the expiry loop should look for idle sessions
// at now: every tenth of the timeout (so a session is closed at most 10 %
// late), at least every period.
func (ic *idleCalls) lookNow(now time.Time, timeout, period time.Duration) bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if now.Before(ic.due) {
		return false
	}
	ic.due = now.Add(max(timeout/10, period))
	return true
}

// idle returns those of live (the sessions with a lease) that made no
// call for timeout and have none in progress. A session first seen now
// starts its idle clock now; entries of sessions no longer live are
// forgotten.
func (ic *idleCalls) idle(live []uint64, now time.Time, timeout time.Duration) []uint64 {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.calls == nil {
		ic.calls = map[uint64]*idleEntry{}
	}
	seen := make(map[uint64]bool, len(live))
	var out []uint64
	for _, id := range live {
		seen[id] = true
		e := ic.calls[id]
		switch {
		case e == nil:
			ic.calls[id] = &idleEntry{last: now}
		case e.inflight == 0 && now.Sub(e.last) >= timeout:
			out = append(out, id)
		}
	}
	for id, e := range ic.calls {
		if !seen[id] && e.inflight <= 0 {
			delete(ic.calls, id)
		}
	}
	return out
}

// idleGoneKeep is how long the master remembers a session it closed for
// idleness, to answer its calls with SessionIdleClosedMsg rather than a
// plain expiry: a client hears of the close on its parked KeepAlive, or
// on its next call within about a lease; one in jeopardy searches for up
// to its grace period (45 s by default).
func (ss *sessions) idleGoneKeep() time.Duration { return max(2*ss.maxTTL, 2*time.Minute) }

// idleCandidates returns the sessions whose lease runs at now, outside a
// fail-over's recovery (when only KeepAlives are admitted, so no session
// could show it is in use); a lease that ran out is expiry's. It also
// forgets idle-closed sessions past idleGoneKeep.
func (ss *sessions) idleCandidates(now time.Time) []uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, at := range ss.idleGone {
		if now.Sub(at) > ss.idleGoneKeep() {
			delete(ss.idleGone, id)
		}
	}
	if !ss.active || ss.recovering {
		return nil
	}
	out := make([]uint64, 0, len(ss.leases))
	for id, l := range ss.leases {
		if !l.closed && !l.end.Before(now) {
			out = append(out, id)
		}
	}
	return out
}

// markIdle notes that session is being closed for idleness, so that the
// KeepAlive parked on it is answered so when the close applies; false if
// it has no open lease. unmarkIdle takes it back (the close failed).
func (ss *sessions) markIdle(session uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	if l == nil || l.closed {
		return false
	}
	l.idle = true
	return true
}

func (ss *sessions) unmarkIdle(session uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if l := ss.leases[session]; l != nil && !l.closed {
		l.idle = false
	}
}

// idleClosedLocked reports whether this master closed session for
// idleness (within idleGoneKeep). ss.mu is held.
func (ss *sessions) idleClosedLocked(session uint64) bool {
	_, ok := ss.idleGone[session]
	return ok
}

// wasIdleClosed is idleClosedLocked for callers outside the lock.
func (ss *sessions) wasIdleClosed(session uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.idleClosedLocked(session)
}

// idleClosedErr answers a call or KeepAlive of a session closed for
// idleness.
func idleClosedErr(session uint64) error {
	return wire.Errorf(wire.CodeSessionExpired, "%s: session %d held no open handle and made no call for the cell's idle-session timeout",
		wire.SessionIdleClosedMsg, session)
}

// asIdleClosed turns a call's session-expired answer into the idle-closed
// one when this master closed the session for idleness: the call raced
// the close (it arrived after the master looked, and applied after the
// close did), and its client should know it lost nothing.
func (s *Server) asIdleClosed(session uint64, err error) error {
	if session != 0 && wire.CodeOf(err) == wire.CodeSessionExpired && !wire.IsSessionMoved(err) && s.sess.wasIdleClosed(session) {
		return idleClosedErr(session)
	}
	return err
}

// closeIdle closes, through the log, the sessions that have been idle for
// the idle timeout and have no open handle in the state; the state
// checks the handles again when the entry applies. The expiry loop calls
// it at now on each tick; it looks every tenth of the timeout.
func (s *Server) closeIdle(now time.Time, stop <-chan struct{}) {
	timeout := s.cfg.Limits.IdleSessionTimeout
	if timeout <= 0 || !s.idle.lookNow(now, timeout, expiryPeriod(s.cfg.LeaseTTL)) {
		return
	}
	ids := s.idle.idle(s.sess.idleCandidates(now), now, timeout)
	if len(ids) == 0 {
		return
	}
	var unused []uint64
	s.read(func(v fsm.View) {
		for _, id := range ids {
			if v.SessionExists(id) && v.SessionHandles(id) == 0 {
				unused = append(unused, id)
			}
		}
	})
	for _, id := range unused {
		if !s.sess.markIdle(id) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := s.w.applyInvalidating(ctx, stop, &fsm.Command{Session: id, Time: s.now(), Payload: &fsm.CloseSessionArgs{Idle: true}})
		cancel()
		switch {
		case err != nil:
			s.sess.unmarkIdle(id)
			s.log.Warn("idle session close not applied; will retry", "session", id, "err", err)
		case res.Err != nil: // a handle was opened meanwhile, or the session ended
			s.sess.unmarkIdle(id)
			s.idle.touch(id, s.cfg.Clock.Now())
		default:
			s.idle.closed.Add(1)
			s.log.Info("idle session closed: no open handle and no call for the idle-session timeout", "session", id, "timeout", timeout)
		}
		select {
		case <-stop:
			return
		default:
		}
	}
}
