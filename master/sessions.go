package master

import (
	"context"
	"time"

	"lockcell/cell/wire"
	"lockcell/replica"
)

// lease is a session's lease in master memory. Extensions are never
// written through Raft (SPEC 4); a new master grants every session a full
// lease instead.
type lease struct {
	end    time.Time
	wake   chan struct{} // wakes the parked KeepAlive (events, close)
	closed bool
	events []wire.Event
	// failoverSeq is the sequence of this master's fail-over event for the
	// session (0 if it had none).
	failoverSeq uint64
	// acked is the highest event sequence the session acknowledged;
	// ackCh is closed (and replaced) whenever acked grows or the lease ends.
	acked uint64
	ackCh chan struct{}
	// delivered is the newest event sequence a KeepAlive reply carried;
	// ignored counts KeepAlives in a row that arrived acknowledging less
	// than it (an honest client acknowledges what it was sent on its next
	// call, so this happens only when a reply was lost, or to a client
	// that does not play by the rules).
	delivered   uint64
	ignored     int
	redelivered bool // the last KeepAlive ignored delivered events and was answered at once
	// conn is the client connection the session was created over (0 if
	// created under another master), for Limits.SessionsPerConn.
	conn uint64
}

// Bounds on a session's queue of unacknowledged events. Invalidations are
// always queued (a write's safety rests on them, and a session has at most
// one per name it registered); handle events are dropped past the bound,
// a tighter one once the session has ignored events it was sent.
const (
	maxPendingEvents        = 4096
	maxPendingEventsIgnorer = 64
)

// eventRoom is how many events the session may have queued before handle
// events are dropped.
func (l *lease) eventRoom() int {
	if l.ignored > 0 {
		return maxPendingEventsIgnorer
	}
	return maxPendingEvents
}

func newLease(end time.Time) *lease {
	return &lease{end: end, wake: make(chan struct{}, 1), ackCh: make(chan struct{})}
}

// signalAckLocked wakes writers waiting for this session's acknowledgement.
func (l *lease) signalAckLocked() {
	close(l.ackCh)
	l.ackCh = make(chan struct{})
}

func (l *lease) wakeLocked() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (c *call) createSession(ctx context.Context, req *wire.CreateSessionRequest) (*wire.CreateSessionResponse, error) {
	if len(req.ClientName) > 256 {
		return nil, wire.Errorf(wire.CodeBadRequest, "client name of %d bytes exceeds 256", len(req.ClientName))
	}
	c.mu.Lock()
	unreserve, err := c.reserveSessionLocked(c.caller)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer unreserve() // after the lease below counts it on its connection
	res, err := c.apply(ctx, &replica.Command{Type: replica.CmdCreateSession, Client: req.ClientName})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	l, ok := c.leases[res.Session]
	if !ok && c.serving {
		l = newLease(c.cfg.Clock.Now().Add(c.cfg.LeaseTTL))
		c.leases[res.Session] = l
	}
	if l != nil && !l.closed && l.conn == 0 && c.caller.Conn != 0 {
		l.conn = c.caller.Conn
		c.connSessions[l.conn]++
	}
	c.mu.Unlock()
	return &wire.CreateSessionResponse{Session: res.Session, Epoch: c.epoch, LeaseMillis: c.cfg.LeaseTTL.Milliseconds()}, nil
}

// keepAlive is the long poll of SPEC 4. The master extends the lease when
// the call arrives and parks it until a quarter of the lease is left (or an
// event is queued for the session), then extends it again and replies. The
// reply says how long the call was held and how much lease remains, so the
// client can compute a lease end that never exceeds the master's.
func (c *call) keepAlive(ctx context.Context, req *wire.KeepAliveRequest) (*wire.KeepAliveResponse, error) {
	arrived := c.cfg.Clock.Now()
	c.mu.Lock()
	l, ok := c.leases[c.h.Session]
	if !ok {
		c.mu.Unlock()
		if !c.cons.IsLeader() {
			return nil, errStopped
		}
		var live bool
		var applied uint64
		c.read(func(v replica.View) {
			live = v.SessionExists(c.h.Session)
			_, _, _, applied = v.Counts()
		})
		if c.h.Session == 0 || !live {
			if c.h.Session == 0 || c.h.Session > applied {
				return nil, wire.Errorf(wire.CodeUnknownSession, "session %d was never created in this cell", c.h.Session)
			}
			return nil, wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", c.h.Session)
		}
		// Created just now and not yet seen by the observer: give it a lease.
		c.mu.Lock()
		if l, ok = c.leases[c.h.Session]; !ok {
			l = newLease(arrived.Add(c.cfg.LeaseTTL))
			c.leases[c.h.Session] = l
		}
	}
	if l.end.Before(arrived) {
		c.mu.Unlock()
		return nil, wire.Errorf(wire.CodeSessionExpired, "session %d: lease ran out before this KeepAlive arrived", c.h.Session)
	}
	c.stats.leaseLeft.Observe(l.end.Sub(arrived))
	// The previous lease end bounds how long the call may be held: reply
	// with a quarter of the lease to spare so the next call arrives in time.
	holdUntil := l.end.Add(-c.cfg.LeaseTTL / 4)
	if e := arrived.Add(c.cfg.LeaseTTL); e.After(l.end) {
		l.end = e
	}
	c.stats.noteAcked(l.events, req.AckEvent)
	l.events = dropAcked(l.events, req.AckEvent)
	if req.AckEvent > l.acked {
		l.acked = req.AckEvent
		l.signalAckLocked()
	}
	redeliver := false
	if req.AckEvent < l.delivered {
		// Events we sent are not acknowledged: the reply was lost, or the
		// client ignores them. Send them again at once, but only once in
		// a row, so a client that ignores them cannot make us answer in
		// a loop.
		l.ignored++
		redeliver = !l.redelivered
		l.redelivered = true
	} else {
		// Everything sent is acknowledged: the session is in good
		// standing again.
		l.redelivered, l.ignored = false, 0
	}
	if l.failoverSeq != 0 && req.AckEvent >= l.failoverSeq {
		c.ackedLocked(c.h.Session)
	}
	if c.h.Epoch != c.epoch && len(l.events) == 0 {
		// The client last spoke to another master and has no fail-over
		// event queued: tell it (SPEC 7 step 4), so it flushes its cache.
		l.events = append(l.events, wire.Event{Seq: c.nextEventLocked(), Kind: wire.EventMasterFailover})
	}
	pending := redeliver || req.Prompt || len(l.events) > 0 && l.events[len(l.events)-1].Seq > l.delivered
	c.mu.Unlock()

	if !pending {
		if d := holdUntil.Sub(arrived); d > 0 {
			due, stop := after(c.cfg.Clock, d)
			select {
			case <-due:
			case <-l.wake:
			case <-ctx.Done():
				stop()
				return nil, ctx.Err()
			case <-c.stop:
				stop()
				return nil, errStopped
			}
			stop()
		}
	}
	if !c.cons.IsLeader() {
		return nil, errStopped // never extend a lease once deposed
	}
	// Belief is not enough (leadership.go): the lease granted ends by the
	// start of a round of contact with a quorum plus one lease. A master
	// that gets no such round within a quarter lease (its Raft is stuck
	// or deposed) answers NotMaster, and the client searches elsewhere
	// before its lease runs out.
	pctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL/4)
	proven, err := c.proof.since(pctx, c.cfg.Clock.Now().Add(-c.cfg.LeaseTTL/10))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errStopped
	}
	replied := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.closed {
		return nil, wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", c.h.Session)
	}
	if e := replied.Add(c.cfg.LeaseTTL); e.After(l.end) {
		l.end = e
	}
	granted := l.end
	if e := proven.Add(c.cfg.LeaseTTL); e.Before(granted) {
		granted = e
	}
	// The reply carries the oldest unacknowledged events, as many as fit a
	// bounded reply; acknowledgements are cumulative, so the rest follow
	// on the next calls. Every lease extension therefore travels with
	// every outstanding invalidation it could cover (invalidate.go).
	events := replyEvents(l.events)
	if n := len(events); n > 0 {
		l.delivered = max(l.delivered, events[n-1].Seq)
	}
	return &wire.KeepAliveResponse{
		Epoch:       c.epoch,
		HeldMillis:  replied.Sub(arrived).Milliseconds(),
		LeaseMillis: granted.Sub(replied).Milliseconds(),
		Events:      events,
	}, nil
}

// Bounds on one KeepAlive reply's events, well inside a frame (names are
// at most 1 KiB).
const (
	maxReplyEvents     = 1024
	maxReplyEventBytes = 512 << 10
)

// replyEvents copies the oldest events that fit one reply.
func replyEvents(evs []wire.Event) []wire.Event {
	n, size := 0, 0
	for n < len(evs) && n < maxReplyEvents {
		size += 64 + len(evs[n].Path) + len(evs[n].Child)
		if n > 0 && size > maxReplyEventBytes {
			break
		}
		n++
	}
	return append([]wire.Event(nil), evs[:n]...)
}

func dropAcked(evs []wire.Event, ack uint64) []wire.Event {
	out := evs[:0]
	for _, e := range evs {
		if e.Seq > ack {
			out = append(out, e)
		}
	}
	return out
}

func (c *call) closeSession(ctx context.Context) (*wire.Empty, error) {
	res, err := c.applyInvalidating(ctx, c.stop, &replica.Command{Type: replica.CmdCloseSession, Session: c.h.Session, Time: c.now()})
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, resultErr(res)
}

// expireLoop expires sessions whose lease ran out, through Raft, so every
// replica releases their locks and deletes their ephemeral nodes (SPEC 4).
func (s *Server) expireLoop(stop <-chan struct{}) {
	defer s.wg.Done()
	every := max(s.cfg.LeaseTTL/20, 10*time.Millisecond)
	for {
		tick, stopTick := after(s.cfg.Clock, every)
		select {
		case <-stop:
			stopTick()
			return
		case <-tick:
		}
		now := s.cfg.Clock.Now()
		var expired []uint64
		s.mu.Lock()
		for id, l := range s.leases {
			if l.end.Before(now) && !l.closed {
				expired = append(expired, id)
			}
		}
		s.mu.Unlock()
		for _, id := range expired {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := s.applyInvalidating(ctx, stop, &replica.Command{Type: replica.CmdCloseSession, Session: id, Expired: true, Time: s.now()})
			cancel()
			switch {
			case err != nil:
				s.log.Warn("session expiry not applied; will retry", "session", id, "err", err)
			case res.Err != nil:
				s.mu.Lock()
				if l := s.leases[id]; l != nil {
					s.dropLeaseLocked(id, l)
				}
				s.mu.Unlock()
				s.inv.forget(id)
			default:
				s.log.Info("session expired", "session", id)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// listSessions reports live sessions with the lease this master grants
// each (memory) and what each holds (replicated state): every session to
// the admin, to anyone else only the sessions of its own principal, and
// Total counts only what the caller may see. Others' sessions would name
// their principals, clients and the locks they hold.
func (c *call) listSessions(ctx context.Context) (*wire.ListSessionsResponse, error) {
	if err := c.cons.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	var views []replica.SessionView
	c.read(func(v replica.View) { views = v.Sessions() })
	if !c.isAdmin() {
		own := views[:0]
		for _, v := range views {
			if v.Principal == c.caller.Principal {
				own = append(own, v)
			}
		}
		views = own
	}
	now := c.cfg.Clock.Now()
	out := &wire.ListSessionsResponse{Total: uint64(len(views))}
	if len(views) > wire.MaxListedSessions {
		views = views[:wire.MaxListedSessions]
	}
	out.Sessions = make([]wire.SessionInfo, 0, len(views))
	c.mu.Lock()
	for _, v := range views {
		info := wire.SessionInfo{ID: v.ID, Client: v.Client, Principal: v.Principal, Created: v.Created,
			Handles: uint32(v.Handles), Locks: v.Locks}
		if l := c.leases[v.ID]; l != nil {
			info.LeaseMillis = max(l.end.Sub(now).Milliseconds(), 0)
		}
		out.Sessions = append(out.Sessions, info)
	}
	c.mu.Unlock()
	return out, nil
}

// dropLeaseLocked forgets a session's lease and its place in the
// per-connection count. s.mu is held.
func (s *Server) dropLeaseLocked(id uint64, l *lease) {
	if l.conn != 0 {
		if s.connSessions[l.conn]--; s.connSessions[l.conn] <= 0 {
			delete(s.connSessions, l.conn)
		}
	}
	delete(s.leases, id)
}
