package master

import (
	"context"
	"time"

	"lockcell/cell/wire"
	"lockcell/replica"
)

// The cache-invalidation protocol (SPEC 6). The master remembers which
// sessions may have cached each name (registered when it served them a
// read they asked to cache). Before a command that could change a name is
// proposed, the name is marked busy (reads of it are then served
// uncacheable), every session that may have cached it is sent an
// Invalidate event on its KeepAlive, and the command waits until each has
// acknowledged the event or its lease has run out (a client whose lease ran
// out has disabled its cache: jeopardy). Only then is the command applied,
// so a write completes only after no cache can serve the old data.

// registerCacher records that session may cache name, unless a write of
// name is in flight. It reports whether the answer may be cached.
func (s *Server) registerCacher(session uint64, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[session]
	if l == nil || l.closed || s.busy[name] > 0 {
		return false
	}
	set := s.cachers[name]
	if set == nil {
		set = map[uint64]bool{}
		s.cachers[name] = set
	}
	set[session] = true
	if l.cached == nil {
		l.cached = map[string]bool{}
	}
	l.cached[name] = true
	return true
}

// forgetCacherLocked drops a session's registrations (it ended).
func (s *Server) forgetCacherLocked(session uint64, l *lease) {
	for name := range l.cached {
		if set := s.cachers[name]; set != nil {
			delete(set, session)
			if len(set) == 0 {
				delete(s.cachers, name)
			}
		}
	}
	l.cached = nil
}

type pendingInval struct {
	l   *lease
	seq uint64
}

// invalidate marks names busy, sends invalidations to every session that
// may cache them and waits for each to acknowledge or lose its lease. The
// returned release must be called once the command has been applied (or
// abandoned); it is returned even with an error.
func (s *Server) invalidate(ctx context.Context, stop <-chan struct{}, names []string) (func(), error) {
	var waits []pendingInval
	s.mu.Lock()
	for _, name := range names {
		s.busy[name]++
		// Invalidations an earlier, still running change of this name
		// sent are not acknowledged yet: this change waits for them too,
		// or it could complete while a cache still holds the old data.
		waits = append(waits, s.inflight[name]...)
		for session := range s.cachers[name] {
			l := s.leases[session]
			if l == nil || l.closed {
				continue
			}
			seq := s.nextEventLocked()
			l.events = append(l.events, wire.Event{Seq: seq, Kind: wire.EventInvalidate, Path: name})
			delete(l.cached, name)
			l.wakeLocked()
			w := pendingInval{l, seq}
			waits = append(waits, w)
			s.inflight[name] = append(s.inflight[name], w)
		}
		delete(s.cachers, name)
	}
	if len(waits) > 0 {
		s.invalidations += uint64(len(waits))
	}
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		for _, name := range names {
			if s.busy[name]--; s.busy[name] <= 0 {
				delete(s.busy, name)
				delete(s.inflight, name)
			}
		}
		s.mu.Unlock()
	}
	for _, w := range waits {
		if err := s.awaitAck(ctx, stop, w); err != nil {
			return release, err
		}
	}
	return release, nil
}

// awaitAck waits until the session acknowledged event seq, or its lease
// ran out or ended.
func (s *Server) awaitAck(ctx context.Context, stop <-chan struct{}, w pendingInval) error {
	for {
		s.mu.Lock()
		done := bugNoInval || w.l.acked >= w.seq || w.l.closed || !w.l.end.After(s.cfg.Now())
		ch, end := w.l.ackCh, w.l.end
		s.mu.Unlock()
		if done {
			return nil
		}
		t := time.NewTimer(time.Until(end) + time.Millisecond)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-stop:
			t.Stop()
			return errStopped
		}
		t.Stop()
	}
}

// applyInvalidating applies cmd after invalidating every cache of a name
// it could change.
func (s *Server) applyInvalidating(ctx context.Context, stop <-chan struct{}, cmd *replica.Command) (*replica.Result, error) {
	release, err := s.invalidate(ctx, stop, s.fsm.AffectedPaths(cmd))
	defer release()
	if err != nil {
		return nil, err
	}
	return s.cons.Apply(ctx, cmd)
}
