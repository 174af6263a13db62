package replica

import (
	"math/bits"
	"sort"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Operators' figures about one replica: how long the disk takes to store
// Raft's log batches, how long the state machine takes per entry, how often
// the leader changed, and what the replica knows of its leader. They are
// kept with atomics on the hot paths (one clock read and two atomic adds per
// stored batch and per applied entry), so reading them never holds up
// Raft.

// HistogramBuckets is the number of finite buckets of a Histogram.
const HistogramBuckets = 24

// histogramBase is the upper bound of a Histogram's first bucket; each
// next bound doubles it, so the last finite bound is 25 µs × 2^23, about
// 210 s: one layout fits an fsync (sub-millisecond to seconds), a state
// machine apply (microseconds) and a lock wait (milliseconds to minutes).
const histogramBase = 25 * time.Microsecond

// HistogramBound returns the upper bound (inclusive) of bucket i of every
// Histogram, for i < HistogramBuckets.
func HistogramBound(i int) time.Duration { return histogramBase << i }

// Histogram counts durations into fixed exponential buckets
// (HistogramBound) without locks. The zero value is ready to use and safe
// for concurrent use.
type Histogram struct {
	counts [HistogramBuckets + 1]atomic.Uint64 // the last one is +Inf
	sum    atomic.Int64                        // nanoseconds
}

// Observe counts one duration (a negative one counts as zero).
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	i := HistogramBuckets
	if d <= histogramBase {
		i = 0
	} else if q := uint64((d - 1) / histogramBase); q < 1<<(HistogramBuckets-1) {
		// The smallest i with histogramBase<<i >= d.
		i = bits.Len64(q)
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a Histogram read at one moment.
type HistogramSnapshot struct {
	// Buckets[i] counts the durations of at most HistogramBound(i)
	// (cumulative, as Prometheus exposes them).
	Buckets [HistogramBuckets]uint64
	// Count counts every duration, those above the last bound included.
	Count uint64
	// Sum adds every duration up.
	Sum time.Duration
}

// Snapshot reads the histogram. Observations racing with it may be seen in
// the counts and not yet in Sum, or the other way round; Count always
// equals the buckets' total.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var out HistogramSnapshot
	var total uint64
	for i := range h.counts {
		total += h.counts[i].Load()
		if i < HistogramBuckets {
			out.Buckets[i] = total
		}
	}
	out.Count, out.Sum = total, time.Duration(h.sum.Load())
	return out
}

// Stats are one replica's operating figures since it started.
type Stats struct {
	// LogStore times each StoreLogs call: one batch of Raft entries
	// written to badger and fsync'd (a leader's group commit, or one
	// AppendEntries on a follower).
	LogStore HistogramSnapshot
	// Apply times the state machine's Apply of each committed entry.
	Apply HistogramSnapshot
	// LeaderChanges counts the times this replica learned of a new
	// leader (itself included); losing the leader without a new one
	// does not count.
	LeaderChanges uint64
}

// replicaStats are the live counters behind Stats.
type replicaStats struct {
	logStore      Histogram
	apply         Histogram
	leaderChanges atomic.Uint64
}

// Stats reports the replica's operating figures.
func (r *Replica) Stats() Stats {
	return Stats{LogStore: r.stats.logStore.Snapshot(), Apply: r.stats.apply.Snapshot(),
		LeaderChanges: r.stats.leaderChanges.Load()}
}

// timedLogStore is the log store raft writes through: the badger Store,
// with each batch's time counted.
type timedLogStore struct {
	*Store
	h *Histogram
}

// StoreLogs stores the entries (Store.StoreLogs) and counts the time.
func (s timedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	err := s.Store.StoreLogs(logs)
	s.h.Observe(time.Since(start))
	return err
}

// StoreLog stores one entry through StoreLogs, so it is counted too.
func (s timedLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// timedFSM is the state machine raft applies to: the FSM, with each
// entry's apply time counted. Snapshot and Restore pass through.
type timedFSM struct {
	*FSM
	h *Histogram
}

// Apply applies the entry (FSM.Apply) and counts the time.
func (f timedFSM) Apply(l *raft.Log) any {
	start := time.Now()
	res := f.FSM.Apply(l)
	f.h.Observe(time.Since(start))
	return res
}

// countLeaders counts leader changes with a raft observer. Raft calls the
// filter synchronously as it changes leader; it counts and drops the
// observation, so no channel and no goroutine are needed.
func (st *replicaStats) countLeaders(r *raft.Raft) {
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" {
			st.leaderChanges.Add(1)
		}
		return false
	}))
}

// LastLeaderContact returns when this replica last heard from a leader
// (zero if never). It is meaningful on followers; raft does not update it
// on the leader itself.
func (r *Replica) LastLeaderContact() time.Time { return r.raft.LastContact() }

// HeartbeatTimeout is how long a follower waits without word from its
// leader before it stands for election (Timings, defaults applied).
func (r *Replica) HeartbeatTimeout() time.Duration {
	return r.cfg.Timings.withDefaults().HeartbeatTimeout
}

// Member is one server of the Raft configuration.
type Member struct {
	ID       string
	RaftAddr string
	// Voter is false for a non-voting member (one catching up).
	Voter bool
}

// Members returns the latest Raft configuration this replica knows, in id
// order. It does not wait on raft's loops.
func (r *Replica) Members() []Member {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// LockView describes one lock in use, for operators.
type LockView struct {
	Path    string
	Mode    uint8 // LockFree, LockExclusive or LockShared
	Holders int
	Waiters int
	// LockGen is the command index of the last grant of the free lock.
	LockGen uint64
	// LockDelayUntil (Unix ns) is when the lock may next be granted, if
	// a failed holder left it under lock-delay.
	LockDelayUntil int64
}

// BusiestLocks returns up to n locks that are held or waited for, most
// waiters first, then most holders, then by name. It looks at every node
// under the state machine's read lock, so callers ration it.
func (f *FSM) BusiestLocks(n int) []LockView {
	f.mu.RLock()
	var out []LockView
	for p, nd := range f.nodes {
		if len(nd.Holders) == 0 && len(nd.Waiters) == 0 {
			continue
		}
		out = append(out, LockView{Path: p, Mode: nd.LockMode, Holders: len(nd.Holders), Waiters: len(nd.Waiters),
			LockGen: nd.LockGen, LockDelayUntil: nd.LockDelayUntil})
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Waiters != b.Waiters {
			return a.Waiters > b.Waiters
		}
		if a.Holders != b.Holders {
			return a.Holders > b.Holders
		}
		return a.Path < b.Path
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// LockViews describes the locks of the named nodes that exist, in the
// order given.
func (f *FSM) LockViews(names []string) []LockView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []LockView
	for _, p := range names {
		if nd := f.nodes[p]; nd != nil {
			out = append(out, LockView{Path: p, Mode: nd.LockMode, Holders: len(nd.Holders), Waiters: len(nd.Waiters),
				LockGen: nd.LockGen, LockDelayUntil: nd.LockDelayUntil})
		}
	}
	return out
}
