package cell

import (
	"context"
	"sync"
	"time"

	"lockcell/master"
	"lockcell/wire"
)

// DefaultStateHashInterval is the least time between two state hashes one
// replica computes for callers.
const DefaultStateHashInterval = time.Second

// cellStatus answers CellStatus. The plain status is cheap (counters and
// Raft's view) and open to any caller, as a health probe is; the health
// detail is the admin's and the monitoring role's (statusDetail). The state
// hash is not: it encodes the whole replicated state while holding off the
// replica's applies (at 100,000 nodes, tens of milliseconds and tens of
// MiB), so it is the admin's alone, rate-limited by hashGate, and the
// serving master computes it only when the admin says it accepts pausing
// the cell's writes (AllowMaster): a follower's applies are off the
// commit path, the master's are on it.
func (s *Server) cellStatus(ctx context.Context, caller master.Caller, body []byte) (*wire.CellStatusResponse, error) {
	var req wire.CellStatusRequest
	if len(body) > 0 {
		if err := wire.Decode(body, &req); err != nil {
			return nil, err
		}
	}
	st := s.rep.Status()
	epoch, sessions, nodes, _ := s.rep.FSM().Counts()
	out := &wire.CellStatusResponse{Cell: s.cfg.Cell, Self: s.cfg.Self, State: st.State, Epoch: epoch, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Sessions: uint64(sessions), Nodes: uint64(nodes),
		Master: s.leaderHint()}
	out.Replicas = s.members()
	if req.Detail {
		if err := s.statusDetail(caller, out); err != nil {
			return nil, err
		}
	}
	if !req.StateHash {
		return out, nil
	}
	if caller.Principal != s.cfg.admin() {
		return nil, wire.Errorf(wire.CodePermission, "only the cell admin may ask for a state hash")
	}
	if serving, _ := s.master.Serving(); serving && !req.AllowMaster {
		return nil, wire.Errorf(wire.CodeUnavailable,
			"replica %s is the master and computes a state hash only when asked with AllowMaster (it pauses the cell's writes)", s.cfg.Self)
	}
	idx, sum, err := s.hashes.get(ctx, s.rep.FSM())
	if err != nil {
		return nil, err
	}
	out.StateHash, out.HashIndex = sum[:], idx
	return out, nil
}

// statusDetail adds the health detail to out, for the admin and the
// monitoring role only (master/monitor.go): this replica's disk usage
// and, on the Raft leader, each member's health, last contact and match
// index as the leader sees them. The plain status stays open to every
// caller (clients find the master with it); the detail describes the
// machines behind the cell, which an ordinary client has no need of.
func (s *Server) statusDetail(caller master.Caller, out *wire.CellStatusResponse) error {
	if !s.master.MayMonitor(caller.Principal) {
		return s.master.MonitorDenied(caller.Principal, "ask for the replicas' health detail")
	}
	du := s.rep.DiskUsage()
	out.Detail = true
	out.Disk = &wire.DiskUsage{DataBytes: du.DataBytes, LogStoreBytes: du.LogStoreBytes, SnapshotsBytes: du.SnapshotsBytes,
		LastSnapshotBytes: du.LastSnapshot, LastSnapshotIndex: du.LastSnapshotIdx,
		AgeMillis: max(time.Since(du.Measured).Milliseconds(), 0)}
	if out.State != "Leader" {
		return nil // only the leader hears from every member
	}
	list, err := s.master.ListMembers()
	if err != nil {
		return nil // the plain status and the disk figures still stand
	}
	byID := make(map[string]wire.ReplicaStatus, len(list.Replicas))
	for _, rs := range list.Replicas {
		byID[rs.ID] = rs
	}
	for i, rs := range out.Replicas {
		if l, ok := byID[rs.ID]; ok {
			out.Replicas[i].Healthy, out.Replicas[i].LastContactMillis, out.Replicas[i].MatchIndex = l.Healthy, l.LastContactMillis, l.MatchIndex
			if out.Replicas[i].Suffrage == "" {
				out.Replicas[i].Suffrage = l.Suffrage
			}
		}
	}
	return nil
}

// stateHasher is what hashGate needs of the state machine.
type stateHasher interface {
	StateHash() (uint64, [32]byte, error)
	Counts() (epoch uint64, sessions, nodes int, applied uint64)
}

// hashGate lets one replica compute at most one state hash at a time and
// at most one per interval, whoever asks: callers that arrive while a hash
// is computed share its result, a result still current (no entry applied
// since) is served again for free, and any other ask within the interval
// is refused with CodeTooMany, so no number of callers can keep a replica
// encoding its state.
type hashGate struct {
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	running chan struct{} // closed when the hash in progress is done; nil when none is
	started time.Time     // when the last computation began
	done    bool          // a result is held
	index   uint64
	sum     [32]byte
	err     error
}

func (g *hashGate) get(ctx context.Context, fsm stateHasher) (uint64, [32]byte, error) {
	g.mu.Lock()
	for g.running != nil {
		ch := g.running
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, [32]byte{}, wire.Errorf(wire.CodeCanceled, "state hash: %v", ctx.Err())
		}
		g.mu.Lock()
		if g.done && g.err == nil {
			// Computed while we waited: the shared answer.
			idx, sum := g.index, g.sum
			g.mu.Unlock()
			return idx, sum, nil
		}
	}
	if _, _, _, applied := fsm.Counts(); g.done && g.err == nil && g.index == applied {
		idx, sum := g.index, g.sum
		g.mu.Unlock()
		return idx, sum, nil
	}
	now := g.now()
	if wait := g.started.Add(g.interval).Sub(now); g.done && wait > 0 {
		g.mu.Unlock()
		return 0, [32]byte{}, wire.Errorf(wire.CodeTooMany,
			"a state hash is computed at most once per %v on each replica; retry in %v", g.interval, wait.Round(time.Millisecond))
	}
	ch := make(chan struct{})
	g.running, g.started = ch, now
	g.mu.Unlock()

	idx, sum, err := fsm.StateHash()

	g.mu.Lock()
	g.running, g.done, g.index, g.sum, g.err = nil, true, idx, sum, err
	close(ch)
	g.mu.Unlock()
	if err != nil {
		return 0, [32]byte{}, wire.Errorf(wire.CodeInternal, "state hash: %v", err)
	}
	return idx, sum, nil
}
