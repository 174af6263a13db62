package master

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// lease is a session's lease in master memory. Extensions are never
// written through Raft (docs/spec.md#sessions-and-leases); a new master grants every session a full
// lease instead.
type lease struct {
	end    time.Time
	parked []*parkedCall // KeepAlives of the session held at the master (parked.go)
	closed bool
	// moved: closed because another process resumed the session; the
	// KeepAlives parked on it are told so (wire.SessionMovedMsg).
	moved  bool
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
	// heard: a KeepAlive of the session reached this master. Until then
	// the session may cache nothing (cacheable; invalidate.go says why).
	heard bool
	// bytes is what its queued events cost the event budget (eventbudget.go), of
	// which forced for the events never dropped; principal, once owned,
	// is the principal charged.
	bytes, forced int64
	principal     string
	owned         bool
	// overflowSeq is the sequence of the newest overflow event queued;
	// overflowing: the session is listed in sessions.overflowing
	// (eventoverflow.go).
	overflowSeq uint64
	overflowing bool
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
	return &lease{end: end, ackCh: make(chan struct{})}
}

// signalAckLocked wakes writers waiting for this session's acknowledgement.
func (l *lease) signalAckLocked() {
	close(l.ackCh)
	l.ackCh = make(chan struct{})
}

// ignoring reports whether the session's last KeepAlive left events it had
// been sent unacknowledged: it lost a reply, or it does not take its
// events.
func (l *lease) ignoring() bool { return l.ignored > 0 }

// wakeForNoticeLocked wakes the session's parked KeepAlive for a handle
// event (or the overflow standing for dropped ones), unless the session
// ignores its events: each wake is a reply carrying its whole queue, so a
// crowd of sessions that never acknowledge would otherwise make every
// write cost a reply per session, again and again. An ignoring session
// gets its notices when its hold ends; what a writer waits for (an
// invalidation) and a fail-over notice still wake it at once. An honest
// client that lost a reply is sent its events again on its next call,
// acknowledges them, and is in good standing again.
func (l *lease) wakeForNoticeLocked() {
	if !l.ignoring() {
		l.wakeLocked()
	}
}

// urgentEvent reports whether an event must reach even a session that
// ignores its events at once: an invalidation holds a write until it is
// acknowledged or the lease runs out, a fail-over notice holds recovery.
func urgentEvent(k uint8) bool { return k == wire.EventInvalidate || k == wire.EventMasterFailover }

// undeliveredLocked reports whether the session has events queued that no
// reply has carried yet; for a session that ignores its events, only
// urgent ones count (wakeForNoticeLocked says why).
func (l *lease) undeliveredLocked() bool {
	for i := len(l.events) - 1; i >= 0 && l.events[i].Seq > l.delivered; i-- {
		if !l.ignoring() || urgentEvent(l.events[i].Kind) {
			return true
		}
	}
	return false
}

// wakeLocked ends the hold of every KeepAlive of the session parked at
// the master (an event is queued, or the session ended): each is answered
// as at the end of its hold (parked.go).
func (l *lease) wakeLocked() {
	for len(l.parked) > 0 {
		p := l.parked[len(l.parked)-1]
		p.ss.holdEndedLocked(p)
	}
}

// sessions is the sessions-and-leases part: the lease table, each
// session's event queue and acknowledgements, KeepAlive parking, expiry,
// fail-over recovery and event numbering, under one mutex of its own.
//
// Lock order: the invalidator's mutex and Server.mu may be held when
// calling its methods (sessionLink, admission, reservations); while it
// holds its mutex it calls nothing of the master's, only the state's Read
// (through the admit function a KeepAlive passes), the stats' atomics, the
// leadership proof's stale signal and the clock's timers. It never calls
// a parked KeepAlive's reply callback holding it.
type sessions struct {
	clock Clock
	ttl   time.Duration
	// maxTTL and target are lease lengthening (grantTTLLocked): leases
	// grow up to maxTTL to keep KeepAlives under target per second.
	// maxTTL == ttl: leases never lengthen.
	maxTTL time.Duration
	target int
	auth   leaseAuthority
	stats  *masterStats
	log    *slog.Logger

	mu     sync.Mutex
	active bool // between start and stop: leases are kept and granted
	epoch  uint64
	leases map[uint64]*lease
	byConn map[uint64]int // live sessions by the connection that created them
	// eventSeq is the last event sequence issued: epoch<<40 | counter.
	eventSeq uint64
	dropped  uint64 // handle events not queued: the session's queue or a byte budget was full
	// budget counts the bytes of every queued event (eventbudget.go);
	// principalOf finds a session's principal for it in the state.
	budget      eventBudget
	principalOf func(session uint64) string
	// recovering: after a fail-over the master accepts only KeepAlives
	// until every session has acknowledged its fail-over event or ended
	// (docs/spec.md#fail-over). pendingAck holds the sessions still to answer.
	recovering bool
	pendingAck map[uint64]bool
	// overflowing lists the sessions whose queue holds an overflow event
	// that no reply has carried and none acknowledged: the fan-out passes
	// over them (eventoverflow.go). overflowMu is a leaf, taken under mu
	// or under the state's read lock.
	overflowMu  sync.Mutex
	overflowing map[uint64]struct{}

	// The stall watch (creditStallLocked): while the expiry loop waits
	// for its tick, the master runs at least every watchEvery; lastRan is
	// the latest instant it is known to have run (the loop's arming, a
	// KeepAlive's arrival). watching is false while the loop works.
	watchEvery time.Duration
	watching   bool
	lastRan    time.Time
	stalls     uint64

	// Parked KeepAlives (parked.go). connParked heads each client
	// connection's list of them; termCtx bounds the proof a held call
	// waits for once its hold ends, and termDone ends the stale watch,
	// both at stop. wg counts the stale watch and the calls whose hold
	// ended and whose reply is being made; kick wakes the stale watch
	// when a call parks.
	connParked map[uint64]*parkedCall
	termCtx    context.Context
	termEnd    context.CancelFunc
	termDone   chan struct{}
	kick       chan struct{}
	wg         sync.WaitGroup
}

// leaseAuthority is what granting a lease needs of leadership: Raft still
// believes this replica leads, and the start of the latest round of
// contact with a quorum (leadership.go).
type leaseAuthority interface {
	leads() bool
	// provenSince is leadershipProof.sinceWithin: a bound of 0 leaves
	// the wait to ctx alone.
	provenSince(ctx context.Context, notBefore time.Time, bound time.Duration) (time.Time, error)
	// stale is closed while the master has gone half a lease without a
	// proof (nil: never).
	stale() <-chan struct{}
}

// raftAuthority is the leaseAuthority of a running cell.
type raftAuthority struct {
	cons  Consensus
	proof *leadershipProof
}

func (a raftAuthority) leads() bool { return a.cons.IsLeader() }

func (a raftAuthority) provenSince(ctx context.Context, notBefore time.Time, bound time.Duration) (time.Time, error) {
	return a.proof.sinceWithin(ctx, notBefore, bound)
}

func (a raftAuthority) stale() <-chan struct{} { return a.proof.staleSignal() }

func newSessions(clock Clock, ttl time.Duration, auth leaseAuthority, stats *masterStats, log *slog.Logger) *sessions {
	return &sessions{clock: clock, ttl: ttl, maxTTL: ttl, target: DefaultKeepAliveTarget, auth: auth, stats: stats, log: log,
		leases: map[uint64]*lease{}, byConn: map[uint64]int{}, overflowing: map[uint64]struct{}{},
		budget:     newEventBudget(DefaultLimits.EventBytes, DefaultLimits.EventBytesPerPrincipal),
		watchEvery: expiryPeriod(ttl), connParked: map[uint64]*parkedCall{},
		termCtx: context.Background(), kick: make(chan struct{}, 1)}
}

// lengthen lets leases grow under load up to maxTTL, to keep the
// sessions' KeepAlives under target per second (grantTTLLocked). Call it
// before the first term.
func (ss *sessions) lengthen(maxTTL time.Duration, target int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.maxTTL, ss.target = max(maxTTL, ss.ttl), max(target, 1)
}

// grantTTLLocked is the lease a KeepAlive grants now: the configured lease,
// lengthened under load, Chubby's answer to overload. A session calls about
// once per three quarters of its lease (each call is held until a quarter
// of it is left), so N sessions on lease L cost N/(0.75 L) KeepAlives a
// second; the lease is the shortest whole number of seconds that keeps
// them under the target, within [ttl, maxTTL]. Every lease a KeepAlive
// grants is therefore at most maxTTL, the bound a successor honours
// (start). ss.mu is held.
func (ss *sessions) grantTTLLocked() time.Duration {
	if ss.maxTTL <= ss.ttl {
		return ss.ttl
	}
	need := time.Duration(float64(len(ss.leases)) / (0.75 * float64(ss.target)) * float64(time.Second))
	need = (need + time.Second - 1).Truncate(time.Second)
	return min(max(need, ss.ttl), ss.maxTTL)
}

// grantTTL is grantTTLLocked for callers outside the lock (Stats).
func (ss *sessions) grantTTL() time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.grantTTLLocked()
}

// expiryPeriod is how often the expiry loop looks for leases that ran
// out: a twentieth of a lease, so a session ends at most 5 % late.
func expiryPeriod(ttl time.Duration) time.Duration {
	return max(ttl/20, 10*time.Millisecond)
}

// start begins a term of service at epoch: every session of the state
// (ids) gets the longest lease any master may grant (maxTTL, which is the
// lease itself unless leases lengthen under load) from now, since no
// earlier master can have granted more (docs/spec.md#fail-over), and a
// master-fail-over event; recovery lasts until each has acknowledged it or
// ended. It returns whether recovery is on.
func (ss *sessions) start(epoch uint64, ids []uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.active, ss.epoch = true, epoch
	ss.watching, ss.lastRan = false, time.Time{}
	ss.eventSeq = epoch << 40
	ss.leases, ss.byConn = map[uint64]*lease{}, map[uint64]int{}
	ss.budget.reset()
	ss.forgetOverflowsLocked()
	ss.pendingAck = map[uint64]bool{}
	end := ss.clock.Now().Add(ss.maxTTL)
	for _, id := range ids {
		l := newLease(end)
		l.failoverSeq = ss.queueForcedLocked(id, l, wire.Event{Kind: wire.EventMasterFailover})
		ss.leases[id] = l
		ss.pendingAck[id] = true
	}
	ss.recovering = len(ss.pendingAck) > 0
	ss.termCtx, ss.termEnd = context.WithCancel(context.Background())
	ss.termDone = make(chan struct{})
	ss.wg.Add(1)
	go ss.staleWatch(ss.termDone)
	return ss.recovering
}

// stop ends the term: every lease is forgotten and recovery ends. Parked
// KeepAlives are answered NotMaster (errStopped), and a held call still
// waiting for its proof of leadership gets it at once; wait waits for
// them and for the stale watch.
func (ss *sessions) stop() {
	ss.mu.Lock()
	ps := ss.unparkAllLocked(nil)
	if ss.termDone != nil {
		ss.termEnd()
		close(ss.termDone)
		ss.termDone = nil
	}
	ss.active = false
	ss.watching, ss.lastRan = false, time.Time{}
	ss.recovering, ss.pendingAck = false, nil
	ss.leases, ss.byConn = map[uint64]*lease{}, map[uint64]int{}
	ss.budget.reset()
	ss.forgetOverflowsLocked()
	ss.mu.Unlock()
	answerAll(ps, errStopped)
}

// wait waits, after stop, for the goroutines of the term's parked
// KeepAlives: the stale watch, and the replies being made (not for their
// writing, which is the transport's).
func (ss *sessions) wait() { ss.wg.Wait() }

// recovery reports whether the term is still in its KeepAlive-only
// fail-over phase, and how many sessions it waits for.
func (ss *sessions) recovery() (bool, int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.recovering, len(ss.pendingAck)
}

// count returns the number of leases held.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.leases)
}

// connSessions returns how many live sessions were created over conn.
func (ss *sessions) connSessions(conn uint64) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byConn[conn]
}

// created gives session, just created over conn (0 if none), a full lease
// if it has none yet, and counts it on conn. Outside a term it does
// nothing: the next master grants the lease.
func (ss *sessions) created(session, conn uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l, ok := ss.leases[session]
	if !ok && ss.active {
		l = newLease(ss.clock.Now().Add(ss.ttl))
		ss.leases[session] = l
	}
	if l != nil && !l.closed && l.conn == 0 && conn != 0 {
		l.conn = conn
		ss.byConn[conn]++
	}
}

// nextEventLocked issues an event sequence number. Numbers grow across
// masters (the epoch is in the high bits), so a client's acknowledgement
// of an old master's events never covers a new master's.
func (ss *sessions) nextEventLocked() uint64 {
	ss.eventSeq++
	return ss.eventSeq
}

// ackedLocked records that a session is done with the fail-over (it
// acknowledged its event, or it ended); the last one ends recovery.
func (ss *sessions) ackedLocked(session uint64) {
	if !ss.recovering || !ss.pendingAck[session] {
		return
	}
	delete(ss.pendingAck, session)
	if len(ss.pendingAck) == 0 {
		ss.recovering = false
		ss.log.Info("fail-over complete: every session acknowledged or expired", "epoch", ss.epoch)
	}
}

// keepAliveArgs is one KeepAlive call as the sessions part serves it.
type keepAliveArgs struct {
	session     uint64
	epoch       uint64 // the master's epoch the call is served at
	clientEpoch uint64 // the epoch the client's header names
	ack         uint64 // the highest event sequence the client acknowledges
	prompt      bool   // answer at once
	incarnation uint64 // the session incarnation the client's header names
	// admit is asked, holding the sessions' lock, when the session has no
	// lease: nil lets the call adopt the session (created just now, not
	// yet seen by the observer) with a fresh lease, an error ends the call.
	// It may read the state (whose lock comes after the sessions').
	admit func() error
	// call, when admit is nil, admits instead (call.admitKeepAlive): the
	// master's own KeepAlives are admitted so, without a closure
	// allocated for every call that is almost never asked.
	call *call
}

// admitted runs the call's admission (see keepAliveArgs.admit).
func (a *keepAliveArgs) admitted() error {
	if a.admit != nil {
		return a.admit()
	}
	return a.call.admitKeepAlive(a.session)
}

// keepAlive is the long poll of docs/spec.md#keepalive, for a caller that
// waits for its answer (Dispatch): keepAliveAsync, with ctx and stop
// ending the park. The transport parks a KeepAlive without a goroutine
// through keepAliveAsync itself.
func (ss *sessions) keepAlive(ctx context.Context, stop <-chan struct{}, a keepAliveArgs) (*wire.KeepAliveResponse, error) {
	type result struct {
		resp *wire.KeepAliveResponse
		err  error
	}
	ch := make(chan result, 1)
	p := ss.keepAliveAsync(a, 0, func(resp *wire.KeepAliveResponse, err error) { ch <- result{resp, err} })
	if p != nil {
		select {
		case r := <-ch:
			return r.resp, r.err
		case <-ctx.Done():
			ss.cancelParked(p, ctx.Err())
		case <-stop:
			ss.cancelParked(p, errStopped)
		}
	}
	r := <-ch // the park's end, or the answer already on its way
	return r.resp, r.err
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
		a.admit = nil // used; the parked call need not keep what it holds
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
	if !ss.auth.leads() {
		return nil, errStopped // never extend a lease once deposed
	}
	// Belief is not enough (leadership.go): the lease granted ends by the
	// start of a round of contact with a quorum plus one lease. A master
	// that gets no such round within an eighth of a lease (its Raft is
	// stuck or deposed; a healthy round takes milliseconds) answers
	// NotMaster while the client still has an eighth of its lease to
	// spare: it searches elsewhere without doubting its session (no
	// jeopardy), and abandons the calls it left at this master.
	// (Bounded by a pooled timer, not a context.WithTimeout, which would
	// cost a context, a timer and a channel on every KeepAlive.)
	proven, err := ss.auth.provenSince(ctx, ss.clock.Now().Add(-ss.ttl/10), ss.ttl/8)
	if err != nil {
		return nil, errStopped
	}
	return ss.reply(l, a, arrived, proven)
}

// arriveLocked is a KeepAlive's arrival: the lease is extended and the
// acknowledgement recorded. It returns until when the call may be held,
// and whether something is to be sent at once. ss.mu is held.
func (ss *sessions) arriveLocked(a keepAliveArgs, arrived time.Time) (l *lease, holdUntil time.Time, pending bool, err error) {
	l, ok := ss.leases[a.session]
	if !ok {
		if err := a.admitted(); err != nil {
			return nil, time.Time{}, false, err
		}
		l = newLease(arrived.Add(ss.ttl))
		ss.leases[a.session] = l
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
	if e := arrived.Add(ttl); e.After(l.end) {
		l.end = e
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
	if l.moved || a.call != nil && a.call.movedSince(a.session, a.incarnation) {
		// The session was resumed while the call was held (or between
		// its admission and its arrival): its process is no longer the
		// session's, and must not hear of a lease.
		return nil, movedErr(a.session)
	}
	if l.closed {
		return nil, wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", a.session)
	}
	ttl := ss.grantTTLLocked()
	if e := replied.Add(ttl); e.After(l.end) {
		l.end = e
	}
	granted := l.end
	if e := proven.Add(ttl); e.Before(granted) {
		granted = e
	}
	// The reply carries the oldest unacknowledged events, as many as fit a
	// bounded reply; acknowledgements are cumulative, so the rest follow
	// on the next calls. Every lease extension therefore travels with
	// every outstanding invalidation it could cover (invalidate.go).
	events := replyEvents(l.events)
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

// expirySlack is how long after a lease ends the master still waits
// before expiring the session: a quarter of a lease, at most a second
// (the delays it absorbs are a busy machine's, not the lease's). A client stops
// trusting its lease before the master's ends (driftMargin), so waiting
// longer can never let a client act on a lease the master has given up;
// it only lets the master serve a KeepAlive that a starved process (its
// network goroutines behind a crowd of others, while its timers still
// fire) read a little late, instead of expiring a client that did
// everything right. The cost: a departed client's locks are freed that
// much later.
func (ss *sessions) expirySlack() time.Duration { return min(ss.ttl/4, time.Second) }

// pastSlack reports whether l's session may be expired at now: its lease
// ended more than expirySlack ago. ss.mu is held.
func (ss *sessions) pastSlack(l *lease, now time.Time) bool {
	return l.end.Add(ss.expirySlack()).Before(now)
}

// expired returns the sessions whose lease and slack (expirySlack) ran
// out before now.
func (ss *sessions) expired(now time.Time) []uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []uint64
	for id, l := range ss.leases {
		if ss.pastSlack(l, now) && !l.closed {
			out = append(out, id)
		}
	}
	return out
}

// watch is the expiry loop's report: at now it starts waiting for its
// next tick (watching) or it woke and starts working (!watching). On
// waking, a stall is credited first, so no lease is found expired for it.
func (ss *sessions) watch(now time.Time, watching bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !watching {
		ss.creditStallLocked(now)
	}
	ss.watching = watching
	if watching {
		ss.lastRan = now
	}
}

// creditStallLocked is how expiry measures a client's silence, not the
// master's. While the expiry loop waits, the master runs at least every
// watchEvery (the loop's tick); finding at now that it last ran more than
// a period and stallMin ago means the master itself did not run (a long garbage
// collection, a starved or paused process), and neither did the
// KeepAlive handlers whose calls were waiting in its socket buffers. Every
// live lease is extended by the time lost beyond one period. Only the
// master's side grows; a client's view of its lease never does, so it
// still ends first.
func (ss *sessions) creditStallLocked(now time.Time) {
	if !ss.watching || ss.lastRan.IsZero() {
		return
	}
	if late := now.Sub(ss.lastRan) - ss.watchEvery; late > ss.stallMin() {
		n := 0
		for _, l := range ss.leases {
			if !l.closed {
				l.end = l.end.Add(late)
				n++
			}
		}
		ss.stalls++
		ss.log.Warn("the master did not run for a while: live leases extended by as much, so no session expires for the master's stall",
			"stalled", late.Round(time.Millisecond), "sessions", n)
	}
	if now.After(ss.lastRan) {
		ss.lastRan = now
	}
}

// stallMin is the shortest lateness credited as a stall: a quarter of a
// lease (at least two expiry periods). A KeepAlive is answered with a
// quarter of the lease to spare, so a shorter stall cannot make an honest
// session expire; crediting the scheduling delays of a busy machine would
// instead keep extending the lease of a client that is gone, and a
// fail-over's recovery, which waits for every session to answer or end,
// would wait on it for as long as the machine stayed busy.
func (ss *sessions) stallMin() time.Duration {
	return max(ss.watchEvery, ss.ttl/4)
}

// stallCount is the number of stalls credited.
func (ss *sessions) stallCount() uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.stalls
}

// drop forgets session's lease: the state no longer has the session. A
// KeepAlive parked on it is answered SessionExpired.
func (ss *sessions) drop(session uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if l := ss.leases[session]; l != nil {
		l.closed = true
		l.wakeLocked()
		ss.dropLocked(session, l)
	}
}

// dropLocked forgets a session's lease and its place in the
// per-connection count.
func (ss *sessions) dropLocked(id uint64, l *lease) {
	if l.conn != 0 {
		if ss.byConn[l.conn]--; ss.byConn[l.conn] <= 0 {
			delete(ss.byConn, l.conn)
		}
	}
	ss.releaseEventsLocked(l)
	l.overflowSeq = 0
	ss.noteOverflowLocked(id, l)
	delete(ss.leases, id)
}

// leaseLeft returns how much lease each of ids has left at now, for those
// that hold an open lease.
func (ss *sessions) leaseLeft(ids []uint64, now time.Time) map[uint64]time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make(map[uint64]time.Duration, len(ids))
	for _, id := range ids {
		if l := ss.leases[id]; ss.active && l != nil && !l.closed {
			out[id] = max(l.end.Sub(now), 0)
		}
	}
	return out
}

// observe applies handle events (notes, from the fan-out) and one entry's
// changes to the leases: handle events are numbered and queued, waking the
// parked KeepAlive (past a session's bound or a byte budget they are
// dropped into an overflow, queueHandleEventLocked); a session created
// gets a lease; a session closed ends its parked KeepAlive and its
// fail-over wait. It returns the sessions that ended, for the invalidator
// to forget (after this lock is released).
func (ss *sessions) observe(notes []sessionEvent, changes []fsm.Change) (ended []uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.active {
		for _, n := range notes {
			if l := ss.leases[n.session]; l != nil && !l.closed {
				ss.queueHandleEventLocked(n.session, l, n.ev)
			}
		}
	}
	for _, c := range changes {
		switch c.Kind {
		case fsm.ChangeSessionCreated:
			if _, ok := ss.leases[c.Session]; !ok && ss.active {
				ss.leases[c.Session] = newLease(ss.clock.Now().Add(ss.ttl))
			}
		case fsm.ChangeSessionResumed:
			// The old process's lease ends here, its parked KeepAlive
			// told the session moved; the new process starts with a
			// full lease of its own, and nothing cached (so the
			// invalidator forgets what the old one cached).
			if l, ok := ss.leases[c.Session]; ok {
				l.closed, l.moved = true, true
				l.wakeLocked()
				l.signalAckLocked()
				ended = append(ended, c.Session)
				ss.dropLocked(c.Session, l)
			}
			if ss.active {
				ss.leases[c.Session] = newLease(ss.clock.Now().Add(ss.ttl))
			}
		case fsm.ChangeSessionClosed:
			ss.ackedLocked(c.Session)
			if l, ok := ss.leases[c.Session]; ok {
				l.closed = true
				l.wakeLocked()
				l.signalAckLocked()
				ended = append(ended, c.Session)
				ss.dropLocked(c.Session, l)
			}
		}
	}
	return ended
}

// droppedEvents counts handle events not queued because a session's queue
// was full.
func (ss *sessions) droppedEvents() uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.dropped
}

// The sessions part's side of sessionLink (invalidate.go).

func (ss *sessions) cacheable(session, seq uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	return l != nil && !l.closed && l.heard && l.acked >= seq
}

func (ss *sessions) queueInvalidation(session uint64, name string) (*lease, uint64, time.Time, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	if l == nil || l.closed {
		return nil, 0, time.Time{}, false
	}
	seq := ss.queueForcedLocked(session, l, wire.Event{Kind: wire.EventInvalidate, Path: name})
	l.wakeLocked()
	return l, seq, l.end, true
}

func (ss *sessions) ackState(l *lease, seq uint64) (bool, bool, <-chan struct{}) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l.acked >= seq || l.closed, l.ignored > 0 && l.delivered >= seq, l.ackCh
}

func (c *call) createSession(ctx context.Context, req *wire.CreateSessionRequest) (*wire.CreateSessionResponse, error) {
	if len(req.ClientName) > 256 {
		return nil, wire.Errorf(wire.CodeBadRequest, "client name of %d bytes exceeds 256", len(req.ClientName))
	}
	if err := wire.CheckIdentity(req.Host, req.PID, req.Program); err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	unreserve, err := c.reserveSession(ctx, c.caller)
	if err != nil {
		return nil, err
	}
	defer unreserve() // after the lease below counts it on its connection
	res, err := c.apply(ctx, &fsm.Command{Client: req.ClientName, Payload: &fsm.CreateSessionArgs{Host: req.Host, PID: req.PID, Program: req.Program}})
	if err != nil {
		return nil, err
	}
	c.sess.created(res.Session, c.caller.Conn)
	return &wire.CreateSessionResponse{Session: res.Session, Epoch: c.epoch, LeaseMillis: c.cfg.LeaseTTL.Milliseconds(),
		ResumeSecret: c.sessionSecret(res.Session)}, nil
}

// keepAlive serves a KeepAlive through the sessions part. A session the
// part holds no lease for is adopted only if the state has it live and
// this replica still leads.
func (c *call) keepAlive(ctx context.Context, req *wire.KeepAliveRequest) (*wire.KeepAliveResponse, error) {
	return c.sess.keepAlive(ctx, c.stop, c.keepAliveArgs(req))
}

// keepAliveArgs is the call as the sessions part serves it.
func (c *call) keepAliveArgs(req *wire.KeepAliveRequest) keepAliveArgs {
	return keepAliveArgs{session: c.h.Session, epoch: c.epoch, clientEpoch: c.h.Epoch,
		ack: req.AckEvent, prompt: req.Prompt, incarnation: c.h.Incarnation, call: c}
}

// admitKeepAlive admits a KeepAlive of session id that has no lease (see
// keepAliveArgs.admit).
func (c *call) admitKeepAlive(id uint64) error {
	if !c.cons.IsLeader() {
		return errStopped
	}
	var live bool
	var applied uint64
	c.read(func(v fsm.View) {
		live = v.SessionExists(id)
		_, _, _, applied = v.Counts()
	})
	if id == 0 || !live {
		if id == 0 || id > applied {
			return wire.Errorf(wire.CodeUnknownSession, "session %d was never created in this cell", id)
		}
		return wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", id)
	}
	return nil
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
		size += 64 + len(evs[n].Path) + len(evs[n].Child) + len(evs[n].Reason) + len(evs[n].FromPrincipal)
		if n > 0 && size > maxReplyEventBytes {
			break
		}
		n++
	}
	return append([]wire.Event(nil), evs[:n]...)
}

func (c *call) closeSession(ctx context.Context) (*wire.Empty, error) {
	res, err := c.applyInvalidating(ctx, c.stop, &fsm.Command{Session: c.h.Session, Time: c.now(),
		Principal: c.caller.Principal, Admin: c.isAdmin(), Incarnation: c.h.Incarnation, Payload: &fsm.CloseSessionArgs{}})
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, resultErr(res)
}

// expireLoop expires sessions whose lease ran out, through Raft, so every
// replica releases their locks and deletes their ephemeral nodes (docs/spec.md#session-expiry).
//
// Expiry measures a client's silence, not the master's: the loop reports
// when it waits and when it wakes (sessions.watch), so a master that
// stalled for a lease credits the stall before expiring anyone, rather
// than expiring every session on waking, the honest ones whose
// KeepAlives were waiting in its socket buffers included.
func (s *Server) expireLoop(stop <-chan struct{}) {
	defer s.wg.Done()
	every := expiryPeriod(s.cfg.LeaseTTL)
	for {
		s.sess.watch(s.cfg.Clock.Now(), true)
		tick, stopTick := after(s.cfg.Clock, every)
		select {
		case <-stop:
			stopTick()
			return
		case <-tick:
		}
		now := s.cfg.Clock.Now()
		s.sess.watch(now, false)
		for _, id := range s.sess.expired(now) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := s.applyInvalidating(ctx, stop, &fsm.Command{Session: id, Time: s.now(), Payload: &fsm.CloseSessionArgs{Expired: true}})
			cancel()
			switch {
			case err != nil:
				s.log.Warn("session expiry not applied; will retry", "session", id, "err", err)
			case res.Err != nil: // the state has no such session
				s.sess.drop(id)
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
// each (memory), what each holds and the identity its client declared
// (replicated state): every session to the admin, to anyone else only the
// sessions of its own principal, and Total counts only what the caller
// may see. Others' sessions would name their principals, clients, hosts
// and the locks they hold. The list stops short of MaxListedSessions when
// it would outgrow listSessionsBytes (Total still counts them all).
func (c *call) listSessions(ctx context.Context) (*wire.ListSessionsResponse, error) {
	if err := c.verifyRead(ctx); err != nil {
		return nil, err
	}
	var views []fsm.SessionView
	var ids []fsm.Identity
	c.read(func(v fsm.View) {
		views = v.Sessions()
		if !c.isAdmin() {
			own := views[:0]
			for _, sv := range views {
				if sv.Principal == c.caller.Principal {
					own = append(own, sv)
				}
			}
			views = own
		}
		ids = make([]fsm.Identity, min(len(views), wire.MaxListedSessions))
		for i := range ids {
			ids[i], _ = v.SessionIdentity(views[i].ID)
		}
	})
	now := c.cfg.Clock.Now()
	out := &wire.ListSessionsResponse{Total: uint64(len(views))}
	views = views[:len(ids)]
	sids := make([]uint64, len(views))
	for i, v := range views {
		sids[i] = v.ID
	}
	left := c.sess.leaseLeft(sids, now)
	out.Sessions = sessionInfos(views, ids, left, listSessionsBytes)
	return out, nil
}

// sessionInfos turns listed sessions, with their identities (ids[i] is
// views[i]'s) and lease left, into their wire form, in order, until they
// would add up to more than budget bytes (sessionInfoBytes). The first is
// always kept.
func sessionInfos(views []fsm.SessionView, ids []fsm.Identity, left map[uint64]time.Duration, budget int) []wire.SessionInfo {
	out := make([]wire.SessionInfo, 0, len(views))
	for i, v := range views {
		size := sessionInfoBytes(v, ids[i])
		if size > budget && len(out) > 0 {
			break
		}
		budget -= size
		out = append(out, wire.SessionInfo{ID: v.ID, Client: v.Client, Principal: v.Principal, Created: v.Created,
			Handles: uint32(v.Handles), Locks: v.Locks, LeaseMillis: left[v.ID].Milliseconds(),
			Host: ids[i].Host, PID: ids[i].PID, Program: ids[i].Program})
	}
	return out
}

// listSessionsBytes bounds what a ListSessions reply's sessions may add
// up to (sessionInfoBytes, an over-estimate of their encoding), well
// inside a frame: MaxListedSessions sessions that declared the longest
// hosts and programs would not fit one.
const listSessionsBytes = wire.MaxFrameSize / 2

// sessionInfoBytes over-estimates the encoding of one listed session.
func sessionInfoBytes(v fsm.SessionView, id fsm.Identity) int {
	n := 64 + len(v.Client) + len(v.Principal) + len(id.Host) + len(id.Program)
	for _, l := range v.Locks {
		n += len(l) + 4
	}
	return n
}
