package master

import (
	"testing"

	"lockcell/wire"
)

// A session's queue of handle events never drops one silently: past its
// bound the last slot holds an EventOverflow, which stands for every event
// dropped while no reply has carried it; once a reply has, the next drop
// is said by an overflow of its own.
func TestQueueOverflowIsSaid(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	note := func(i int) sessionEvent {
		return sessionEvent{1, wire.Event{Kind: wire.EventContents, Path: "/ls/c/f", Handle: uint64(i + 1)}}
	}
	var notes []sessionEvent
	for i := range maxPendingEvents + 10 {
		notes = append(notes, note(i))
	}
	ss.observe(notes, nil)
	evs := ss.leases[1].events
	if len(evs) != maxPendingEvents {
		t.Fatalf("%d events queued; want the bound %d", len(evs), maxPendingEvents)
	}
	for i, ev := range evs[:maxPendingEvents-1] {
		if ev.Kind != wire.EventContents || ev.Handle != uint64(i+1) {
			t.Fatalf("event %d is %+v; want the notes in order", i, ev)
		}
	}
	last := evs[maxPendingEvents-1]
	if last.Kind != wire.EventOverflow || last.Handle != maxPendingEvents || last.Path != "/ls/c/f" {
		t.Fatalf("last queued %+v; want an overflow naming the first event dropped (handle %d)", last, maxPendingEvents)
	}
	if d := ss.droppedEvents(); d != 11 {
		t.Fatalf("%d dropped; want 11", d)
	}

	// Dropped behind that overflow, no reply having carried it: coalesced.
	ss.observe([]sessionEvent{note(0)}, nil)
	if n := len(ss.leases[1].events); n != maxPendingEvents || ss.droppedEvents() != 12 {
		t.Fatalf("%d queued, %d dropped after a drop behind an undelivered overflow; want %d and 12", n, ss.droppedEvents(), maxPendingEvents)
	}

	// Once a reply has carried the overflow, the client may have re-read
	// already: a later drop needs an overflow of its own. A session that
	// ignores what it was sent (no acknowledgement) has the tighter bound,
	// which one reply carries whole.
	ss.created(2, 0)
	ss.observe([]sessionEvent{{2, wire.Event{Kind: wire.EventContents, Path: "/ls/c/g", Handle: 1}}}, nil)
	if r := answered(t, keepAliveAsync(t, ss, clock, stop, 2, 0)); r.err != nil || len(r.resp.Events) != 1 {
		t.Fatalf("first reply: %+v, %v", r.resp, r.err)
	}
	if r := answered(t, keepAliveAsync(t, ss, clock, stop, 2, 0)); r.err != nil || len(r.resp.Events) != 1 {
		t.Fatalf("the event ignored, sent again: %+v, %v", r.resp, r.err)
	}
	notes = notes[:0]
	for i := range maxPendingEventsIgnorer + 5 {
		notes = append(notes, sessionEvent{2, wire.Event{Kind: wire.EventContents, Path: "/ls/c/g", Handle: uint64(i + 2)}})
	}
	ss.observe(notes, nil)
	evs = ss.leases[2].events
	if len(evs) != maxPendingEventsIgnorer || evs[len(evs)-1].Kind != wire.EventOverflow {
		t.Fatalf("an ignoring session queued %d events ending with kind %d; want %d ending with an overflow",
			len(evs), evs[len(evs)-1].Kind, maxPendingEventsIgnorer)
	}
	// Its notices do not cut its hold short (no reply per write to a
	// session that takes none of them): the overflow goes with the reply
	// at the hold's end.
	ch := keepAliveAsync(t, ss, clock, stop, 2, 0)
	parked(t, ch)
	clock.Advance(testLease * 3 / 4)
	r := answered(t, ch)
	if r.err != nil || len(r.resp.Events) != maxPendingEventsIgnorer || r.resp.Events[len(r.resp.Events)-1].Kind != wire.EventOverflow {
		t.Fatalf("the reply carrying the overflow: %d events, %v", len(r.resp.Events), r.err)
	}
	ss.observe([]sessionEvent{{2, wire.Event{Kind: wire.EventContents, Path: "/ls/c/g", Handle: 99}}}, nil)
	evs = ss.leases[2].events
	if got := evs[len(evs)-1]; len(evs) != maxPendingEventsIgnorer+1 || got.Kind != wire.EventOverflow || got.Handle != 99 {
		t.Fatalf("a drop after the overflow was delivered left %d queued ending with %+v; want a new overflow", len(evs), got)
	}
}
