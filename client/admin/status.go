package admin

import (
	"context"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/client/internal/link"
	"lockcell/wire"
)

// ReplicaStatus describes one member as the answering replica sees it.
type ReplicaStatus struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr"`
	RaftAddr   string `json:"raft_addr"`
	Master     bool   `json:"master"`
	// Suffrage is "voter" or "nonvoter" (empty when the answering
	// replica does not know the configuration).
	Suffrage string `json:"suffrage,omitempty"`
	// Healthy and LastContact are known from the master only (from
	// Admin.Replicas): the master heard from the member within the last
	// few heartbeats, and how long ago it last did (0 for the master).
	Healthy     bool          `json:"healthy,omitempty"`
	LastContact time.Duration `json:"last_contact_ns,omitempty"`
	// MatchIndex (from the master only, as Healthy) is the highest log
	// index the master knows the member holds; 0 for the master and for
	// a member not heard from in this term.
	MatchIndex uint64 `json:"match_index,omitempty"`
	// Role is "read-replica" for a read replica (Admin.AddReadReplica),
	// empty for a member that votes or will.
	Role string `json:"role,omitempty"`
}

// CellStatus is one replica's view of the cell.
type CellStatus struct {
	Cell         string          `json:"cell"`
	Self         string          `json:"self"`
	State        string          `json:"state"`
	Master       string          `json:"master"`
	Epoch        uint64          `json:"epoch"`
	Term         uint64          `json:"term"`
	CommitIndex  uint64          `json:"commit_index"`
	AppliedIndex uint64          `json:"applied_index"`
	Sessions     uint64          `json:"sessions"`
	Nodes        uint64          `json:"nodes"`
	Replicas     []ReplicaStatus `json:"replicas"`
	// Detail says the health detail was given (QueryStatusDetail): Disk
	// is set and, when the answering replica is the master, Replicas
	// carry Healthy, LastContact and MatchIndex.
	Detail bool       `json:"detail,omitempty"`
	Disk   *DiskUsage `json:"disk,omitempty"`
}

// QueryStatus asks the replica at addr, master or not, for its view of the
// cell, over plain TCP. It needs no session. QueryStatusWith dials as a
// configuration says (TLS, dialer).
func QueryStatus(ctx context.Context, addr string) (*CellStatus, error) {
	return QueryStatusWith(ctx, client.Config{}, addr)
}

// QueryStatusWith is QueryStatus over a connection made as cfg says (its
// Dialer, TLS and DialTimeout): a cell with TLS answers nothing else. Only
// those fields of cfg are used.
func QueryStatusWith(ctx context.Context, cfg client.Config, addr string) (*CellStatus, error) {
	resp, err := cellStatus(ctx, cfg, addr, &wire.CellStatusRequest{})
	if err != nil {
		return nil, err
	}
	return cellStatusOf(resp), nil
}

func cellStatusOf(resp *wire.CellStatusResponse) *CellStatus {
	out := &CellStatus{Cell: resp.Cell, Self: resp.Self, State: resp.State, Master: resp.Master, Epoch: resp.Epoch,
		Term: resp.Term, CommitIndex: resp.CommitIndex, AppliedIndex: resp.AppliedIndex, Sessions: resp.Sessions, Nodes: resp.Nodes}
	for _, r := range resp.Replicas {
		out.Replicas = append(out.Replicas, replicaStatusOf(r))
	}
	if resp.Detail {
		out.Detail = true
	}
	if d := resp.Disk; d != nil {
		out.Disk = &DiskUsage{DataBytes: d.DataBytes, LogStoreBytes: d.LogStoreBytes, SnapshotsBytes: d.SnapshotsBytes,
			LastSnapshotBytes: d.LastSnapshotBytes, LastSnapshotIndex: d.LastSnapshotIndex,
			Age: time.Duration(d.AgeMillis) * time.Millisecond}
	}
	return out
}

// StateHash asks the replica at addr for the index of its last applied
// entry and a SHA-256 of its whole replicated state at that index. Two
// replicas at the same index must report the same hash; tests compare them
// after healing a partition.
//
// It is a diagnostic for a quiet cell, and only the cell's admin may ask:
// the replica holds off its applies while it encodes its state, computes
// at most one hash per interval (client.ErrTooMany otherwise, a result still
// current is served again), and this call accepts that the master pauses
// the cell's writes for it.
func StateHash(ctx context.Context, cfg client.Config, addr string) (uint64, []byte, error) {
	resp, err := cellStatus(ctx, cfg, addr, &wire.CellStatusRequest{StateHash: true, AllowMaster: true})
	if err != nil {
		return 0, nil, err
	}
	return resp.HashIndex, resp.StateHash, nil
}

func cellStatus(ctx context.Context, cfg client.Config, addr string, req *wire.CellStatusRequest) (*wire.CellStatusResponse, error) {
	var resp wire.CellStatusResponse
	if err := link.CallReplica(ctx, cfg, addr, wire.MethodCellStatus, req, &resp); err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	return &resp, nil
}

// SessionInfo describes one live session of the cell, with the identity
// its client declared (Identity: host, pid, program; empty when it
// declared none, and from a master that does not report them).
type SessionInfo struct {
	ID        uint64 `json:"id"`
	Client    string `json:"client,omitempty"`
	Principal string `json:"principal,omitempty"`
	client.Identity
	Created time.Time     `json:"created"`
	Lease   time.Duration `json:"lease_remaining_ns"`
	Handles int           `json:"handles"`
	Locks   []string      `json:"locks,omitempty"`
}

// Sessions lists the cell's live sessions (from the master): who they
// are and the identity their clients declared, the lease the master
// grants them right now, their open handles and the locks they hold. The
// admin sees every session; any other principal sees only its own
// principal's sessions, as if no others existed. At most 5000 are
// listed, in id order, and fewer when their names and identities are long
// (the reply must fit a frame).
func (a *Admin) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var resp wire.ListSessionsResponse
	if err := link.Call(a.c, ctx, wire.MethodListSessions, false, &wire.ListSessionsRequest{}, &resp); err != nil {
		return nil, opErr("sessions", "", err)
	}
	out := make([]SessionInfo, len(resp.Sessions))
	for i, s := range resp.Sessions {
		out[i] = SessionInfo{ID: s.ID, Client: s.Client, Principal: s.Principal, Created: time.Unix(0, s.Created),
			Lease: time.Duration(s.LeaseMillis) * time.Millisecond, Handles: int(s.Handles), Locks: s.Locks,
			Identity: client.Identity{Host: s.Host, PID: int(s.PID), Program: s.Program}}
	}
	return out, nil
}
