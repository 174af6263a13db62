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
// acknowledged the event or the lease that session held when the event was
// queued has run out. Only then is the command applied, so a write
// completes only after no cache can serve the old data.
//
// Why the lease held at queue time, and not the lease as later KeepAlives
// extend it: a cacher that keeps its lease alive but never acknowledges
// would otherwise hold every write of the name for as long as it likes.
// Waiting out the old lease is enough, because every later extension
// reaches the client only in a KeepAlive reply, every reply carries all of
// the session's unacknowledged events, and the client applies a reply's
// invalidations before it adopts the reply's lease. So once the old lease
// is over, the client has either dropped the entry or stopped trusting its
// cache (jeopardy). A write therefore waits at most one lease for any
// cacher, however it behaves.
//
// Two rules keep a cacher that never acknowledges from stalling the next
// write too: a session with an unacknowledged invalidation is registered
// for nothing more (its reads are answered uncacheable, as Chubby treats a
// node with invalidations outstanding), and a principal (other than the
// admin) whose live session let an invalidation's lease run out while it
// kept sending KeepAlives that ignored the delivered event may cache
// nothing for cachePenaltyLeases leases. A client that lost the reply
// carrying an event gets it again at once on its next KeepAlive, so only
// a client that ignores events, or never hears the master's replies, is
// barred; barring only turns its caching off.

// cachePenaltyLeases is how many leases a principal may cache nothing
// after one of its sessions ignored an invalidation until its deadline.
const cachePenaltyLeases = 10

// registerCacher records that session may cache name, unless a write of
// name is in flight, the session has an invalidation outstanding, or its
// principal is barred from caching. It reports whether the answer may be
// cached.
func (s *Server) registerCacher(session uint64, name string) bool {
	principal, _ := s.fsm.SessionPrincipal(session)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[session]
	if l == nil || l.closed || s.busy[name] > 0 || l.acked < l.lastInval {
		return false
	}
	if until, ok := s.cacheBarred[principal]; ok {
		if s.cfg.Now().Before(until) {
			return false
		}
		delete(s.cacheBarred, principal)
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

// pendingInval is one invalidation a change waits for: event seq on the
// session of lease l, due by deadline, the lease l held when it was queued.
// Copies share counted: a later change of the name waits on the same
// invalidation, and one invalidation run late is counted once however
// many changes waited on it.
type pendingInval struct {
	l        *lease
	session  uint64
	seq      uint64
	deadline time.Time
	counted  *bool // counted as late (under Server.mu)
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
			l.lastInval = seq
			delete(l.cached, name)
			l.wakeLocked()
			w := pendingInval{l: l, session: session, seq: seq, deadline: l.end, counted: new(bool)}
			waits = append(waits, w)
			s.inflight[name] = append(s.inflight[name], w)
			s.invalidations++ // the waits taken over from an earlier change were counted by it
		}
		delete(s.cachers, name)
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

// awaitAck waits until the session acknowledged event seq, or the lease
// it held when the event was queued ran out, or it ended. A live session
// that ran out the deadline while ignoring the delivered event bars its
// principal from caching (see the top of this file).
func (s *Server) awaitAck(ctx context.Context, stop <-chan struct{}, w pendingInval) error {
	for {
		s.mu.Lock()
		now := s.cfg.Now()
		acked := bugNoInval || w.l.acked >= w.seq || w.l.closed
		late := !acked && !w.deadline.After(now)
		if late && !*w.counted {
			*w.counted = true
			s.lateInvalidations++
			if w.l.ignored > 0 && w.l.delivered >= w.seq {
				s.barCachingLocked(w.session, now)
			}
		}
		ch := w.l.ackCh
		s.mu.Unlock()
		if acked || late {
			return nil
		}
		t := time.NewTimer(w.deadline.Sub(now) + time.Millisecond)
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

// barCachingLocked bars the principal of session from caching for
// cachePenaltyLeases leases: one of its live sessions was told of an
// invalidation and let its deadline pass without acknowledging it.
func (s *Server) barCachingLocked(session uint64, now time.Time) {
	principal, ok := s.fsm.SessionPrincipal(session)
	if !ok || principal == s.cfg.Admin {
		// The admin may do anything to any node anyway; and without TLS
		// every caller is the admin, where barring would bar everyone.
		return
	}
	if _, barred := s.cacheBarred[principal]; !barred {
		s.log.Warn("a session ignored an invalidation until its lease deadline: its principal may not cache for a while",
			"principal", principal, "session", session, "for", cachePenaltyLeases*s.cfg.LeaseTTL)
	}
	s.cacheBarred[principal] = now.Add(cachePenaltyLeases * s.cfg.LeaseTTL)
}

// InvalidationStats counts invalidations sent, those the cacher
// acknowledged, those whose change went ahead at the cacher's lease
// deadline without its acknowledgement, and handle events dropped because
// a session's queue was full. An invalidation acknowledged after its
// deadline counts as late and as acknowledged; one whose session ended
// first counts as neither.
type InvalidationStats struct {
	Sent, Acked, Late, EventsDropped uint64
}

// InvalidationStats reports the master's invalidation counters.
func (s *Server) InvalidationStats() InvalidationStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return InvalidationStats{Sent: s.invalidations, Acked: s.stats.invalAcked.Load(), Late: s.lateInvalidations,
		EventsDropped: s.droppedEvents}
}
