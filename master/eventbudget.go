package master

import (
	"unsafe"

	"lockcell/wire"
)

// The byte budget of queued events. Every event a session has queued and
// not yet acknowledged is master memory; the per-session bounds
// (lease.eventRoom) bound one session's, but not a crowd's: many sessions
// watching one file each queue an event per handle on every write. So the
// bytes of all queued events are counted, for the whole process and for
// each principal (its sessions together), and a handle event is queued
// only if it fits under both (Limits.EventBytes, EventBytesPerPrincipal);
// one that does not is dropped into the session's overflow event, which
// tells the client to have every handle re-read. Invalidations (a write's
// safety rests on them; at most one per name a session registered),
// fail-over notices and the overflow events themselves are always queued,
// and counted: they crowd handle events out. Everything is counted under
// the sessions' mutex, where the queues change, so a check and its charge
// are one step, and bytes are given back when events are acknowledged,
// when their session ends and when the term ends.

// eventOverhead is what one queued event costs the master beyond its
// strings: its wire.Event in the session's queue with the queue's spare
// capacity (up to as much again, just after the array doubled), and a
// position of its own (the events of one change share one). So a content
// event on a short name is estimated at about 270 bytes;
// BenchmarkQueuedEventBytes measures 156 bytes of live heap an event in
// queues of 1,000, and 393 allocated an event counting the arrays the
// queues outgrew.
const eventOverhead = 2*int64(unsafe.Sizeof(wire.Event{})) + int64(unsafe.Sizeof(wire.EventPos{}))

// eventBytes is the budget's estimate of what queuing ev costs. Strings
// are counted whole although events of one change share them, so the
// estimate errs high.
func eventBytes(ev *wire.Event) int64 {
	return eventOverhead + int64(len(ev.Path)+len(ev.Child)+len(ev.Reason)+len(ev.FromPrincipal))
}

// forcedEvent reports whether an event of kind k is always queued: an
// invalidation, a fail-over notice, an overflow.
func forcedEvent(k uint8) bool {
	return k == wire.EventInvalidate || k == wire.EventMasterFailover || k == wire.EventOverflow
}

// eventBudget counts queued event bytes against Limits.EventBytes and
// EventBytesPerPrincipal. It is guarded by the sessions' mutex.
type eventBudget struct {
	max, perPrincipal int64
	used              int64
	forced            int64 // of used: invalidations, fail-over notices, overflows
	by                map[string]int64
	peak              int64 // the most used has been after a handle event was queued
	// Handle events dropped into an overflow because the principal's
	// share, or the process's budget, was full.
	overPrincipal, overProcess uint64
}

func newEventBudget(max, perPrincipal int64) eventBudget {
	return eventBudget{max: max, perPrincipal: perPrincipal, by: map[string]int64{}}
}

// take charges n bytes of a handle event of principal if they fit under
// both budgets, and reports whether they did.
func (b *eventBudget) take(principal string, n int64) bool {
	if b.by[principal]+n > b.perPrincipal {
		b.overPrincipal++
		return false
	}
	if b.used+n > b.max {
		b.overProcess++
		return false
	}
	b.by[principal] += n
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

// force charges n bytes of an event that is queued whatever the budget.
func (b *eventBudget) force(principal string, n int64) {
	b.by[principal] += n
	b.used += n
	b.forced += n
}

// give returns the bytes of events no longer queued: n in all, forced of
// them forced.
func (b *eventBudget) give(principal string, n, forced int64) {
	if n == 0 {
		return
	}
	b.used -= n
	b.forced -= forced
	if b.by[principal] -= n; b.by[principal] <= 0 {
		delete(b.by, principal)
	}
}

// reset forgets every charge: the term's queues are gone.
func (b *eventBudget) reset() {
	b.used, b.forced = 0, 0
	clear(b.by)
}

// budgetEvents sets the byte budgets of queued events. Call it before the
// first term.
func (ss *sessions) budgetEvents(total, perPrincipal int64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.budget.max, ss.budget.perPrincipal = total, perPrincipal
}

// ownerLocked is the principal whose budget l's events are charged to,
// looked up once (ss.principalOf reads the state, whose lock comes after
// the sessions'). A session the state no longer has is charged to "".
func (ss *sessions) ownerLocked(id uint64, l *lease) string {
	if !l.owned {
		if ss.principalOf != nil {
			l.principal = ss.principalOf(id)
		}
		l.owned = true
	}
	return l.principal
}

// queueHandleEventLocked queues a handle event for session id: numbered,
// counted, waking its parked KeepAlive. Past the session's bound or its
// principal's or the process's byte budget it is dropped, and said: the
// queue ends with an overflow event standing for it (eventoverflow.go).
// It reports whether ev itself was queued. ss.mu is held.
func (ss *sessions) queueHandleEventLocked(id uint64, l *lease, ev wire.Event) bool {
	if len(l.events) < l.eventRoom()-1 && ev.Kind != wire.EventOverflow {
		n := eventBytes(&ev)
		if ss.budget.take(ss.ownerLocked(id, l), n) {
			ev.Seq = ss.nextEventLocked()
			l.events = append(l.events, ev)
			l.bytes += n
			l.wakeForNoticeLocked()
			return true
		}
	}
	// Handle events are notifications: a session that does not take
	// them, or a crowd of sessions together, does not get to pile them
	// up. The last slot says they were dropped.
	if ev.Kind != wire.EventOverflow {
		ss.dropped++
	}
	if l.overflowQueued() {
		return false
	}
	ss.queueForcedLocked(id, l, overflowEvent(ev))
	l.wakeForNoticeLocked()
	return false
}

// queueForcedLocked queues an event that is never dropped (forcedEvent),
// counting its bytes, and returns its sequence number; the caller wakes
// the session's parked KeepAlive if it should. ss.mu is held.
func (ss *sessions) queueForcedLocked(id uint64, l *lease, ev wire.Event) uint64 {
	n := eventBytes(&ev)
	ss.budget.force(ss.ownerLocked(id, l), n)
	ev.Seq = ss.nextEventLocked()
	l.events = append(l.events, ev)
	l.bytes += n
	l.forced += n
	if ev.Kind == wire.EventOverflow {
		l.overflowSeq = ev.Seq
		ss.noteOverflowLocked(id, l)
	}
	return ev.Seq
}

// dropAckedLocked drops the events an acknowledgement up to ack covers
// from l's queue and gives their bytes back. ss.mu is held.
func (ss *sessions) dropAckedLocked(l *lease, ack uint64) {
	var n, forced int64
	out := l.events[:0]
	for _, e := range l.events {
		if e.Seq > ack {
			out = append(out, e)
			continue
		}
		b := eventBytes(&e)
		n += b
		if forcedEvent(e.Kind) {
			forced += b
		}
	}
	clear(l.events[len(out):]) // the queue's array keeps no strings alive
	l.events = out
	ss.budget.give(l.principal, n, forced)
	l.bytes -= n
	l.forced -= forced
}

// releaseEventsLocked gives back the bytes of every event l has queued:
// its session ended. ss.mu is held.
func (ss *sessions) releaseEventsLocked(l *lease) {
	ss.budget.give(l.principal, l.bytes, l.forced)
	l.events, l.bytes, l.forced = nil, 0, 0
}

// EventStats are the master's figures on queued events.
type EventStats struct {
	// QueuedBytes is the estimated memory of every session's queued
	// events (eventBytes), of which ForcedBytes are invalidations,
	// fail-over notices and overflow events, which are never dropped.
	QueuedBytes, ForcedBytes int64
	// PeakBytes is the most QueuedBytes has been just after a handle
	// event was queued: at most Budget, the process-wide budget.
	PeakBytes int64
	// Budget and PrincipalBudget are Limits.EventBytes and
	// EventBytesPerPrincipal.
	Budget, PrincipalBudget int64
	// OverPrincipal and OverProcess count handle events dropped into an
	// overflow because their principal's share or the process's budget
	// was full; Dropped counts every handle event dropped (those, and
	// those over a session's own bound).
	OverPrincipal, OverProcess, Dropped uint64
	// FanoutBacklog is how many applied changes wait for the fan-out to
	// turn them into handle events; FanoutLost counts changes the
	// fan-out could not keep (its backlog was full), each said by an
	// overflow event to the sessions watching the node.
	FanoutBacklog int
	FanoutLost    uint64
}

// EventStats reports the master's figures on queued events.
func (s *Server) EventStats() EventStats {
	st := s.sess.eventStats()
	st.FanoutBacklog, st.FanoutLost = s.fanoutCounts()
	return st
}

func (ss *sessions) eventStats() EventStats {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	b := &ss.budget
	return EventStats{QueuedBytes: b.used, ForcedBytes: b.forced, PeakBytes: b.peak, Budget: b.max, PrincipalBudget: b.perPrincipal,
		OverPrincipal: b.overPrincipal, OverProcess: b.overProcess, Dropped: ss.dropped}
}
