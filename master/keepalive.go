package master

import (
	"context"
	"time"

	"lockcell/wire"
)

// The KeepAlive long poll on the lease table (sessions.go): arrival,
// parking (parked.go), the proof and the reply.

// keepAliveArgs is one KeepAlive call as the sessions part serves it.
type keepAliveArgs struct {
	session     uint64
	epoch       uint64 // the master's epoch the call is served at
	clientEpoch uint64 // the epoch the client's header names
	ack         uint64 // the highest event sequence the client acknowledges
	prompt      bool   // answer at once
	incarnation uint64 // the session incarnation the client's header names
	// eventBytes bounds the reply's events (0: wire.MaxReplyEventBytes); a
	// BatchKeepAlive gives each of its sessions a share of one frame.
	eventBytes int
	// batched: a BatchKeepAlive's entry, held with the others of its
	// batch as one record (heldbatch.go), never parked on its own.
	batched bool
	// silent is how long before the call the session's client was last
	// heard (a batched entry's SilentMillis; 0 for a client's own call):
	// the lease is extended no further than leaseCeiling.
	silent time.Duration
	// cacheSession is the batch's proxy cache session (0: none), whose
	// lease the reply's lease extends (sessions.noteRelayedLocked).
	cacheSession uint64
}

// afterHeardQuarters is, in quarters of a lease, the furthest a lease is
// extended past the moment its client was last heard: a KeepAlive is
// held up to three quarters of a lease and its answer grants one more.
// A client's own call meets it by construction; a proxy's batch is held
// apart from its clients' calls, and this keeps the session of a client
// that fell silent behind a proxy no longer than without one.
const afterHeardQuarters = 7

// leaseCeiling is the furthest a's lease may be extended: the moment its
// client was last heard (a.silent before arrived) plus seven quarters of
// ttl. Zero (no ceiling) for a client's own call, whose arrival is that
// moment and whose answer cannot outrun it.
func leaseCeiling(a keepAliveArgs, arrived time.Time, ttl time.Duration) time.Time {
	if !a.batched {
		return time.Time{}
	}
	return arrived.Add(-a.silent + ttl*afterHeardQuarters/4)
}

// extendLocked moves l's end to e, not past ceiling (when set), never
// back. ss.mu is held.
func extendLocked(l *lease, e, ceiling time.Time) {
	if !ceiling.IsZero() && e.After(ceiling) {
		e = ceiling
	}
	if e.After(l.end) {
		l.end = e
	}
}

// keepAliveAsync is the long poll of docs/spec.md#keepalive. The lease is
// extended when the call arrives and the call parks until a quarter of
// the lease is left (or an event is queued for the session, or the
// master goes unproven, or stop or the end of its connection ends it);
// then leadership is proven, the lease is extended again and the reply
// carries the oldest unacknowledged events. The reply says how long the
// call was held and how much lease remains, so the client can compute a
// lease end that never exceeds the master's.
//
// A parked call is data, not a goroutine (parked.go): done is called
// exactly once, with the reply or the error. A call answered on arrival
// gets it in this goroutine, and keepAliveAsync returns nil; a parked one
// is returned and gets it later from another goroutine, never holding the
// sessions' lock. conn is the client connection the call came over (0:
// none to end it).
func (ss *sessions) keepAliveAsync(a keepAliveArgs, conn uint64, done func(*wire.KeepAliveResponse, error)) *parkedCall {
	arrived := ss.clock.Now()
	ss.mu.Lock()
	if !ss.active || a.epoch != ss.epoch {
		// The term the call was admitted in has ended.
		ss.mu.Unlock()
		done(nil, errStopped)
		return nil
	}
	l, holdUntil, pending, err := ss.arriveLocked(a, arrived)
	if err != nil {
		ss.mu.Unlock()
		done(nil, err)
		return nil
	}
	ctx := ss.termCtx
	if d := holdUntil.Sub(arrived); !pending && d > 0 {
		sig := ss.auth.stale()
		if isClosed(sig) {
			// No proof for half a lease (its Raft is stuck or
			// deposed): answer NotMaster now, while the client still
			// trusts its lease, rather than at the lease's end.
			ss.mu.Unlock()
			done(nil, errStopped)
			return nil
		}
		p := &parkedCall{ss: ss, l: l, a: a, arrived: arrived, conn: conn, stale: sig, ctx: ctx, done: done}
		p.timer = ss.clock.AfterFunc(d, p.holdOver)
		ss.parkLocked(p)
		ss.mu.Unlock()
		select { // the stale watch looks at the signal this call was parked under
		case ss.kick <- struct{}{}:
		default:
		}
		return p
	}
	ss.mu.Unlock()
	done(ss.answer(ctx, l, a, arrived))
	return nil
}

// answer is a KeepAlive's reply once its hold is over. ctx is the term's:
// the proof is not waited for past stop.
func (ss *sessions) answer(ctx context.Context, l *lease, a keepAliveArgs, arrived time.Time) (*wire.KeepAliveResponse, error) {
	proven, err := ss.proveForLease(ctx)
	if err != nil {
		return nil, err
	}
	return ss.reply(l, a, arrived, proven)
}

// proveForLease is the proof a lease grant rests on, for one KeepAlive's
// reply or a held batch's: the start of a round of contact with a quorum,
// or errStopped. ctx is the term's: the proof is not waited for past
// stop.
//
// Belief is not enough (leadership.go): the lease granted ends by the
// start of a round of contact with a quorum plus one lease. A master
// that gets no such round within an eighth of a lease (its Raft is
// stuck or deposed; a healthy round takes milliseconds) answers
// NotMaster while the client still has an eighth of its lease to
// spare: it searches elsewhere without doubting its session (no
// jeopardy), and abandons the calls it left at this master.
// (Bounded by a pooled timer, not a context.WithTimeout, which would
// cost a context, a timer and a channel on every KeepAlive.)
func (ss *sessions) proveForLease(ctx context.Context) (time.Time, error) {
	if !ss.auth.leads() {
		return time.Time{}, errStopped // never extend a lease once deposed
	}
	proven, err := ss.auth.provenSince(ctx, ss.clock.Now().Add(-ss.ttl/10), ss.ttl/8)
	if err != nil {
		return time.Time{}, errStopped
	}
	return proven, nil
}

// arriveLocked is a KeepAlive's arrival: the lease is extended and the
// acknowledgement recorded. It returns until when the call may be held,
// and whether something is to be sent at once. ss.mu is held.
func (ss *sessions) arriveLocked(a keepAliveArgs, arrived time.Time) (l *lease, holdUntil time.Time, pending bool, err error) {
	l, ok := ss.leases[a.session]
	if !ok {
		if ss.idleClosedLocked(a.session) {
			return nil, time.Time{}, false, idleClosedErr(a.session)
		}
		if err := ss.known.adopt(a.session); err != nil {
			return nil, time.Time{}, false, err
		}
		l = newLease(arrived.Add(ss.ttl))
		ss.leases[a.session] = l
	}
	if l.idle {
		// Draining for idleness (idle.go): the lease runs out, and
		// the client is told why at once. Its acknowledgement still
		// counts: writes waiting on it need not wait out the lease.
		ss.dropAckedLocked(l, a.ack)
		if a.ack > l.acked {
			l.acked = a.ack
			l.signalAckLocked()
		}
		return nil, time.Time{}, false, idleClosedErr(a.session)
	}
	// A KeepAlive that waited in the socket while the master stalled may
	// run before the expiry loop's tick does: it credits the stall first.
	ss.creditStallLocked(arrived)
	if l.end.Before(arrived) {
		// Late by more than the quarter lease a client keeps to spare:
		// the network, the client or this master was slow; worth a line.
		ss.log.Info("a KeepAlive arrived after its lease ended", "session", a.session, "late", arrived.Sub(l.end),
			"served", !ss.pastSlack(l, arrived))
		if ss.pastSlack(l, arrived) {
			return nil, time.Time{}, false, wire.Errorf(wire.CodeSessionExpired, "session %d: lease ran out before this KeepAlive arrived", a.session)
		}
	}
	l.heard = true
	ss.stats.leaseLeft.Observe(l.end.Sub(arrived))
	// The previous lease end bounds how long the call may be held: reply
	// with a quarter of the lease to spare so the next call arrives in time.
	// So does one lease from now: the master's lease end can be well past
	// the one the client was told (a fail-over grants the longest lease
	// any master may have granted, a stall is credited), and a call held
	// past the client's end would put it in jeopardy.
	ttl := ss.grantTTLLocked()
	holdUntil = l.end.Add(-ttl / 4)
	if h := arrived.Add(ttl - ttl/4); h.Before(holdUntil) {
		holdUntil = h
	}
	extendLocked(l, arrived.Add(ttl), leaseCeiling(a, arrived, ttl))
	if a.cacheSession != 0 && a.cacheSession != a.session {
		// The reply may come after the cache session's own lease
		// would end: it outlives the lease it was extended to here.
		ss.noteRelayedLocked(a.cacheSession, l.end)
	}
	ss.stats.noteAcked(l.events, a.ack)
	ss.dropAckedLocked(l, a.ack)
	if a.ack > l.acked {
		l.acked = a.ack
		l.signalAckLocked()
		ss.noteOverflowLocked(a.session, l)
	}
	redeliver := false
	if a.ack < l.delivered {
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
	if l.failoverSeq != 0 && a.ack >= l.failoverSeq {
		ss.ackedLocked(a.session)
	}
	if a.clientEpoch != a.epoch && len(l.events) == 0 {
		// The client last spoke to another master and has no fail-over
		// event queued: tell it (docs/spec.md#fail-over), so it flushes its cache.
		ss.queueForcedLocked(a.session, l, wire.Event{Kind: wire.EventMasterFailover})
	}
	pending = redeliver || a.prompt || l.undeliveredLocked()
	return l, holdUntil, pending, nil
}

// reply extends l once more and builds the KeepAlive's answer: the lease
// granted ends no later than proven plus one lease.
func (ss *sessions) reply(l *lease, a keepAliveArgs, arrived, proven time.Time) (*wire.KeepAliveResponse, error) {
	replied := ss.clock.Now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if l.moved || ss.known.movedSince(a.session, a.incarnation) {
		// The session was resumed while the call was held (or between
		// its admission and its arrival): its process is no longer the
		// session's, and must not hear of a lease.
		return nil, movedErr(a.session)
	}
	if l.idle {
		// Draining for idleness, or closed so (idle.go): extend nothing.
		return nil, idleClosedErr(a.session)
	}
	if l.closed {
		return nil, wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", a.session)
	}
	ttl := ss.grantTTLLocked()
	extendLocked(l, replied.Add(ttl), leaseCeiling(a, arrived, ttl))
	granted := l.end
	if e := proven.Add(ttl); e.Before(granted) {
		granted = e
	}
	if a.cacheSession != 0 && a.cacheSession != a.session {
		ss.noteRelayedLocked(a.cacheSession, granted)
	}
	// The reply carries the oldest unacknowledged events, as many as fit a
	// bounded reply; acknowledgements are cumulative, so the rest follow
	// on the next calls. Every lease extension therefore travels with
	// every outstanding invalidation it could cover (invalidate.go).
	budget := wire.MaxReplyEventBytes
	if a.eventBytes > 0 {
		budget = a.eventBytes
	}
	events := wire.ReplyEvents(l.events, budget)
	if n := len(events); n > 0 {
		l.delivered = max(l.delivered, events[n-1].Seq)
		ss.noteOverflowLocked(a.session, l)
	}
	return &wire.KeepAliveResponse{
		Epoch:       a.epoch,
		HeldMillis:  replied.Sub(arrived).Milliseconds(),
		LeaseMillis: granted.Sub(replied).Milliseconds(),
		Events:      events,
	}, nil
}
