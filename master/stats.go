package master

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Operators' figures about the master: how long blocking acquires waited,
// how much lease sessions had left when their KeepAlives arrived, and how
// many invalidations cachers acknowledged. They are atomics, counted on the
// calls' own goroutines, so a scrape never takes the master's lock for
// them.

// masterStats are the live counters behind Stats.
type masterStats struct {
	lockWait   fsm.Histogram
	leaseLeft  fsm.Histogram
	invalAcked atomic.Uint64
	grants     grantCounts
}

// Stats are the master's operating figures since the process started (they
// add up over every term this replica served).
type Stats struct {
	// LockWait times each granted blocking Acquire, from its arrival at
	// this master to the grant: the time spent queued behind other
	// holders (plus one commit). TryAcquire and acquires that fail or
	// are given up are not counted.
	LockWait fsm.HistogramSnapshot
	// LeaseLeft is how much of its lease a session had left when each of
	// its KeepAlives arrived. Healthy clients arrive with about a quarter
	// of a lease or more to spare; values near zero mean clients (or the
	// network to them) are late.
	LeaseLeft fsm.HistogramSnapshot
	// LeaseTTL is the configured lease.
	LeaseTTL time.Duration
	// LeaseGranted is the lease a KeepAlive grants now: LeaseTTL, or
	// longer under load.
	LeaseGranted time.Duration
	// DetachedWaits counts the blocking Acquires whose calls broke off
	// (the connection closed under them) and that the master keeps queued
	// for their clients' retries, until each comes back, its session's
	// lease runs out or a lease has passed.
	DetachedWaits int
	// Stalls counts the times this master found it had not run for more
	// than an expiry period and a quarter of a lease and extended every
	// live lease by the time lost, so that its own stall expired no
	// session.
	Stalls uint64
	// IdleClosed counts the sessions this master closed for idleness: no
	// open handle and no call but KeepAlives for
	// Limits.IdleSessionTimeout (idle.go).
	IdleClosed uint64
	// IdleDrains counts the idle sessions whose lease this master stopped
	// extending, to close them once it runs out (idle.go); a drain ends in
	// an idle close, or in the session's use again.
	IdleDrains uint64
}

// Stats reports the master's operating figures.
func (s *Server) Stats() Stats {
	return Stats{LockWait: s.stats.lockWait.Snapshot(), LeaseLeft: s.stats.leaseLeft.Snapshot(), LeaseTTL: s.cfg.LeaseTTL,
		LeaseGranted: s.sess.grantTTL(), Stalls: s.sess.stallCount(), DetachedWaits: s.waits.detached(),
		IdleClosed: s.idle.closed.Load(), IdleDrains: s.idle.drains.Load()}
}

// acquireTimed runs acquire, counts a grant against the lock's name and,
// for a blocking acquire, the time it took.
func (e *lockEndpoint) acquireTimed(ctx context.Context, c *call, req *wire.AcquireRequest) (*wire.AcquireResponse, error) {
	start := e.cfg.Clock.Now()
	resp, err := e.acquire(ctx, c, req)
	if err == nil {
		if req.Wait {
			e.stats.lockWait.Observe(e.cfg.Clock.Now().Sub(start))
		}
		if c.path != "" { // set by apply, for the audit log
			e.stats.grants.note(c.path)
		}
	}
	return resp, err
}

// noteAcked counts the invalidations among evs that an acknowledgement up
// to seq ack covers (evs are a session's unacknowledged events, before
// they are dropped).
func (st *masterStats) noteAcked(evs []wire.Event, ack uint64) {
	n := uint64(0)
	for _, e := range evs {
		if e.Seq <= ack && e.Kind == wire.EventInvalidate {
			n++
		}
	}
	if n > 0 {
		st.invalAcked.Add(n)
	}
}

// SessionStatus describes one live session as this master sees it.
type SessionStatus struct {
	ID        uint64
	Client    string
	Principal string
	Handles   int
	// Locks are the names whose lock the session holds, sorted.
	Locks []string
	// LeaseLeft is how long the lease this master granted has to run
	// (zero once run out); HasLease is false when the master holds no
	// lease for the session (it is not serving, or has not seen it yet).
	LeaseLeft time.Duration
	HasLease  bool
}

// SessionStatuses lists up to limit live sessions in id order, with the
// lease each has left at this master, and the number of live sessions. On
// a replica whose master does not serve, no session has a lease. It reads
// the whole session table, so callers ration it.
func (s *Server) SessionStatuses(limit int) (total int, out []SessionStatus) {
	var views []fsm.SessionView
	s.read(func(v fsm.View) { views = v.Sessions() })
	total = len(views)
	if len(views) > limit {
		views = views[:limit]
	}
	out = make([]SessionStatus, 0, len(views))
	ids := make([]uint64, len(views))
	for i, v := range views {
		ids[i] = v.ID
	}
	left := s.sess.leaseLeft(ids, s.cfg.Clock.Now())
	for _, v := range views {
		st := SessionStatus{ID: v.ID, Client: v.Client, Principal: v.Principal, Handles: v.Handles, Locks: v.Locks}
		st.LeaseLeft, st.HasLease = left[v.ID]
		out = append(out, st)
	}
	return total, out
}

// maxCountedLocks bounds the names grantCounts remembers.
const maxCountedLocks = 4096

// grantCounts counts lock grants by name, bounded: it remembers at most
// maxCountedLocks names; when a new name finds it full, every count is
// halved and the names that reach zero are forgotten. So counts favour
// recent activity, memory stays bounded however many names are locked, and
// a grant costs O(1) on average (a halving pass frees at least one name).
type grantCounts struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (g *grantCounts) note(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[string]uint64{}
	}
	if _, ok := g.n[name]; !ok {
		for len(g.n) >= maxCountedLocks {
			for k, v := range g.n {
				if v /= 2; v == 0 {
					delete(g.n, k)
				} else {
					g.n[k] = v
				}
			}
		}
	}
	g.n[name]++
}

// LockGrants is how often one lock was granted.
type LockGrants struct {
	Name   string
	Grants uint64
}

// top returns up to k names with the most grants, most first.
func (g *grantCounts) top(k int) []LockGrants {
	g.mu.Lock()
	out := make([]LockGrants, 0, len(g.n))
	for name, n := range g.n {
		out = append(out, LockGrants{name, n})
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Grants != out[j].Grants {
			return out[i].Grants > out[j].Grants
		}
		return out[i].Name < out[j].Name
	})
	return out[:min(k, len(out))]
}

// BusiestGrants returns up to k locks this replica's master granted most
// often since the process started, most first. The counts are of grants
// answered to Acquire and TryAcquire calls here, and they decay: see
// grantCounts.
func (s *Server) BusiestGrants(k int) []LockGrants { return s.stats.grants.top(k) }
