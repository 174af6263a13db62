package replica

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// Operators' figures about one replica: how long the disk takes to store
// Raft's log batches, how long the state machine takes per entry, how often
// the leader changed, and what the replica knows of its leader. They are
// kept with atomics on the hot paths (one clock read and two atomic adds per
// stored batch and per applied entry), so reading them never holds up
// Raft.

// Stats are one replica's operating figures since it started.
type Stats struct {
	// LogStore times each StoreLogs call: one batch of Raft entries
	// written to badger and fsync'd (a leader's group commit, or one
	// AppendEntries on a follower).
	LogStore fsm.HistogramSnapshot
	// Apply times the state machine's Apply of each committed entry.
	Apply fsm.HistogramSnapshot
	// LeaderChanges counts the times this replica learned of a new
	// leader (itself included); losing the leader without a new one
	// does not count.
	LeaderChanges uint64
}

// replicaStats are the live counters behind Stats.
type replicaStats struct {
	logStore      fsm.Histogram
	apply         fsm.Histogram
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
	h *fsm.Histogram
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
