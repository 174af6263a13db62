package master

import "lockcell/cell/wire"

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
