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
	batch  *heldBatch    // the proxy's batch holding the session's KeepAlive (heldbatch.go)
	closed bool
	// moved: closed because another process resumed the session; the
	// KeepAlives parked on it are told so (wire.SessionMovedMsg).
	moved bool
	// idle: draining for idleness, or closed so (idle.go): KeepAlives
	// extend it no more and are told so (wire.SessionIdleClosedMsg).
	idle   bool
	events []wire.Event
	// failoverSeq is the sequence of this master's fail-over event for the
	// session (0 if it had none).
	failoverSeq uint64
	// acked is the highest event sequence the session acknowledged;
	// ackCh is closed whenever acked grows or the lease ends, and made
	// anew only when a writer waits on it (ackChLocked): most sessions
	// never have a writer waiting, and a channel a session is 96 bytes.
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
	// proxyCache: a proxy's cache session (sessions.cacheSession), never
	// closed for idleness.
	proxyCache bool
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
	return &lease{end: end}
}

// signalAckLocked wakes writers waiting for this session's acknowledgement.
func (l *lease) signalAckLocked() {
	if l.ackCh != nil {
		close(l.ackCh)
		l.ackCh = nil
	}
}

// ackChLocked is the channel signalAckLocked closes next, for a writer
// to wait on.
func (l *lease) ackChLocked() <-chan struct{} {
	if l.ackCh == nil {
		l.ackCh = make(chan struct{})
	}
	return l.ackCh
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
	if l.batch != nil {
		l.batch.wakeLocked(nil)
	}
}

// sessions is the sessions-and-leases part: the lease table, each
// session's event queue and acknowledgements, KeepAlive parking, expiry,
// fail-over recovery and event numbering, under one mutex of its own.
//
// Its mu is fourth in the lock order (lockorder.go), which says what it
// may call holding it.
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
	// known is what the lease table asks of the replicated state, holding
	// mu (the state's lock comes after it): the master's parts, set by
	// New; until then knownNone.
	known leaseState
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
	// idleGone holds the sessions this master closed for idleness, and
	// when, for idleGoneKeep (idle.go): their calls are told so.
	idleGone map[uint64]time.Time

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
	// held are the proxies' batches held now (heldbatch.go).
	held     map[*heldBatch]struct{}
	termCtx  context.Context
	termEnd  context.CancelFunc
	termDone chan struct{}
	kick     chan struct{}
	wg       sync.WaitGroup
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
		leases: map[uint64]*lease{}, byConn: map[uint64]int{}, overflowing: map[uint64]struct{}{}, idleGone: map[uint64]time.Time{},
		budget:     newEventBudget(DefaultLimits.EventBytes, DefaultLimits.EventBytesPerPrincipal),
		watchEvery: expiryPeriod(ttl), connParked: map[uint64]*parkedCall{}, held: map[*heldBatch]struct{}{},
		termCtx: context.Background(), kick: make(chan struct{}, 1), known: knownNone{}}
}

// leaseState is what the lease table asks of the replicated state about
// a KeepAlive's session (parts is one, sessionendpoints.go).
type leaseState interface {
	// adopt is asked when the session has no lease: nil lets the call
	// adopt it (created just now, not yet seen by the observer) with a
	// fresh lease, an error ends the call.
	adopt(session uint64) error
	// movedSince reports whether the session was resumed by another
	// process since the incarnation the call named.
	movedSince(session, incarnation uint64) bool
}

// knownNone is the leaseState of a sessions part that knows no state: it
// adopts nothing and sees no session move.
type knownNone struct{}

func (knownNone) adopt(session uint64) error {
	return wire.Errorf(wire.CodeSessionExpired, "session %d has no lease here", session)
}

func (knownNone) movedSince(uint64, uint64) bool { return false }

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
	ss.wakeHeldLocked(nil, errStopped)
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

// expirySlack is how long after a lease ends the master still waits
// before expiring the session: a quarter of a lease, at most a second
// (the delays it absorbs are a busy machine's, not the lease's). A client stops
// trusting its lease before the master's ends (wire.LeaseDriftMargin), so waiting
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
				if l.idle {
					ss.idleGone[c.Session] = ss.clock.Now()
				}
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

// noteRelayedLocked records that a batch naming the proxy cache session
// cache told a client a lease to end: the cache session's lease is made
// to end no sooner (proxycache.go says why). ss.mu is held.
func (ss *sessions) noteRelayedLocked(cache uint64, end time.Time) {
	if l := ss.leases[cache]; l != nil && !l.closed && end.After(l.end) {
		l.end = end
	}
}

// cacheSession reports whether session holds a lease that has not ended
// nor is draining, and marks it a proxy's cache session (proxycache.go),
// which is never closed for idleness: it makes no calls of its own, and
// its proxy's clients depend on it.
func (ss *sessions) cacheSession(session uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	if l == nil || l.closed || l.idle {
		return false
	}
	l.proxyCache = true
	return true
}

// pendingEventSeq is the newest event queued for session and not
// acknowledged (0: none).
func (ss *sessions) pendingEventSeq(session uint64) uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if l := ss.leases[session]; l != nil && len(l.events) > 0 {
		return l.events[len(l.events)-1].Seq
	}
	return 0
}

func (ss *sessions) ackState(l *lease, seq uint64) (bool, bool, <-chan struct{}) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l.acked >= seq || l.closed, l.ignored > 0 && l.delivered >= seq, l.ackChLocked()
}

// expireLoop expires sessions whose lease ran out, through Raft, so every
// replica releases their locks and deletes their ephemeral nodes (docs/spec.md#session-expiry),
// and closes idle sessions (closeIdle, idle.go).
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
			s.closeExpired(id, stop) // an idle session's drained lease too (idle.go)
			select {
			case <-stop:
				return
			default:
			}
		}
		// Expiries first: they free locks others wait for; an idle
		// session holds nothing (idle.go).
		s.closeIdle()
	}
}
