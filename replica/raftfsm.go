package replica

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// The raft adapter: raft applies committed entries to, snapshots and
// restores the state machine through raft.FSM; the state machine itself
// (package fsm) knows nothing of raft. The adapter adds what is the
// node's: each entry's apply time, and the crash points around snapshots.

// raftFSM is the state machine as raft sees it.
type raftFSM struct {
	f *fsm.FSM
	h *fsm.Histogram // each entry's apply time
	// live is set once raft has started on this FSM (Replica.Open): a
	// Restore after that is a snapshot install, not the start-up restore
	// (the CrashSnapshotInstall crash point tells the two apart).
	live atomic.Bool
}

var _ raft.FSM = (*raftFSM)(nil)

// Apply applies the entry (fsm.FSM.ApplyEntry) and counts the time.
func (a *raftFSM) Apply(l *raft.Log) any {
	start := time.Now()
	res := a.f.ApplyEntry(l.Index, l.Data)
	a.h.Observe(time.Since(start))
	return res
}

// Snapshot encodes the state now (fsm.FSM.Snapshot); raft persists it
// later, while applies go on.
func (a *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := a.f.Snapshot()
	if err != nil {
		return nil, err
	}
	return &raftSnapshot{s}, nil
}

// Restore replaces the state with the snapshot's (fsm.FSM.Restore).
func (a *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.f.RestoreThen(rc, func() {
		if a.live.Load() {
			crashPoint(CrashSnapshotInstall) // snapshot stored by raft, state not yet replaced
		}
	})
}

// raftSnapshot is an fsm.Snapshot as raft persists it.
type raftSnapshot struct{ s *fsm.Snapshot }

func (s *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	// Two parts so that an armed crash point dies with half a snapshot
	// written to the sink (raft's file store buffers 4 KiB and writes
	// through past that; its temp folder holds meta.json and a partial
	// state.bin, never renamed into place).
	half := s.s.Len() / 2
	if err := s.s.WriteRange(sink, 0, half); err != nil {
		sink.Cancel()
		return err
	}
	crashPoint(CrashSnapshotPersist)
	if err := s.s.WriteRange(sink, half, s.s.Len()); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the snapshot's bytes.
func (s *raftSnapshot) Release() { s.s.Release() }
