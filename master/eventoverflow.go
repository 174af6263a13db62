package master

import "lockcell/wire"

// overflowQueued reports whether l's queue ends with an EventOverflow that
// no reply has carried yet: a handle event dropped now is said by it,
// since the client hears of the overflow after the event was dropped.
// Once a reply carried it, the client may have re-read already, so a
// later drop needs an EventOverflow of its own.
func (l *lease) overflowQueued() bool {
	n := len(l.events)
	return n > 0 && l.events[n-1].Kind == wire.EventOverflow && l.events[n-1].Seq > l.delivered
}

// overflowEvent is the EventOverflow queued in place of the handle event
// ev that found no room.
func overflowEvent(ev wire.Event) wire.Event {
	return wire.Event{Kind: wire.EventOverflow, Path: ev.Path, Handle: ev.Handle}
}

// An overflow event on its way to a session stands for every handle event
// the session could be sent until the client hears it: the client has
// every handle re-read when it does, after whatever change the events
// were about. So the fan-out passes over a session whose queue holds an
// overflow event that no reply has carried yet (and that it has not
// acknowledged), without looking at its handles one by one: a crowd of
// handles in sessions that never read their events costs each change
// O(sessions), not O(handles) (fsm.View.WatchersAfter's skip). The
// fan-out asks under the state's read lock, where the sessions' mutex may
// not be taken (it comes first), so the sessions in that state are kept
// in a set of their own under a leaf mutex, changed under the sessions'
// mutex wherever what decides it changes: an overflow queued, a reply
// carrying it, an acknowledgement, the session's end, a term's start or
// end. Whoever the fan-out finds in the set has not been sent the
// overflow yet, so it hears it after the change it passed over.

// noteOverflowLocked lists or unlists session id in the overflowing set
// as l now says. ss.mu is held.
func (ss *sessions) noteOverflowLocked(id uint64, l *lease) {
	pending := !l.closed && l.overflowSeq > max(l.delivered, l.acked)
	if pending == l.overflowing {
		return
	}
	l.overflowing = pending
	ss.overflowMu.Lock()
	if pending {
		ss.overflowing[id] = struct{}{}
	} else {
		delete(ss.overflowing, id)
	}
	ss.overflowMu.Unlock()
}

// forgetOverflowsLocked empties the overflowing set: the term's leases
// are gone. ss.mu is held.
func (ss *sessions) forgetOverflowsLocked() {
	ss.overflowMu.Lock()
	clear(ss.overflowing)
	ss.overflowMu.Unlock()
}

// overflowPending reports whether session has an overflow event on its
// way that stands for any handle event it could be sent now. It takes
// only the leaf overflowMu: callable under the state's read lock.
func (ss *sessions) overflowPending(session uint64) bool {
	ss.overflowMu.Lock()
	_, ok := ss.overflowing[session]
	ss.overflowMu.Unlock()
	return ok
}
