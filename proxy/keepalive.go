package proxy

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/wire"
)

// The KeepAlive coalescer. A client's KeepAlive is answered here, from
// the leases the master granted in BatchKeepAlives; the master sees a
// few batch calls per proxy instead of one KeepAlive per session.
//
// Safety rests on three rules:
//
//   - A client is never told a lease longer than the master granted:
//     the proxy's lease end for a session is the batch's send time plus
//     the master's held and lease times, less the client's own drift
//     margin (this leg's clocks may drift too); a client is told what is
//     left of it measured from when its call arrived, so its own end
//     (from when it sent) comes earlier still.
//   - An event reaches the client before any lease granted after it: a
//     session whose events the client has not acknowledged goes to the
//     master no more (its lease is not extended) until the client's
//     acknowledgement comes, which the next batch then carries. The
//     master's rule (every extension travels with every outstanding
//     invalidation) holds end to end: a lease the proxy relays was
//     granted with the events the proxy relays with it.
//   - A session is kept only while its client is: the proxy asks the
//     master to extend a lease only while the client has a KeepAlive
//     waiting here or was heard from within half a lease (its next one
//     may take a moment, longer while it searches after a NotMaster). A
//     client that dies is forgotten, but a batch or two may still carry
//     its session: each entry says how long ago its client last called
//     (SilentMillis), and the master extends the lease no further than
//     that call could have earned directly (seven quarters of a lease
//     after it), so a silent client's session expires when it would
//     have without the proxy.

// kaSession is one session's KeepAlive state at the proxy.
type kaSession struct {
	id, incarnation uint64
	principal       string
	clientEpoch     uint64 // the master epoch the client last named
	clientAck       uint64 // the highest event the client acknowledged
	delivered       uint64 // the highest event the master gave the proxy
	events          []wire.Event
	sentToClient    uint64        // the highest event handed to the client
	redelivered     bool          // events were sent again at once, once
	told            bool          // a client call was answered with a lease here
	toldEnd         time.Time     // the lease end the client was last told
	toldFor         time.Duration // how long that lease was, when told
	leaseEnd        time.Time
	epoch           uint64 // the master's epoch of leaseEnd
	parked          *clientCall
	lastHeard       time.Time // a call arrived or was answered
	lastCall        time.Time // the client's latest call arrived
	queued          bool
	atMaster        int         // batches carrying it now
	gone            *wire.Error // the session ended: what its client is told
	// The read cache's hold on the session (readcache.go). cached counts
	// the names the cache served it as cacheable that are not yet
	// reported to the master with their invalidation and accepted;
	// reporting, those of them in a report not yet accepted. gatedEnd is
	// a lease a batch brought that waits to be relayed until the cache
	// session's events up to gatedSeq are taken in and no report of the
	// session is outstanding (batch answers' CacheSeq). fromCache: the
	// lease end came from a batch naming the current cache session;
	// covered: so did the lease the client was last told, which the
	// master's cache session then outlives.
	cached, reporting int
	gatedEnd          time.Time
	gatedSeq          uint64
	gatedFrom         uint64 // the cache session the held-back lease's batch named
	fromCache         bool
	covered           bool
	// leaseSeq is the CacheSeq of the batch answer leaseEnd came from;
	// toldSeq, that of the lease the client was last told. The client
	// may be served cacheable only once the cache has taken in its
	// session's events up to toldSeq: an invalidation queued before that
	// lease was granted does not wait it out.
	leaseSeq, toldSeq uint64
}

// clientCall is a client's KeepAlive parked at the proxy.
type clientCall struct {
	s       *kaSession
	conn    uint64
	arrived time.Time
	prompt  bool
	timer   *time.Timer
	done    func(resp any, epoch uint64, err error)
}

// answer is a parked call's answer, made under the keeper's lock and
// handed over outside it.
type answer struct {
	done  func(any, uint64, error)
	resp  any
	epoch uint64
	err   error
}

func deliver(as []answer) {
	for _, a := range as {
		a.done(a.resp, a.epoch, a.err)
	}
}

// keeper holds the sessions whose KeepAlives the proxy answers, and
// sends their batches. Its lock is taken with no other; no call is made
// and no answer delivered while it is held.
type keeper struct {
	up  *upstream
	m   *metrics
	log *slog.Logger
	ctx context.Context

	mu     sync.Mutex
	sess   map[uint64]*kaSession
	byConn map[uint64]map[*clientCall]struct{}
	want   []*kaSession // to be sent in the next batch
	ttl    time.Duration
	// ttlKnown: ttl is the master's, from a batch's answer.
	ttlKnown bool
	// batches counts the batch calls made (for tests and metrics).
	batches, failed uint64
	// stale counts client KeepAlives answered NotMaster for want of a
	// fresh lease from the master.
	stale uint64
	kick  chan struct{}
	// inFlight counts the batch calls in flight.
	inFlight atomic.Int64
	// tickPhase shifts this proxy's half-lease ticks (holdFor), drawn at
	// start.
	tickPhase int64
	// rc is the proxy's read cache (nil: it caches nothing); gated holds
	// the sessions with a lease waiting for it (kaSession.gatedEnd).
	rc    *readCache
	gated map[*kaSession]struct{}
}

// defaultTTL is the lease the proxy assumes until the master tells it.
const defaultTTL = 12 * time.Second

func newKeeper(ctx context.Context, up *upstream, m *metrics, log *slog.Logger) *keeper {
	return &keeper{up: up, m: m, log: log, ctx: ctx, sess: map[uint64]*kaSession{}, byConn: map[uint64]map[*clientCall]struct{}{},
		ttl: defaultTTL, kick: make(chan struct{}, 1), tickPhase: rand.Int64N(int64(time.Hour)), gated: map[*kaSession]struct{}{}}
}

// keepAlive serves a client's KeepAlive: answered at once when it has
// something to say, else parked until an event, a quarter of its lease
// left, or its client leaving.
func (k *keeper) keepAlive(principal string, conn uint64, h *wire.Header, body []byte, done func(any, uint64, error)) func() {
	var req wire.KeepAliveRequest
	if err := wire.Decode(body, &req); err != nil {
		done(nil, 0, err)
		return nil
	}
	if h.Session == 0 {
		done(nil, 0, wire.Errorf(wire.CodeBadRequest, "a KeepAlive names no session"))
		return nil
	}
	now := time.Now()
	var out []answer
	k.mu.Lock()
	s := k.sess[h.Session]
	if s != nil && (s.principal != principal || s.incarnation != h.Incarnation) {
		if s.principal != principal {
			k.mu.Unlock()
			done(nil, 0, wire.Errorf(wire.CodePermission, "session %d belongs to another principal", h.Session))
			return nil
		}
		// Another incarnation (the session was resumed): start afresh;
		// the master judges which process the session is now.
		out = k.forgetLocked(s, out, wire.Errorf(wire.CodeSessionExpired, "%s: session %d was resumed elsewhere", wire.SessionMovedMsg, s.id))
		s = nil
	}
	if s == nil {
		s = &kaSession{id: h.Session, incarnation: h.Incarnation, principal: principal}
		k.sess[h.Session] = s
	}
	s.clientEpoch = h.Epoch
	s.lastHeard, s.lastCall = now, now
	if req.AckEvent > s.clientAck {
		s.clientAck = req.AckEvent
		n := 0
		for n < len(s.events) && s.events[n].Seq <= s.clientAck {
			n++
		}
		s.events = append(s.events[:0:0], s.events[n:]...)
		s.redelivered = false
	}
	if s.parked != nil {
		// Its client sent another: the first is over.
		out = append(out, k.unparkLocked(s.parked, nil, 0, wire.Errorf(wire.CodeCanceled, "superseded by a newer KeepAlive")))
	}
	c := &clientCall{s: s, conn: conn, arrived: now, prompt: req.Prompt, done: done}
	s.parked = c
	if conn != 0 {
		m := k.byConn[conn]
		if m == nil {
			m = map[*clientCall]struct{}{}
			k.byConn[conn] = m
		}
		m[c] = struct{}{}
	}
	k.queueIfDueLocked(s)
	answered := false
	switch {
	case s.gone != nil:
		out = k.forgetLocked(s, out, s.gone)
		answered = true
	case len(s.events) > 0 && (s.events[len(s.events)-1].Seq > s.sentToClient || !s.redelivered) && k.tellableLocked(s, now):
		if s.events[len(s.events)-1].Seq <= s.sentToClient {
			s.redelivered = true
		}
		out = append(out, k.replyLocked(c, now))
		answered = true
	case req.Prompt && k.freshLocked(s, now):
		out = append(out, k.replyLocked(c, now))
		answered = true
	default:
		k.armLocked(c, now)
	}
	k.mu.Unlock()
	deliver(out)
	if answered {
		return nil
	}
	return func() { k.cancel(c) }
}

// freshLocked reports whether s's lease from the master has at least a
// quarter lease to run: enough to tell a client.
func (k *keeper) freshLocked(s *kaSession, now time.Time) bool {
	return !s.leaseEnd.IsZero() && s.leaseEnd.Sub(now) >= k.ttl/4
}

// tellableLocked reports whether s's lease from the master has at least
// an eighth of a lease to run: any shorter, and the client, which counts
// its lease from when it sent its call less a drift margin, would hold
// one that has ended, and call again at once. Every answer with a lease
// tells at least this much; with less the call waits for a batch or
// hears NotMaster (holdOver), as from a master that cannot prove it
// leads.
func (k *keeper) tellableLocked(s *kaSession, now time.Time) bool {
	return !s.leaseEnd.IsZero() && s.leaseEnd.Sub(now) >= k.ttl/8
}

// batchDue is when a batch of ss built at now must have been answered:
// the earliest lease end the master gave any of them, as a client's
// KeepAlive must be answered within its lease, but never sooner than a
// search's try (wire.SearchTry), so one session near its end does not cut
// the others' batch short. With no lease running among them (the
// master lost, or sessions the proxy has not renewed yet), a try.
func batchDue(ss []*kaSession, now time.Time, ttl time.Duration) time.Time {
	var earliest time.Time
	for _, s := range ss {
		if s.leaseEnd.After(now) && (earliest.IsZero() || s.leaseEnd.Before(earliest)) {
			earliest = s.leaseEnd
		}
	}
	return dueBy(earliest, now, ttl)
}

// dueBy is when a batch sent at now for a lease ending at end (zero: none)
// must have been answered: that end, but never sooner than a search's try.
func dueBy(end, now time.Time, ttl time.Duration) time.Time {
	if try := now.Add(wire.SearchTry(ttl)); end.Before(try) {
		return try
	}
	return end
}

// armLocked sets c's hold: three quarters of a lease after it arrived (a
// prompt call: an eighth), as the master holds a KeepAlive, unless its
// client's lease runs low first; a session never answered here waits
// for its first batch's answer within that.
//
// The client's lease is the one it was last told (toldEnd), not the
// proxy's: a call must be answered a quarter of a lease before the
// client's own end, with the longer lease a batch brought meanwhile,
// less a random part of another quarter. Every session of a batch shares
// one lease end, and a proxy answering thousands of clients in the same
// instant makes them all call again in the next (a herd that fills the
// client port's caps on streams answered and not yet closed). A client
// already told the lease end the proxy has gains nothing from hearing
// it again: its call waits for the next batch (send re-arms it) until
// an eighth of its lease before the end, where holdOver tells it
// NotMaster; answering it at once would have it call again at once, in
// a loop, until the batch came back.
func (k *keeper) armLocked(c *clientCall, now time.Time) {
	c.timer = time.AfterFunc(max(k.holdEndLocked(c).Sub(now), 0), func() { k.holdOver(c) })
}

// holdEndLocked is when c's hold ends (armLocked says why).
func (k *keeper) holdEndLocked(c *clientCall) time.Time {
	until := c.arrived.Add(k.ttl - k.ttl/4)
	if c.prompt {
		until = c.arrived.Add(k.ttl / 8)
	}
	if told, e := c.s.toldEnd, c.s.leaseEnd; !told.IsZero() {
		// At most half a lease before the told end: a batch every half
		// lease brings the next lease end by then, so the spread never
		// tells a client the lease it has.
		due := told.Add(-k.ttl/4 - rand.N(k.ttl/4+1))
		if !e.After(told) {
			// An eighth of the lease the client was told, which may be
			// shorter than the master's now: a session created with the
			// cell's base lease while leases lengthen under load would
			// otherwise be told NotMaster most of its lease early.
			due = told.Add(-min(k.ttl, c.s.toldFor) / 8)
		}
		if due.Before(until) {
			until = due
		}
	}
	return until
}

// rearmLocked sets c's hold again after its session's lease grew: a call
// waiting for a batch may now be answered.
func (k *keeper) rearmLocked(c *clientCall, now time.Time) {
	if c.timer != nil && !c.timer.Stop() {
		return // firing now: holdOver answers it with the new lease
	}
	k.armLocked(c, now)
}

// holdOver ends c's hold: the client gets its lease if the proxy has a
// fresh one or one longer than the client's, and NotMaster otherwise
// (the proxy lost the master: the client searches elsewhere, as from a
// master that cannot prove it leads, and goes into jeopardy when it
// finds none).
func (k *keeper) holdOver(c *clientCall) {
	now := time.Now()
	k.mu.Lock()
	if c.s.parked != c {
		k.mu.Unlock()
		return
	}
	var a answer
	if k.freshLocked(c.s, now) || (c.s.leaseEnd.After(c.s.toldEnd) && k.tellableLocked(c.s, now)) {
		// Fresh, or at least longer than the lease its client has: a
		// lease lengthening under load raises the quarter lease while
		// the batch bringing the next is on its way, and NotMaster
		// would send a client in good standing searching. A client
		// told it waits for a newer one (armLocked): no loop.
		a = k.replyLocked(c, now)
	} else {
		k.stale++
		k.m.kaNoLease.Inc()
		k.log.Debug("proxy: KeepAlive answered NotMaster: no fresh lease", "session", c.s.id, "lease_left", c.s.leaseEnd.Sub(now),
			"told_left", c.s.toldEnd.Sub(now), "told_for", c.s.toldFor, "ttl", k.ttl, "held", now.Sub(c.arrived), "at_master", c.s.atMaster)
		a = k.unparkLocked(c, nil, 0, wire.Errorf(wire.CodeNotMaster, "proxy: no lease from the master for session %d", c.s.id))
	}
	k.mu.Unlock()
	a.done(a.resp, a.epoch, a.err)
}

// cancel ends c's hold for a client that left it.
func (k *keeper) cancel(c *clientCall) {
	k.mu.Lock()
	if c.s.parked != c {
		k.mu.Unlock()
		return
	}
	a := k.unparkLocked(c, nil, 0, wire.Errorf(wire.CodeCanceled, "the client left the call"))
	k.mu.Unlock()
	a.done(a.resp, a.epoch, a.err)
}

// connClosed ends the calls parked over a client connection that closed.
func (k *keeper) connClosed(conn uint64) {
	k.mu.Lock()
	var out []answer
	for c := range k.byConn[conn] {
		out = append(out, k.unparkLocked(c, nil, 0, wire.Errorf(wire.CodeCanceled, "the connection closed")))
	}
	delete(k.byConn, conn)
	k.mu.Unlock()
	deliver(out)
}

// unparkLocked takes c off its session and connection and returns its
// answer.
func (k *keeper) unparkLocked(c *clientCall, resp any, epoch uint64, err error) answer {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.s.parked == c {
		c.s.parked = nil
	}
	if m := k.byConn[c.conn]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(k.byConn, c.conn)
		}
	}
	return answer{done: c.done, resp: resp, epoch: epoch, err: err}
}

// replyLocked answers c with the session's lease and the events its
// client has not acknowledged.
func (k *keeper) replyLocked(c *clientCall, now time.Time) answer {
	s := c.s
	s.lastHeard = now
	s.told = true
	k.m.kaLease.Inc()
	resp := &wire.KeepAliveResponse{Epoch: s.epoch, HeldMillis: now.Sub(c.arrived).Milliseconds()}
	if k.rc != nil {
		// The client drops what another instance's cache served it
		// before it adopts this lease (wire.KeepAliveResponse.Proxy).
		resp.Proxy = k.rc.instance.Load()
	}
	if left := s.leaseEnd.Sub(now); left > 0 {
		resp.LeaseMillis = left.Milliseconds() // rounded down: never longer
		s.toldEnd, s.toldFor = s.leaseEnd, left
		s.covered, s.toldSeq = s.fromCache, s.leaseSeq
	}
	if len(s.events) > 0 {
		resp.Events = wire.ReplyEvents(s.events, wire.MaxReplyEventBytes)
		s.sentToClient = max(s.sentToClient, resp.Events[len(resp.Events)-1].Seq)
	}
	return k.unparkLocked(c, resp, s.epoch, nil)
}

// forgetLocked drops s (its session ended, or was resumed elsewhere): a
// call parked on it is answered err.
func (k *keeper) forgetLocked(s *kaSession, out []answer, err *wire.Error) []answer {
	k.log.Debug("proxy: session forgotten", "session", s.id, "err", err)
	if s.parked != nil {
		k.m.kaEnded.Inc()
		out = append(out, k.unparkLocked(s.parked, nil, 0, err))
	}
	if k.sess[s.id] == s {
		delete(k.sess, s.id)
	}
	s.gone = err // a batch still carrying it ignores it
	return out
}

// aliveLocked reports whether s's client is still there: it has a call
// parked here, or was heard from (a call arrived or was answered) within
// half a lease.
func (k *keeper) aliveLocked(s *kaSession, now time.Time) bool {
	return s.parked != nil || now.Sub(s.lastHeard) < k.ttl/2
}

// queueIfDueLocked puts s in the next batch when its lease is to be
// extended: it is alive, not ended, not already on its way, and its
// client has acknowledged every event the master sent it, or cannot
// have them yet: they go to a client only with a lease it can use
// (tellableLocked), so a session whose lease has run out with events
// unacknowledged is sent with the acknowledgement its client gave. The
// master sends the unacknowledged events again with the new lease, and
// the client gets them with it, applying them before adopting it.
// Waiting for an acknowledgement that cannot come would lose the
// session at the next fail-over.
func (k *keeper) queueIfDueLocked(s *kaSession) {
	if s.queued || s.atMaster > 0 || s.gone != nil || k.sess[s.id] != s {
		return
	}
	if s.clientAck < s.delivered && k.tellableLocked(s, time.Now()) {
		return
	}
	s.queued = true
	k.want = append(k.want, s)
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// run sends the batches until ctx ends: whatever is queued goes, in
// batches of at most wire.MaxBatchKeepAlive sessions, a moment after the
// first is queued (so sessions queued together go together).
func (k *keeper) run() {
	sweep := time.NewTicker(time.Second)
	defer sweep.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-sweep.C:
			k.sweep()
			continue
		case <-k.kick:
		}
		// Gather what arrives together: a moment, or, with many batches
		// held at the master already, up to a second, so that sessions
		// arriving one by one (a burst of new clients) go in few
		// batches: the master admits at most 256 calls without a session
		// in flight on the proxy's connection (the batches among them).
		gather := 2 * time.Millisecond
		if k.inFlight.Load() >= manyBatches {
			gather = time.Second
		}
		select {
		case <-k.ctx.Done():
			return
		case <-time.After(gather):
		}
		k.mu.Lock()
		want := k.want
		k.want = nil
		for _, s := range want {
			s.queued = false
			s.atMaster++
		}
		k.mu.Unlock()
		for len(want) > 0 {
			n := min(len(want), wire.MaxBatchKeepAlive)
			go k.send(want[:n:n])
			want = want[n:]
		}
	}
}

// sweep forgets the sessions whose clients are gone and that no batch
// carries.
func (k *keeper) sweep() {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, s := range k.sess {
		if !s.queued && s.atMaster == 0 && s.parked == nil && now.Sub(s.lastHeard) > 2*k.ttl {
			delete(k.sess, id)
		}
	}
}

// holdFor is how long the master may hold a batch sent now: to the next
// half-lease tick of the proxy's clock, so batches sent at different
// times come back together and go out again as few. Each proxy's ticks
// have a phase of its own (tickPhase): proxies ticking together would
// bring the master all their batches, and their clients all their
// answers, in the same instants.
func (k *keeper) holdFor(now time.Time, ttl time.Duration) time.Duration {
	period := ttl / 2
	hold := period - time.Duration((now.UnixNano()+k.tickPhase)%int64(period))
	if hold < period/4 {
		hold += period
	}
	return hold
}

// holdUntilNeeded is holdFor, cut short so that the batch comes back
// before a client needs the newer lease only it can bring: a quarter
// lease before the earliest lease end told to a client that has heard
// the proxy's latest lease (toldFirst; zero: none), whose call waits for
// a newer lease until an eighth before that end (armLocked), and at
// least a millisecond (HoldMillis 0 would mean no bound). In the steady
// state the cut never bites (such a client was told a lease from the last
// batch's answer, three quarters of a lease beyond the next). It bites
// for a session created with the cell's base lease while the master
// grants longer ones (leases lengthen under load): held to the next
// tick, up to five eighths of the longer lease, its first batch came
// back after its client had been told NotMaster.
func (k *keeper) holdUntilNeeded(now time.Time, ttl time.Duration, toldFirst time.Time) time.Duration {
	hold := k.holdFor(now, ttl)
	if !toldFirst.IsZero() {
		hold = min(hold, toldFirst.Sub(now)-ttl/4)
	}
	return max(hold, time.Millisecond)
}

// silentMillis is how long before now the client last called, rounded
// up: the master's ceiling on its lease is never later than the call's
// arrival here warrants.
func silentMillis(now, lastCall time.Time) int64 {
	if lastCall.IsZero() {
		return 0
	}
	d := now.Sub(lastCall)
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// manyBatches is how many batches in flight make the sender gather for a
// second rather than a moment.
const manyBatches = 32

// send makes one batch call for ss and takes its answers in.
func (k *keeper) send(ss []*kaSession) {
	k.inFlight.Add(1)
	defer k.inFlight.Add(-1)
	k.mu.Lock()
	req := &wire.BatchKeepAliveRequest{Entries: make([]wire.BatchKeepAliveEntry, len(ss))}
	built := time.Now()
	// The earliest lease end told to a client that has heard the
	// proxy's latest lease already: only this batch can bring it a newer.
	var toldFirst time.Time
	for i, s := range ss {
		req.Entries[i] = wire.BatchKeepAliveEntry{Session: s.id, Incarnation: s.incarnation, Epoch: s.clientEpoch,
			AckEvent: s.clientAck, Principal: s.principal, SilentMillis: silentMillis(built, s.lastCall)}
		if told := s.toldEnd; !told.IsZero() && !s.leaseEnd.After(told) && (toldFirst.IsZero() || told.Before(toldFirst)) {
			toldFirst = told
		}
	}
	ttl := k.ttl
	due := batchDue(ss, built, ttl)
	k.batches++
	k.mu.Unlock()
	if k.rc != nil {
		req.CacheSession = k.rc.sessionID.Load()
	}
	k.m.batches.Inc()
	k.m.batchSessions.Observe(float64(len(ss)))
	sent := time.Now()
	// Held for less than the time to its deadline, with an eighth of a
	// lease to spare for the way back.
	req.HoldMillis = max(min(k.holdUntilNeeded(sent, ttl, toldFirst), due.Sub(sent)-ttl/8), time.Millisecond).Milliseconds()
	var resp wire.BatchKeepAliveResponse
	ctx, cancel := context.WithDeadline(k.ctx, due)
	err := k.up.callDecoded(ctx, &wire.Header{Method: wire.MethodBatchKeepAlive}, req, &resp)
	cancel()
	if err != nil && req.CacheSession != 0 && isCacheSessionGone(err) {
		// The cache session is gone (readcache.go): a new one, and
		// this batch again without it.
		k.rc.lost(req.CacheSession)
	}
	now := time.Now()
	var out []answer
	k.mu.Lock()
	if err != nil || len(resp.Results) != len(ss) {
		k.failed++
		k.m.batchFailures.Inc()
		if errors.Is(err, context.DeadlineExceeded) && k.ctx.Err() == nil {
			k.log.Info("proxy: no answer to a batch KeepAlive by its sessions' lease end: the master is frozen or cut off; searching the peers afresh",
				"sessions", len(ss), "waited", now.Sub(sent))
		} else {
			k.log.Info("proxy: batch KeepAlive failed", "sessions", len(ss), "err", err, "results", len(resp.Results))
		}
		for _, s := range ss {
			s.atMaster--
		}
		k.mu.Unlock()
		if k.ctx.Err() != nil {
			return
		}
		// Again after a pause, those still alive: the master may be
		// between terms. Their clients' holds end meanwhile.
		time.AfterFunc(50*time.Millisecond+rand.N(100*time.Millisecond), func() {
			now := time.Now()
			k.mu.Lock()
			for _, s := range ss {
				if k.aliveLocked(s, now) {
					k.queueIfDueLocked(s)
				}
			}
			k.mu.Unlock()
		})
		return
	}
	if resp.TTLMillis > 0 {
		k.ttl, k.ttlKnown = time.Duration(resp.TTLMillis)*time.Millisecond, true
	}
	// The batch's time besides its hold at the master: the answers come
	// together, so the longest hold among them is the batch's.
	var held int64
	for i := range resp.Results {
		if r := &resp.Results[i]; r.Code == wire.CodeOK {
			held = max(held, r.HeldMillis)
		}
	}
	k.m.batchSeconds.Observe(max(now.Sub(sent)-time.Duration(held)*time.Millisecond, 0).Seconds())
	for i, s := range ss {
		s.atMaster--
		r := &resp.Results[i]
		if s.gone != nil || k.sess[s.id] != s {
			continue // forgotten meanwhile
		}
		switch r.Code {
		case wire.CodeOK:
		case wire.CodeNotMaster, wire.CodeUnavailable, wire.CodeCanceled, wire.CodeTooMany:
			// Not this session's end: kept, and sent again below.
			if k.aliveLocked(s, now) {
				k.queueIfDueLocked(s)
			}
			continue
		default:
			out = k.forgetLocked(s, out, &wire.Error{Code: r.Code, Msg: r.Msg})
			continue
		}
		lease := time.Duration(r.HeldMillis+r.LeaseMillis) * time.Millisecond
		grew := false
		if end := wire.TrustedLeaseEnd(sent, lease); k.gateLocked(s, end, resp.CacheSeq, req.CacheSession) {
			// Relayed once the cache has taken in what may concern it
			// (cacheProgress).
		} else if end.After(s.leaseEnd) {
			s.leaseEnd, grew = end, true
			s.fromCache = req.CacheSession != 0 && req.CacheSession == k.rc.sessionID.Load()
			s.leaseSeq = resp.CacheSeq
		}
		s.epoch = resp.Epoch
		fresh := false
		for _, ev := range r.Events {
			if ev.Seq > s.delivered {
				s.delivered = ev.Seq
				s.events = append(s.events, ev)
				fresh = true
			}
		}
		if c := s.parked; c != nil && (fresh || !s.told) && k.tellableLocked(s, now) {
			out = append(out, k.replyLocked(c, now))
		} else if c != nil && grew {
			k.rearmLocked(c, now)
		}
		if k.aliveLocked(s, now) {
			k.queueIfDueLocked(s)
		}
	}
	k.mu.Unlock()
	deliver(out)
}

// stats reports the sessions kept and batch calls made.
func (k *keeper) stats() (sessions int, batches, failed, stale uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.sess), k.batches, k.failed, k.stale
}

// leaseCounts are the sessions a proxy keeps (Held), and those of them
// whose clients are present (aliveLocked) by the proxy's lease for them:
// Fresh enough to tell a client (freshLocked), Stale (its client is
// told NotMaster), or New (no lease from the master yet: the proxy met
// the session since its last batch went).
type leaseCounts struct{ Held, Fresh, Stale, New int }

// leases counts the sessions by their leases now. One walk under the
// lock: for a scrape or a probe of readiness, not a call.
func (k *keeper) leases(now time.Time) leaseCounts {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := leaseCounts{Held: len(k.sess)}
	for _, s := range k.sess {
		switch {
		case !k.aliveLocked(s, now):
		case s.leaseEnd.IsZero():
			n.New++
		case k.freshLocked(s, now):
			n.Fresh++
		default:
			n.Stale++
		}
	}
	return n
}

// endAll answers every parked call NotMaster (the proxy is closing).
func (k *keeper) endAll() {
	k.mu.Lock()
	var out []answer
	for _, s := range k.sess {
		if s.parked != nil {
			out = append(out, k.unparkLocked(s.parked, nil, 0, wire.Errorf(wire.CodeNotMaster, "proxy: closing")))
		}
	}
	k.mu.Unlock()
	deliver(out)
}

// created notes a session just created through the proxy, with the
// lease the master granted it as its client was told it (from the
// call's arrival here, which is no earlier than the client's own send):
// the client's first KeepAlive is then due by that lease, like any
// other, rather than held for a whole lease waiting for its first
// batch.
func (k *keeper) created(principal string, id, epoch uint64, arrived time.Time, lease time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sess[id] != nil || lease <= 0 {
		return
	}
	if !k.ttlKnown {
		// Until a batch says the cell's lease, a new session's is it.
		k.ttl = lease
	}
	k.sess[id] = &kaSession{id: id, principal: principal, epoch: epoch, clientEpoch: epoch, told: true,
		toldEnd: arrived.Add(lease), toldFor: lease, leaseEnd: wire.TrustedLeaseEnd(arrived, lease), lastHeard: arrived, lastCall: arrived}
}

// ended forgets a session its client closed, or that another process
// resumed: the proxy keeps its lease no more.
func (k *keeper) ended(id uint64) {
	k.mu.Lock()
	var out []answer
	if s := k.sess[id]; s != nil {
		out = k.forgetLocked(s, out, wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", id))
	}
	k.mu.Unlock()
	deliver(out)
}
