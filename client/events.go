package client

import (
	"sync"
	"time"

	"lockcell/cell/wire"
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

// eventStream is one handle's stream of events (Handle.Events).
type eventStream struct {
	path string

	mu     sync.Mutex
	ch     chan Event
	closed bool
	// last is the position of the newest event pushed, which a Reannounce
	// repeats (generations only grow, so positions stay monotone).
	last Event
}

func (s *eventStream) push(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if e.Instance != 0 {
		s.last = e
	}
	pushEvent(s.ch, e)
}

// reannounce tells the consumer that what it heard before epoch may be
// stale: events queued at a master that failed over are lost with it.
func (s *eventStream) reannounce(epoch uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	pushEvent(s.ch, Event{Kind: Reannounce, Path: s.path, Epoch: epoch, Time: now,
		Instance: s.last.Instance, ContentGen: s.last.ContentGen, LockGen: s.last.LockGen})
}

func (s *eventStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// handleStreams indexes the event streams of the open handles that asked
// for events, by handle id, and the invalidation watchers of
// WatchInvalidations by name. Its lock is taken before a stream's, never
// the other way round.
type handleStreams struct {
	mu    sync.Mutex
	byID  map[uint64]*eventStream
	inval map[string]map[chan struct{}]struct{}
	ended bool // the session is over: every stream is closed
}

// open returns the stream of a handle just opened with events; after the
// session ended it returns one already closed.
func (t *handleStreams) open(id uint64, path string) *eventStream {
	s := &eventStream{path: path, ch: make(chan Event, HandleEventBuffer+1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		s.close()
		return s
	}
	if t.byID == nil {
		t.byID = map[uint64]*eventStream{}
	}
	t.byID[id] = s
	return s
}

// drop closes the stream of a handle being closed (nil: it had none).
func (t *handleStreams) drop(id uint64, s *eventStream) {
	if s == nil {
		return
	}
	t.mu.Lock()
	if t.byID[id] == s {
		delete(t.byID, id)
	}
	t.mu.Unlock()
	s.close()
}

// deliver pushes e to the stream of the handle id, if it has one.
func (t *handleStreams) deliver(id uint64, e Event) {
	t.mu.Lock()
	s := t.byID[id]
	t.mu.Unlock()
	if s != nil {
		s.push(e)
	}
}

// reannounceAll pushes a Reannounce to every stream.
func (t *handleStreams) reannounceAll(epoch uint64, now time.Time) {
	for _, s := range t.all() {
		s.reannounce(epoch, now)
	}
}

// all returns every open stream.
func (t *handleStreams) all() []*eventStream {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := make([]*eventStream, 0, len(t.byID))
	for _, s := range t.byID {
		all = append(all, s)
	}
	return all
}

// overflowAll pushes an Overflow to every stream: the master dropped
// events for the session without saying whose.
func (t *handleStreams) overflowAll(epoch uint64, now time.Time) {
	for _, s := range t.all() {
		s.push(Event{Kind: Overflow, Path: s.path, Epoch: epoch, Time: now})
	}
}

// end closes every stream: the session is over (closed or expired).
func (t *handleStreams) end() {
	t.mu.Lock()
	t.ended = true
	all := t.byID
	t.byID = nil
	t.mu.Unlock()
	for _, s := range all {
		s.close()
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
