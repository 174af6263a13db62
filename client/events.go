package client

import (
	"sync"
	"time"

	"lockcell/wire"
)

// Event buffers. A stream keeps this many unread events; the next one it
// cannot keep is replaced by an Overflow event, which always has room (one
// slot is kept for it), so a consumer that falls behind is told so at the
// point where it stopped hearing everything, never left to guess.
const (
	// HandleEventBuffer is how many unread events a handle's stream
	// (Handle.Events) keeps before it overflows.
	HandleEventBuffer = 64
	// SessionEventBuffer is how many unread events Client.Events keeps
	// before it overflows.
	SessionEventBuffer = 255
)

// pushEvent sends e on ch without blocking: while fewer than cap(ch)-1
// events are unread it is kept; otherwise, if the last slot is free, an
// Overflow event standing for e takes it, and reported is true. With the
// last slot taken as well, the event in it is an Overflow that nobody has
// read yet (only an Overflow fills that slot, and a read frees one), and
// e is coalesced into it: the consumer re-reads after reading it, which is
// after e happened. The caller serialises pushes to ch; a concurrent
// reader only makes room.
func pushEvent(ch chan Event, e Event) (kept, overflowed bool) {
	switch {
	case len(ch) < cap(ch)-1:
		ch <- e
		return true, false
	case len(ch) < cap(ch):
		e.Kind, e.Missed, e.Child = Overflow, e.Kind, ""
		ch <- e
		return false, true
	}
	return false, false
}

// eventStream is one handle's stream of events (Handle.Events). Every
// handle has one; its channel is made on first use (a push, or Events),
// so a handle nobody listens to costs no buffer.
type eventStream struct {
	mu     sync.Mutex
	ch     chan Event
	closed bool
	// asked: the handle was opened WithEvents.
	asked bool
	// last is the position of the newest event pushed, which a Reannounce
	// repeats (generations only grow, so positions stay monotone).
	instance, contentGen, lockGen uint64
}

// chanLocked returns the stream's channel, made (and closed, if the
// stream is) on first use. Called with s.mu held.
func (s *eventStream) chanLocked() chan Event {
	if s.ch == nil {
		s.ch = make(chan Event, HandleEventBuffer+1)
		if s.closed {
			close(s.ch)
		}
	}
	return s.ch
}

func (s *eventStream) events() <-chan Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chanLocked()
}

func (s *eventStream) push(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if e.Instance != 0 {
		s.instance, s.contentGen, s.lockGen = e.Instance, e.ContentGen, e.LockGen
	}
	pushEvent(s.chanLocked(), e)
}

// reannounce tells the consumer that what it heard before epoch may be
// stale: events queued at a master that failed over are lost with it.
func (s *eventStream) reannounce(path string, epoch uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	pushEvent(s.chanLocked(), Event{Kind: Reannounce, Path: path, Epoch: epoch, Time: now,
		Instance: s.instance, ContentGen: s.contentGen, LockGen: s.lockGen})
}

func (s *eventStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		if s.ch != nil {
			close(s.ch)
		}
	}
}

// handleStreams indexes the open handles by the id the master knows them
// by (for their events, and for the re-opening a renewal does), and the
// invalidation watchers of WatchInvalidations by name. Its lock is taken before a
// handle's or a stream's, never the other way round.
type handleStreams struct {
	mu    sync.Mutex
	byID  map[uint64]*Handle
	inval map[string]map[chan struct{}]struct{}
	ended bool // the Client is closed, or its session expired for good: every stream is closed
}

// add registers a handle just opened in session generation gen, if that
// is still the session's (cur reads it); false means the session changed
// since the Open, and the handle is dead. After the streams ended, the
// handle's stream is closed at once.
func (t *handleStreams) add(h *Handle, gen uint64, cur func() uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		h.events.close()
		return true
	}
	if cur() != gen {
		return false
	}
	if t.byID == nil {
		t.byID = map[uint64]*Handle{}
	}
	t.byID[h.id.Load()] = h
	return true
}

// drop forgets the handle id being closed and closes its stream.
func (t *handleStreams) drop(id uint64, h *Handle) {
	t.mu.Lock()
	if t.byID[id] == h {
		delete(t.byID, id)
	}
	t.mu.Unlock()
	h.events.close()
}

// rekey moves h from the id old to new (a renewal re-opened it).
func (t *handleStreams) rekey(old, new uint64, h *Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[old] == h {
		delete(t.byID, old)
	}
	if !t.ended {
		t.byID[new] = h
	}
}

// deliver pushes e to the stream of the handle id, if it is open.
func (t *handleStreams) deliver(id uint64, e Event) {
	t.mu.Lock()
	h := t.byID[id]
	t.mu.Unlock()
	if h != nil {
		h.events.push(e)
	}
}

// all returns every open handle.
func (t *handleStreams) all() []*Handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := make([]*Handle, 0, len(t.byID))
	for _, h := range t.byID {
		all = append(all, h)
	}
	return all
}

// listening returns the handles that hear events: those opened
// WithEvents, and those holding a lock (which hear its LockBroken and
// ReleaseRequested events). A handle that asked for nothing and holds
// nothing has nothing to lose, so it is not told of losses.
func (t *handleStreams) listening() []*Handle {
	all := t.all()
	out := all[:0]
	for _, h := range all {
		if h.events.asked || h.holdsLock() {
			out = append(out, h)
		}
	}
	return out
}

// reannounceAll pushes a Reannounce to every listening handle.
func (t *handleStreams) reannounceAll(epoch uint64, now time.Time) {
	for _, h := range t.listening() {
		h.events.reannounce(h.path, epoch, now)
	}
}

// overflowAll pushes an Overflow to every listening handle: the master
// dropped events for the session without saying whose.
func (t *handleStreams) overflowAll(epoch uint64, now time.Time) {
	for _, h := range t.listening() {
		h.events.push(Event{Kind: Overflow, Path: h.path, Epoch: epoch, Time: now})
	}
}

// end closes every stream: the Client is closed, or its session is over
// for good.
func (t *handleStreams) end() {
	t.mu.Lock()
	t.ended = true
	all := t.byID
	t.byID = nil
	t.mu.Unlock()
	for _, h := range all {
		h.events.close()
	}
}

// watchInvalidation returns a channel that receives (coalesced) whenever
// the client's cache hears that name changed, and a func that stops it.
func (t *handleStreams) watchInvalidation(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	if t.inval == nil {
		t.inval = map[string]map[chan struct{}]struct{}{}
	}
	if t.inval[name] == nil {
		t.inval[name] = map[chan struct{}]struct{}{}
	}
	t.inval[name][ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.inval[name], ch)
		if len(t.inval[name]) == 0 {
			delete(t.inval, name)
		}
	}
}

// invalidated wakes the invalidation watchers of name ("" : every name,
// as when a new master purges the cache).
func (t *handleStreams) invalidated(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n, chs := range t.inval {
		if name != "" && n != name {
			continue
		}
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default: // a wake is pending already
			}
		}
	}
}

// handleEvent is the application's view of a handle event from the wire,
// with its position; epoch is the reply's, whose master made the event.
func handleEvent(k EventKind, ev wire.Event, epoch uint64, now time.Time) Event {
	e := Event{Kind: k, Epoch: epoch, Time: now, Path: ev.Path, Child: ev.Child}
	if p := ev.Pos; p != nil {
		e.Instance, e.ContentGen, e.LockGen = p.Instance, p.ContentGen, p.LockGen
	}
	return e
}
