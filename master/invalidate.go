package master

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"lockcell/replica"
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

// invalidator is the master's part that runs the protocol above: it
// remembers the cachers of each name, the names with a change in flight,
// the invalidations those changes wait for, and the principals barred
// from caching. The events themselves travel in the sessions' queues,
// which the sessions part (sessions.go) owns; the invalidator reaches them
// through sessionLink.
//
// Lock order: invalidator.mu, then the sessions' lock (inside
// sessionLink), then the state's read lock. The invalidator calls
// sessionLink holding its mu; no code holding Server.mu or the sessions'
// lock calls the invalidator.
type invalidator struct {
	clock    Clock
	sessions sessionLink
	admin    string        // never barred (without TLS everyone is the admin)
	penalty  time.Duration // how long a barred principal may cache nothing
	log      *slog.Logger

	mu       sync.Mutex
	cachers  map[string]map[uint64]bool // name -> sessions that may have cached it
	busy     map[string]int             // names with a change in flight (uncacheable)
	inflight map[string][]*pendingInval // invalidations sent for busy names
	bySess   map[uint64]*cacher         // each registered session's standing
	barred   map[string]time.Time       // principal -> may cache again from
	sent     uint64
	// late counts waits that ended at the cacher's deadline without its
	// acknowledgement, once per invalidation.
	late uint64
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

// sessionLink is what the invalidator needs of the sessions part. Each
// method takes the sessions part's lock itself.
type sessionLink interface {
	// cacheable reports whether session holds a live lease and has
	// acknowledged every event up to seq.
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
}

func newInvalidator(clock Clock, sessions sessionLink, admin string, leaseTTL time.Duration, log *slog.Logger) *invalidator {
	inv := &invalidator{clock: clock, sessions: sessions, admin: admin, penalty: cachePenaltyLeases * leaseTTL, log: log,
		busy: map[string]int{}, inflight: map[string][]*pendingInval{}}
	inv.reset()
	return inv
}

// reset forgets every cacher and bar (the master stopped serving; a new
// term starts with every client's cache flushed by its fail-over event).
// Changes in flight keep their busy marks until they release them.
func (inv *invalidator) reset() {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.cachers = map[string]map[uint64]bool{}
	inv.bySess = map[uint64]*cacher{}
	inv.barred = map[string]time.Time{}
}

// register records that session (of principal) may cache name, unless a
// change of name is in flight, the session has an invalidation
// outstanding or no live lease, or principal is barred from caching. It
// reports whether the answer may be cached.
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
	if set == nil {
		set = map[uint64]bool{}
		inv.cachers[name] = set
	}
	set[session] = true
	if cs == nil {
		cs = &cacher{principal: principal}
		inv.bySess[session] = cs
	}
	if cs.names == nil {
		cs.names = map[string]bool{}
	}
	cs.names[name] = true
	return true
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
			delete(set, session)
			if len(set) == 0 {
				delete(inv.cachers, name)
			}
		}
	}
	delete(inv.bySess, session)
}

// pendingInval is one invalidation a change waits for: event seq on the
// session of lease l, due by deadline, the lease end l had when it was
// queued. Changes share it: a later change of the name waits on the same
// invalidation, and one invalidation run late is counted once however
// many changes waited on it.
type pendingInval struct {
	l         *lease
	session   uint64
	principal string
	seq       uint64
	deadline  time.Time
	counted   bool // counted as late (under invalidator.mu)
}

// invalidate marks names busy, sends invalidations to every session that
// may cache them and waits for each to acknowledge or lose its lease.
// release(names) must be called once the command has been applied (or
// abandoned), whatever invalidate returned. (A release closure returned
// from here would cost an allocation on every write.)
func (inv *invalidator) invalidate(ctx context.Context, stop <-chan struct{}, names []string) error {
	var waits []*pendingInval
	inv.mu.Lock()
	for _, name := range names {
		inv.busy[name]++
		// Invalidations an earlier, still running change of this name
		// sent are not acknowledged yet: this change waits for them too,
		// or it could complete while a cache still holds the old data.
		waits = append(waits, inv.inflight[name]...)
		for session := range inv.cachers[name] {
			cs := inv.bySess[session]
			if cs != nil {
				delete(cs.names, name)
			}
			l, seq, end, ok := inv.sessions.queueInvalidation(session, name)
			if !ok {
				continue
			}
			w := &pendingInval{l: l, session: session, seq: seq, deadline: end}
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
	for _, w := range waits {
		if err := inv.awaitAck(ctx, stop, w); err != nil {
			return err
		}
	}
	return nil
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
// principal from caching (see the top of this file).
func (inv *invalidator) awaitAck(ctx context.Context, stop <-chan struct{}, w *pendingInval) error {
	for {
		done, ignoredDelivered, changed := inv.sessions.ackState(w.l, w.seq)
		now := inv.clock.Now()
		acked := bugNoInval || done
		late := !acked && !w.deadline.After(now)
		if late {
			inv.mu.Lock()
			if !w.counted {
				w.counted = true
				inv.late++
				if ignoredDelivered {
					inv.barLocked(w, now)
				}
			}
			inv.mu.Unlock()
		}
		if acked || late {
			return nil
		}
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
	}
}

// barLocked bars the principal of w's session from caching for the
// penalty: one of its live sessions was told of an invalidation and let
// its deadline pass without acknowledging it. inv.mu is held.
func (inv *invalidator) barLocked(w *pendingInval, now time.Time) {
	if w.principal == "" || w.principal == inv.admin {
		// The admin may do anything to any node anyway; and without TLS
		// every caller is the admin, where barring would bar everyone.
		return
	}
	if _, barred := inv.barred[w.principal]; !barred {
		inv.log.Warn("a session ignored an invalidation until its lease deadline: its principal may not cache for a while",
			"principal", w.principal, "session", w.session, "for", inv.penalty)
	}
	inv.barred[w.principal] = now.Add(inv.penalty)
}

// counts returns the invalidations sent and those that ran late.
func (inv *invalidator) counts() (sent, late uint64) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.sent, inv.late
}

// registerCacher records that session (of principal) may cache name; see
// invalidator.register.
func (s *parts) registerCacher(session uint64, principal, name string) bool {
	return s.inv.register(session, principal, name)
}

// applyInvalidating applies cmd after invalidating every cache of a name
// it could change.
func (s *parts) applyInvalidating(ctx context.Context, stop <-chan struct{}, cmd *replica.Command) (*replica.Result, error) {
	var names []string
	s.read(func(v replica.View) { names = v.AffectedPaths(cmd) })
	return s.applyAfter(ctx, stop, names, cmd)
}

// applyAfter applies cmd after invalidating every cache of names, the
// names cmd could change.
func (s *parts) applyAfter(ctx context.Context, stop <-chan struct{}, names []string, cmd *replica.Command) (*replica.Result, error) {
	err := s.inv.invalidate(ctx, stop, names)
	defer s.inv.release(names)
	if err != nil {
		return nil, err
	}
	return s.cons.Apply(ctx, cmd)
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
	sent, late := s.inv.counts()
	return InvalidationStats{Sent: sent, Acked: s.stats.invalAcked.Load(), Late: late, EventsDropped: s.sess.droppedEvents()}
}
