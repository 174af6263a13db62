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
// ended through its lease, and then closed through the log.
//
// Why through its lease. A client serves reads from its cache, negative
// Open answers included, without any open handle, for as long as its
// local lease runs; a write of a cached name completes only once that
// client acknowledged the invalidation or the lease it held ran out
// (invalidate.go). Closing a session whose lease still runs would end
// that promise early: the close forgets the session's registrations, so
// another session's write of a name it cached completes at once, while
// the client, whose answer that it was closed may still be on its way,
// goes on answering from its cache: a stale read after a completed
// write. Expiry is safe because it comes after the lease the master
// granted ran out, when the client's own lease (never longer) has run
// out too. So an idle close is made to look like an expiry first:
//
//  1. The expiry loop finds the session idle (closeIdle) and, if the
//     state shows no open handle, marks its lease draining (lease.idle).
//     From then on its KeepAlives extend nothing: the parked one, and any
//     later one, is answered at once with wire.SessionIdleClosedMsg, so a
//     client that knows the message purges its cache and stops its
//     KeepAlives straight away (the Go client opens a new session on its
//     next call), and one that does not sees an expiry. Its cache
//     registrations stay: a write of a name it cached waits, as for any
//     silent cacher, until it acknowledges (it cannot: its KeepAlives are
//     refused) or the lease it held runs out, at most one lease, and the
//     wait is not charged to its principal's hold account (draining).
//  2. Once that lease and the expiry slack have run out (sessions.expired),
//     the expiry loop closes the session through the log with the idle
//     close (CmdIdleCloseSession) rather than an expiry; the client's
//     lease ended before, so no answer of the old session's cache can be
//     served after the close forgets its registrations.
//
// A call of the session while it drains (an Open, from a client that has
// not heard yet) makes it not idle again (Dispatch: begin reports the
// drain, unmarkIdle ends it), and its next KeepAlive extends its lease as
// usual; a client that heard the answer meanwhile has given the session
// up, so it expires when its lease runs out. The state decides the close
// again when the entry applies (fsm closeSession): a handle opened after
// the master looked refuses it, and the session is then expired as any
// session whose lease ran out. An idle close never takes a lock, a queued
// Acquire (which needs a handle) or an ephemeral node (an ephemeral file
// goes when its last handle closes; an ephemeral directory kept by its
// children is not deleted by a session's close either).
//
// What the master knows of a session's calls, and of its drain, is its
// memory, like its leases: a new master starts every session's idle clock
// afresh and extends every lease (safe: closing later never hurts; a
// client that gave its session up lets that lease run out, and is then
// expired).
//
// The client is told with a distinct expiry (wire.SessionIdleClosedMsg):
// on its KeepAlives while the session drains, and for a while after the
// close on any call of the session (sessions.idleGone), so a client may
// open a new session in its place, as the Go client does.

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
	// sessions closed for idleness, drains the drains begun (every term
	// of this process).
	due    time.Time
	closed atomic.Uint64
	drains atomic.Uint64
}

type idleEntry struct {
	last     time.Time
	inflight int
	// draining: the session's lease is draining for idleness (the
	// lease's idle flag); the next call ends the drain (begin).
	draining bool
}

// begin records a call of session arriving at now and returns its entry,
// for end to record its answer (nil when the session has no entry yet),
// and whether the session's lease was draining for idleness: the call
// makes it not idle, and the caller ends the drain (unmarkIdle). Entries
// are made only by idle, for the sessions with a lease, so calls naming
// sessions that do not exist cost no memory; a session made since the
// last look starts its idle clock at the next one, later than its last
// call, which never closes it sooner.
func (ic *idleCalls) begin(session uint64, now time.Time) (*idleEntry, bool) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	e := ic.calls[session]
	if e == nil {
		return nil, false
	}
	e.last = now
	e.inflight++
	draining := e.draining
	e.draining = false
	return e, draining
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

// drain marks session draining if it is still idle at now: no call in
// progress and none for timeout (a call may have begun since idle named
// it). The caller holds sessions.mu (the lock order allows a leaf under
// it), so a call's begin comes either before (and keeps the session) or
// after (and ends the drain).
func (ic *idleCalls) drain(session uint64, now time.Time, timeout time.Duration) bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	e := ic.calls[session]
	if e == nil || e.inflight > 0 || now.Sub(e.last) < timeout {
		return false
	}
	e.draining = true
	return true
}

// undrain ends session's drain and restarts its idle clock at now (its
// idle close was refused: the session is in use).
func (ic *idleCalls) undrain(session uint64, now time.Time) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if e := ic.calls[session]; e != nil {
		e.last, e.draining = now, false
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
// plain expiry: a client hears of it on its KeepAlives while the lease
// drains, or on its next call after the close within about a lease; one
// in jeopardy searches for up to its grace period (45 s by default).
func (ss *sessions) idleGoneKeep() time.Duration { return max(2*ss.maxTTL, 2*time.Minute) }

// idleCandidates returns the sessions whose lease runs at now and is
// not draining already, outside a fail-over's recovery (when only
// KeepAlives are admitted, so no session could show it is in use); a
// lease that ran out is expiry's. It also forgets idle-closed sessions
// past idleGoneKeep.
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
		if !l.closed && !l.idle && !l.end.Before(now) {
			out = append(out, id)
		}
	}
	return out
}

// markIdle starts session's drain (the top of this file) if its lease
// runs and ic still finds it idle at now: its lease is extended no more,
// and its KeepAlives, the parked one at once, are answered
// SessionIdleClosedMsg. false: it is not.
func (ss *sessions) markIdle(session uint64, ic *idleCalls, now time.Time, timeout time.Duration) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	if l == nil || l.closed || l.idle || l.proxyCache || l.end.Before(now) || !ic.drain(session, now, timeout) {
		return false
	}
	l.idle = true
	l.wakeLocked()
	return true
}

// unmarkIdle ends session's drain: a call of it arrived, or its idle
// close was refused. Its next KeepAlive extends its lease again.
func (ss *sessions) unmarkIdle(session uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if l := ss.leases[session]; l != nil && !l.closed {
		l.idle = false
	}
}

// idleDraining reports whether session's lease is draining for idleness,
// for the expiry loop to close it with the idle close.
func (ss *sessions) idleDraining(session uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	return l != nil && !l.closed && l.idle
}

// drainingLease reports whether l is draining for idleness: a write held
// by its invalidation waits for a lease the master chose to let run out,
// which the session's principal is not charged for (invalidate.go).
func (ss *sessions) drainingLease(l *lease) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l.idle
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

// closeIdle starts the drain (the top of this file) of the sessions
// that have been idle for the idle timeout and have no open handle in
// the state. The expiry loop calls it on each tick; it looks every tenth
// of the timeout. The close itself is expiry's, once the drained lease
// ran out (closeExpired).
//
// It reads the clock itself, after the candidates: a session first seen
// here starts its idle clock at that reading, so never before it
// existed. Given the tick's time instead, taken before the tick's
// expiries were applied through the log (hundreds of milliseconds under
// load), a session made meanwhile started its clock before its own
// CreateSession and was drained that much early: the hostile campaign's
// idle-sessions class saw 1.6-1.99 s for a 2 s timeout.
func (s *Server) closeIdle() {
	timeout := s.cfg.Limits.IdleSessionTimeout
	now := s.cfg.Clock.Now()
	if timeout <= 0 || !s.idle.lookNow(now, timeout, expiryPeriod(s.cfg.LeaseTTL)) {
		return
	}
	live := s.sess.idleCandidates(now)
	ids := s.idle.idle(live, s.cfg.Clock.Now(), timeout)
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
		if s.sess.markIdle(id, &s.idle, s.cfg.Clock.Now(), timeout) {
			s.idle.drains.Add(1)
			s.log.Info("idle session: no open handle and no call for the idle-session timeout; its lease is extended no more, and it is closed when the lease runs out",
				"session", id, "timeout", timeout)
		}
	}
}

// closeExpired closes session id, whose lease and slack ran out, through
// the log: with the idle close if its lease was draining for idleness,
// else as an expiry. An idle close the state refuses (a handle was opened
// meanwhile) ends the drain, and the next tick expires the session.
func (s *Server) closeExpired(id uint64, stop <-chan struct{}) {
	idle := s.sess.idleDraining(id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := s.w.applyInvalidating(ctx, stop, &fsm.Command{Session: id, Time: s.now(), Payload: &fsm.CloseSessionArgs{Expired: !idle, Idle: idle}})
	cancel()
	switch {
	case err != nil:
		s.log.Warn("session expiry not applied; will retry", "session", id, "idle", idle, "err", err)
	case idle && res.Err != nil && res.Err.Kind == fsm.KindCanceled: // a handle was opened meanwhile
		s.sess.unmarkIdle(id)
		s.idle.undrain(id, s.cfg.Clock.Now())
	case res.Err != nil: // the state has no such session
		s.sess.drop(id)
		s.inv.forget(id)
	case idle:
		s.idle.closed.Add(1)
		s.log.Info("idle session closed: its lease ran out after it held no open handle and made no call for the idle-session timeout",
			"session", id, "timeout", s.cfg.Limits.IdleSessionTimeout)
	default:
		s.log.Info("session expired", "session", id)
	}
}
