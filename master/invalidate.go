package master

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The cache-invalidation protocol (docs/spec.md#cache-invalidation). The master remembers which
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
// Three rules keep cachers that do not acknowledge from stalling writes
// again and again, whatever number of sessions their principal makes:
//
//   - A session caches nothing until one of its KeepAlives has reached
//     this master (sessions.cacheable): its reads are answered
//     uncacheable, so a session never heard from holds no write at all.
//     The master reaches a session only through KeepAlive replies; a
//     session that never calls cannot hear an invalidation, and would
//     hold every write of what it cached for the whole lease its
//     CreateSession granted. Cutting that wait short instead is not safe:
//     a client trusts its cache until its local lease ends, and an honest
//     client paused (SIGSTOP, a long garbage collection) right after a
//     cached read resumes with that lease still running, so a write that
//     went ahead sooner could complete while the cache still serves the
//     old data. A short first lease would bound the wait by construction
//     too, but a client whose first KeepAlive is slow (a loaded master)
//     would fall into jeopardy or lose its session; and registering only
//     sessions with a KeepAlive parked right now would refuse honest
//     clients in every gap between a reply and their next call, and buy
//     nothing more: a session heard once and then silent is held to the
//     account below. Refusing the registration costs an honest client one
//     uncached read at most, in the moment between creating its session
//     and its first KeepAlive's arrival (the client library sends it at
//     once).
//   - A session with an unacknowledged invalidation is registered for
//     nothing more (its reads are answered uncacheable, as Chubby treats
//     a node with invalidations outstanding), so it holds at most one
//     write per name it had cached.
//   - Each principal but the admin has a hold account (holdAccount): the
//     time writes waited on its cachers past cacheGrace (an honest
//     acknowledgement's round trip) since each invalidation was queued,
//     whatever the reason (the cacher was silent, ignored the event,
//     crashed, or was cut off). The account drains by its budget, half a
//     lease, every cachePenaltyLeases leases, so what counts is about the
//     last ten leases. When it reaches the budget the principal may cache
//     nothing for cachePenaltyLeases leases (and the account starts
//     afresh); so does a principal whose live session let an
//     invalidation's lease run out while its KeepAlives ignored the
//     delivered event. Barring only turns caching off: the holds already
//     under way still run out (see above why they must), but no cacher
//     registered later holds anything. A name is busy while a write of it
//     waits, so its cachers' holds follow one another, and the one that
//     crosses the budget is charged before the name is free again: the
//     writes of a name wait on one principal's cachers past the grace for
//     at most the budget plus that last hold, which is at most one lease
//     (the longest a KeepAlive grants, when leases lengthen); one lease in
//     all when, as in the attack this answers, each hold is a whole lease. A wait within the grace is free: a cacher can cost
//     each write at most the grace without being charged, as an honest
//     slow one does. The admin is never barred: it may change any node
//     anyway, and without TLS everyone is the admin.
//
// A cacher registration is memory the client makes the master hold: one
// per session and name (a directory for all the absences cached in it).
// Registrations are capped per principal and for the process
// (Limits.CacheRegistrationsPerPrincipal, CacheRegistrations), checked
// and taken in one step under invalidator.mu; a read over a cap is
// answered uncacheable, never refused.

// cachePenaltyLeases is how many leases a principal may cache nothing
// after one of its sessions ignored an invalidation until its deadline,
// or its cachers used up their hold budget.
const cachePenaltyLeases = 10

// cacheGrace is how long after an invalidation is queued its cacher's
// acknowledgement costs its principal nothing: an honest client's round
// trip, with room for a busy machine. A twentieth of a lease, within
// 100..500 ms.
func cacheGrace(lease time.Duration) time.Duration {
	return min(max(lease/20, 100*time.Millisecond), 500*time.Millisecond)
}

// holdBudget is how much waiting past the grace a principal's cachers may
// cost writes, within about cachePenaltyLeases leases, before it is
// barred: half a lease, so that the hold which crosses it (at most a
// lease) ends the stall at about one lease.
func holdBudget(lease time.Duration) time.Duration { return lease / 2 }

// holdLogEvery spaces the log lines about writes held past the grace.
const holdLogEvery = time.Second

// invalidator is the master's part that runs the protocol above: it
// remembers the cachers of each name, the names with a change in flight,
// the invalidations those changes wait for, the principals' hold
// accounts and the principals barred from caching. The events themselves
// travel in the sessions' queues, which the sessions part (sessions.go)
// owns; the invalidator reaches them through sessionLink.
//
// Its mu comes first in the lock order (lockorder.go): it calls
// sessionLink holding it.
type invalidator struct {
	clock    Clock
	sessions sessionLink
	admin    string        // never barred (without TLS everyone is the admin)
	penalty  time.Duration // how long a barred principal may cache nothing
	grace    time.Duration // cacheGrace
	budget   time.Duration // holdBudget
	log      *slog.Logger

	mu sync.Mutex
	// maxRegs and maxRegsPerPrincipal cap the registrations (the
	// Limits of the same names); set before serving.
	maxRegs, maxRegsPerPrincipal int
	cachers                      map[string]*nameCachers    // name -> the sessions that may have cached it
	busy                         map[string]int             // names with a change in flight (uncacheable)
	inflight                     map[string][]*pendingInval // invalidations sent for busy names
	bySess                       map[uint64]*cacher         // each registered session's standing
	barred                       map[string]time.Time       // principal -> may cache again from
	accounts                     map[string]*holdAccount    // principal -> its hold account
	sweepAt                      int                        // sweep the drained accounts when they are this many
	// regs counts registrations (a session and a name), in all and by
	// principal; regsPeak is the most there were, refused the reads
	// answered uncacheable because a cap was reached.
	regs        int
	regsPeak    int
	regsRefused uint64
	byPrincipal map[string]int
	sent        uint64
	// late counts waits that ended at the cacher's deadline without its
	// acknowledgement, once per invalidation.
	late uint64
	// bars counts principals barred; charged adds up the holds charged
	// to accounts (the admin's too, though it has none).
	bars    uint64
	charged time.Duration
	// The log line about holds is written at most every holdLogEvery:
	// holdLogged is when it last was, holdUnlogged the holds not logged
	// since.
	holdLogged   time.Time
	holdUnlogged uint64
}

// cacher is a session's standing with the invalidator.
type cacher struct {
	principal string
	// names lists the names the session may have cached.
	names map[string]bool
	// lastInval is the sequence of the newest invalidation queued for the
	// session: until it is acknowledged, the session caches nothing more.
	lastInval uint64
}

// nameCachers are the sessions that may have cached a name. It holds the
// name's one copy, which every cacher's names share: each read's name is a
// string of its own, and a registration should cost the master its map
// entries, not the name again.
type nameCachers struct {
	name     string
	sessions map[uint64]bool
}

// holdAccount is a principal's account of the time writes waited on its
// cachers past the grace (see the top of this file): level, as it stood
// at at, drains by the budget every penalty.
type holdAccount struct {
	level time.Duration
	at    time.Time
}

// sessionLink is what the invalidator needs of the sessions part. Each
// method takes the sessions part's lock itself.
type sessionLink interface {
	// cacheable reports whether session holds a live lease, has been
	// heard on a KeepAlive by this master, and has acknowledged every
	// event up to seq.
	cacheable(session, seq uint64) bool
	// queueInvalidation queues an Invalidate event for name on session's
	// next KeepAlive reply, waking a parked one. It returns the session's
	// lease, the event's sequence and the lease's end now; ok is false
	// when the session holds no live lease.
	queueInvalidation(session uint64, name string) (l *lease, seq uint64, end time.Time, ok bool)
	// ackState reports whether the session of l acknowledged event seq
	// or ended (done), whether the event was delivered on a KeepAlive
	// reply the session has since ignored, and a channel closed when
	// either may have changed.
	ackState(l *lease, seq uint64) (done, ignoredDelivered bool, changed <-chan struct{})
	// drainingLease reports whether the master lets l run out to close
	// its session for idleness (idle.go): a write held by it is not the
	// session's principal's doing, and is not charged to it.
	drainingLease(l *lease) bool
}

func newInvalidator(clock Clock, sessions sessionLink, admin string, leaseTTL time.Duration, log *slog.Logger) *invalidator {
	inv := &invalidator{clock: clock, sessions: sessions, admin: admin, penalty: cachePenaltyLeases * leaseTTL,
		grace: cacheGrace(leaseTTL), budget: holdBudget(leaseTTL), log: log,
		maxRegs: DefaultLimits.CacheRegistrations, maxRegsPerPrincipal: DefaultLimits.CacheRegistrationsPerPrincipal,
		busy: map[string]int{}, inflight: map[string][]*pendingInval{}}
	inv.reset()
	return inv
}

// limit sets the caps on registrations (zero or less: the default).
func (inv *invalidator) limit(total, perPrincipal int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if total > 0 {
		inv.maxRegs = total
	}
	if perPrincipal > 0 {
		inv.maxRegsPerPrincipal = perPrincipal
	}
}

// reset forgets every cacher, account and bar (the master stopped
// serving; a new term starts with every client's cache flushed by its
// fail-over event). Changes in flight keep their busy marks until they
// release them.
func (inv *invalidator) reset() {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.cachers = map[string]*nameCachers{}
	inv.bySess = map[uint64]*cacher{}
	inv.barred = map[string]time.Time{}
	inv.accounts, inv.sweepAt = map[string]*holdAccount{}, 64
	inv.byPrincipal = map[string]int{}
	inv.regs = 0
}

// register records that session (of principal) may cache name, unless a
// change of name is in flight, the session has an invalidation
// outstanding, no live lease or was never heard on a KeepAlive, principal
// is barred from caching, or a cap on registrations is reached. It reports
// whether the answer may be cached.
func (inv *invalidator) register(session uint64, principal, name string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.busy[name] > 0 {
		return false
	}
	cs := inv.bySess[session]
	var outstanding uint64
	if cs != nil {
		outstanding = cs.lastInval
	}
	if !inv.sessions.cacheable(session, outstanding) {
		return false
	}
	if until, ok := inv.barred[principal]; ok {
		if inv.clock.Now().Before(until) {
			return false
		}
		delete(inv.barred, principal)
	}
	set := inv.cachers[name]
	if set != nil && set.sessions[session] {
		return true // registered already: nothing more is held
	}
	// The caps, checked and taken here under mu: exact however many
	// reads race for the last registration.
	if inv.regs >= inv.maxRegs || inv.byPrincipal[principal] >= inv.maxRegsPerPrincipal {
		inv.regsRefused++
		return false
	}
	if set == nil {
		set = &nameCachers{name: name, sessions: map[uint64]bool{}}
		inv.cachers[name] = set
	}
	set.sessions[session] = true
	if cs == nil {
		cs = &cacher{principal: principal}
		inv.bySess[session] = cs
	}
	if cs.names == nil {
		cs.names = map[string]bool{}
	}
	cs.names[set.name] = true // the name's one copy, however many sessions cache it
	inv.regs++
	inv.regsPeak = max(inv.regsPeak, inv.regs)
	inv.byPrincipal[cs.principal]++
	return true
}

// droppedLocked gives back the registration of one name by cs. inv.mu is
// held.
func (inv *invalidator) droppedLocked(cs *cacher) {
	inv.regs--
	if inv.byPrincipal[cs.principal]--; inv.byPrincipal[cs.principal] <= 0 {
		delete(inv.byPrincipal, cs.principal)
	}
}

// forget drops a session's registrations (it ended).
func (inv *invalidator) forget(session uint64) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	cs := inv.bySess[session]
	if cs == nil {
		return
	}
	for name := range cs.names {
		if set := inv.cachers[name]; set != nil {
			delete(set.sessions, session)
			if len(set.sessions) == 0 {
				delete(inv.cachers, name)
			}
		}
		inv.droppedLocked(cs)
	}
	delete(inv.bySess, session)
}

// pendingInval is one invalidation a change waits for: event seq on the
// session of lease l, queued at queued for name, due by deadline, the
// lease end l had when it was queued. Changes share it: a later change of
// the name waits on the same invalidation, and one invalidation run late
// is counted, and its hold charged, once however many changes waited on
// it.
type pendingInval struct {
	l         *lease
	session   uint64
	principal string
	name      string
	seq       uint64
	queued    time.Time
	deadline  time.Time
	counted   bool          // counted as late (under invalidator.mu)
	charged   time.Duration // hold past the grace charged so far (under invalidator.mu)
	// then, for an invalidation of a proxy's cache session, are the
	// invalidations of the same name to the clients its cache served
	// it to, which the proxy reported with its acknowledgement
	// (transfer): a change waiting on this one waits on them next.
	// Under invalidator.mu.
	then []*pendingInval
}

// invalidate marks names busy, sends invalidations to every session that
// may cache them and waits for each to acknowledge or lose its lease.
// release(names) must be called once the command has been applied (or
// abandoned), whatever invalidate returned. (A release closure returned
// from here would cost an allocation on every write.)
func (inv *invalidator) invalidate(ctx context.Context, stop <-chan struct{}, names []string) error {
	var waits []*pendingInval
	inv.mu.Lock()
	now := inv.clock.Now()
	for _, name := range names {
		inv.busy[name]++
		// Invalidations an earlier, still running change of this name
		// sent are not acknowledged yet: this change waits for them too,
		// or it could complete while a cache still holds the old data.
		waits = append(waits, inv.inflight[name]...)
		var cachers map[uint64]bool
		if set := inv.cachers[name]; set != nil {
			cachers = set.sessions
		}
		for session := range cachers {
			cs := inv.bySess[session]
			if cs != nil {
				delete(cs.names, name)
				inv.droppedLocked(cs)
			}
			l, seq, end, ok := inv.sessions.queueInvalidation(session, name)
			if !ok {
				continue
			}
			w := &pendingInval{l: l, session: session, name: name, seq: seq, queued: now, deadline: end}
			if cs != nil {
				cs.lastInval = seq
				w.principal = cs.principal
			}
			waits = append(waits, w)
			inv.inflight[name] = append(inv.inflight[name], w)
			inv.sent++ // the waits taken over from an earlier change were counted by it
		}
		delete(inv.cachers, name)
	}
	inv.mu.Unlock()
	for i := 0; i < len(waits); i++ {
		w := waits[i]
		if err := inv.awaitAck(ctx, stop, w); err != nil {
			return err
		}
		inv.mu.Lock()
		// A proxy's cache session reports the clients it served the
		// name to before its acknowledgement counts (transfer): they
		// are in w.then by the time the wait on w ends with it.
		waits = append(waits, w.then...)
		inv.mu.Unlock()
	}
	return nil
}

// transfer invalidates name to the sessions a proxy's cache served it to
// as cacheable (they are the proxy's cachers, of which the master knew
// nothing), as it would its own cachers: an Invalidate event on each
// session's queue, which its next lease carries, and, while a change of
// the name waits on the invalidation of the proxy's cache session
// cache, a wait on each that the change takes up next (pendingInval.then)
// and that later changes of the name share (inflight). The proxy
// reports them with its acknowledgement, so no change waiting on that
// acknowledgement misses one. With no change in flight (the proxy
// acknowledged after its deadline, or reports again after a lost reply)
// the events still go: each client drops the entry before it adopts a
// newer lease. principal gives each session's principal; those barred
// from caching are returned (the proxy serves them nothing cacheable),
// as is how long their bars last at most.
func (inv *invalidator) transfer(cache uint64, name string, sessions []uint64, principal func(uint64) string) (barred []string, until time.Time) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	now := inv.clock.Now()
	var from []*pendingInval
	for _, w := range inv.inflight[name] {
		if w.session == cache {
			from = append(from, w)
		}
	}
	for _, session := range sessions {
		if session == cache {
			continue
		}
		l, seq, end, ok := inv.sessions.queueInvalidation(session, name)
		if !ok {
			continue // ended: nothing of it to invalidate
		}
		p := principal(session)
		cs := inv.bySess[session]
		if cs == nil {
			cs = &cacher{principal: p}
			inv.bySess[session] = cs
		}
		cs.lastInval = seq // it caches nothing more until it acknowledges
		if b, ok := inv.barred[p]; ok && now.Before(b) && p != "" {
			if !slices.Contains(barred, p) {
				barred = append(barred, p)
			}
			if b.After(until) {
				until = b
			}
		}
		if len(from) == 0 {
			continue
		}
		w := &pendingInval{l: l, session: session, principal: p, name: name, seq: seq, queued: now, deadline: end}
		for _, f := range from {
			f.then = append(f.then, w)
		}
		inv.inflight[name] = append(inv.inflight[name], w)
		inv.sent++
	}
	return barred, until
}

// release ends invalidate(names): the names are no longer busy with this
// change.
func (inv *invalidator) release(names []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, name := range names {
		if inv.busy[name]--; inv.busy[name] <= 0 {
			delete(inv.busy, name)
			delete(inv.inflight, name)
		}
	}
}

// awaitAck waits until the session acknowledged event seq, or the lease
// it held when the event was queued ran out, or it ended. A live session
// that ran out the deadline while ignoring the delivered event bars its
// principal from caching, and the wait past the grace is charged to its
// principal's hold account (see the top of this file).
//
// What is charged is what a waiting change saw: the invalidation was
// pending at each look, and ended when the change, waiting on it alone,
// woke to find it done (or at its deadline). A change waits on its
// invalidations one after another, so one found done after waiting on
// another is charged up to the last look that found it pending: the time
// the change was held waiting on the other is charged to the other.
func (inv *invalidator) awaitAck(ctx context.Context, stop <-chan struct{}, w *pendingInval) error {
	waited := false // the last look was followed by a wait on w alone
	for {
		done, ignoredDelivered, changed := inv.sessions.ackState(w.l, w.seq)
		now := inv.clock.Now()
		acked := bugNoInval || done
		late := !acked && !w.deadline.After(now)
		switch {
		case late:
			inv.mu.Lock()
			inv.holdLocked(w, w.deadline, now)
			if !w.counted {
				w.counted = true
				inv.late++
				if ignoredDelivered && !inv.sessions.drainingLease(w.l) {
					inv.barLocked(w, now, "a session ignored an invalidation until its lease deadline")
				}
			}
			inv.mu.Unlock()
			return nil
		case acked:
			if waited {
				inv.held(w, now, now)
			}
			return nil
		}
		inv.held(w, now, now)
		due, stopDue := after(inv.clock, w.deadline.Sub(now)+time.Millisecond)
		select {
		case <-changed:
		case <-due:
		case <-ctx.Done():
			stopDue()
			return ctx.Err()
		case <-stop:
			stopDue()
			return errStopped
		}
		stopDue()
		waited = true
	}
}

// held charges w's principal for w holding a change until (seen at now),
// if that is past the grace; an honest acknowledgement never is, and
// costs no lock.
func (inv *invalidator) held(w *pendingInval, until, now time.Time) {
	if until.Sub(w.queued) <= inv.grace {
		return
	}
	inv.mu.Lock()
	inv.holdLocked(w, until, now)
	inv.mu.Unlock()
}

// holdLocked charges w's principal for w holding a change until, past
// the grace, what was not charged for w before; the principal whose
// account reaches the budget is barred. inv.mu is held.
func (inv *invalidator) holdLocked(w *pendingInval, until, now time.Time) {
	hold := until.Sub(w.queued) - inv.grace
	if hold <= w.charged {
		return
	}
	d := hold - w.charged
	w.charged = hold
	inv.charged += d
	if w.principal == "" || w.principal == inv.admin || inv.sessions.drainingLease(w.l) {
		inv.logHoldLocked(w, hold, 0, now)
		return
	}
	a := inv.accounts[w.principal]
	if a == nil {
		if len(inv.accounts) >= inv.sweepAt {
			inv.sweepAccountsLocked(now)
			inv.sweepAt = max(2*len(inv.accounts), 64)
		}
		a = &holdAccount{at: now}
		inv.accounts[w.principal] = a
	}
	inv.drainLocked(a, now)
	a.level += d
	if a.level < inv.budget {
		inv.logHoldLocked(w, hold, a.level, now)
		return
	}
	inv.barLocked(w, now, "writes waited on this principal's cachers past the grace for its whole budget")
}

// drainLocked brings a's level to now: it drains by the budget every
// penalty. inv.mu is held.
func (inv *invalidator) drainLocked(a *holdAccount, now time.Time) {
	if inv.penalty > 0 && now.After(a.at) {
		drained := time.Duration(float64(now.Sub(a.at)) * float64(inv.budget) / float64(inv.penalty))
		a.level = max(a.level-drained, 0)
	}
	a.at = now
}

// sweepAccountsLocked forgets the accounts that drained empty, so they
// number at most the principals charged within about a penalty. inv.mu
// is held.
func (inv *invalidator) sweepAccountsLocked(now time.Time) {
	for p, a := range inv.accounts {
		if inv.drainLocked(a, now); a.level == 0 {
			delete(inv.accounts, p)
		}
	}
}

// logHoldLocked says, at most every holdLogEvery, that w held a write
// past the grace: which principal's cacher held which name, and how its
// account stands. inv.mu is held.
func (inv *invalidator) logHoldLocked(w *pendingInval, hold, level time.Duration, now time.Time) {
	if now.Sub(inv.holdLogged) < holdLogEvery {
		inv.holdUnlogged++
		return
	}
	inv.log.Warn("a write waited on a cacher past the grace for its acknowledgement",
		"name", w.name, "principal", w.principal, "session", w.session, "past_grace", hold.Round(time.Millisecond),
		"account", level.Round(time.Millisecond), "budget", inv.budget, "not_logged_before", inv.holdUnlogged)
	inv.holdLogged, inv.holdUnlogged = now, 0
}

// barLocked bars the principal of w's session from caching for the
// penalty, for why, and empties its account. inv.mu is held.
func (inv *invalidator) barLocked(w *pendingInval, now time.Time, why string) {
	if w.principal == "" || w.principal == inv.admin {
		// The admin may do anything to any node anyway; and without TLS
		// every caller is the admin, where barring would bar everyone.
		return
	}
	delete(inv.accounts, w.principal)
	if until, barred := inv.barred[w.principal]; !barred || !now.Before(until) {
		// One line per bar: a principal is barred at most once a penalty.
		inv.bars++
		inv.log.Warn(why+": its principal may not cache for a while",
			"principal", w.principal, "session", w.session, "name", w.name,
			"held_past_grace", w.charged.Round(time.Millisecond), "for", inv.penalty)
	}
	inv.barred[w.principal] = now.Add(inv.penalty)
}

// counts returns the invalidations sent and those that ran late.
func (inv *invalidator) counts() (sent, late uint64) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.sent, inv.late
}

// registrations returns the registrations now, their peak and the reads
// answered uncacheable at a cap; the principals barred and the holds
// charged.
func (inv *invalidator) registrations() (now, peak int, refused, bars uint64, charged time.Duration) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.regs, inv.regsPeak, inv.regsRefused, inv.bars, inv.charged
}

// InvalidationStats counts invalidations sent, those the cacher
// acknowledged, those whose change went ahead at the cacher's lease
// deadline without its acknowledgement, and handle events dropped because
// a session's queue was full. An invalidation acknowledged after its
// deadline counts as late and as acknowledged; one whose session ended
// first counts as neither.
//
// Registrations is the cacher registrations held now (a session and a
// name each), RegistrationsPeak the most held at once, and
// RegistrationsRefused the reads answered uncacheable because a cap on
// them was reached (Limits.CacheRegistrations,
// CacheRegistrationsPerPrincipal). Bars counts principals barred from
// caching, HoldCharged the time writes waited on cachers past the grace,
// added up (the admin's cachers included, though it is never barred).
type InvalidationStats struct {
	Sent, Acked, Late, EventsDropped uint64

	Registrations, RegistrationsPeak int
	RegistrationsRefused, Bars       uint64
	HoldCharged                      time.Duration
}

// InvalidationStats reports the master's invalidation counters.
func (s *Server) InvalidationStats() InvalidationStats {
	sent, late := s.inv.counts()
	regs, peak, refused, bars, charged := s.inv.registrations()
	return InvalidationStats{Sent: sent, Acked: s.stats.invalAcked.Load(), Late: late, EventsDropped: s.sess.droppedEvents(),
		Registrations: regs, RegistrationsPeak: peak, RegistrationsRefused: refused, Bars: bars, HoldCharged: charged}
}
