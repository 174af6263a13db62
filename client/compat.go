package client

import (
	"context"
	"fmt"
	"time"

	"lockcell/wire"
)

// The names in this file are the first release's status and session
// calls, kept so programs written against it (benchmark drivers among
// them) still build and behave as they did. New code uses package
// client/admin, which reports more.

// CellStatus is one replica's view of the cell as the first release
// reported it.
//
// Deprecated: use admin.CellStatus (package lockcell/client/admin), which
// also carries the members and the health detail.
type CellStatus struct {
	Cell         string `json:"cell"`
	Self         string `json:"self"`
	State        string `json:"state"`
	Master       string `json:"master"`
	Epoch        uint64 `json:"epoch"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Sessions     uint64 `json:"sessions"`
	Nodes        uint64 `json:"nodes"`
}

// QueryStatus asks the replica at addr, master or not, for its view of
// the cell over plain TCP, with no session, as admin.QueryStatus does.
//
// Deprecated: use admin.QueryStatus.
func QueryStatus(ctx context.Context, addr string) (*CellStatus, error) {
	var resp wire.CellStatusResponse
	if err := callReplica(ctx, Config{}, addr, wire.MethodCellStatus, &wire.CellStatusRequest{}, &resp); err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	return &CellStatus{Cell: resp.Cell, Self: resp.Self, State: resp.State, Master: resp.Master, Epoch: resp.Epoch,
		Term: resp.Term, CommitIndex: resp.CommitIndex, AppliedIndex: resp.AppliedIndex, Sessions: resp.Sessions, Nodes: resp.Nodes}, nil
}

// SessionSummary is one live session as the first release's
// Client.Sessions listed it.
//
// Deprecated: use admin.SessionInfo.
type SessionSummary struct {
	ID        uint64        `json:"id"`
	Client    string        `json:"client,omitempty"`
	Principal string        `json:"principal,omitempty"`
	Created   time.Time     `json:"created"`
	Lease     time.Duration `json:"lease_remaining_ns"`
	Handles   int           `json:"handles"`
	Locks     []string      `json:"locks,omitempty"`
}

// Sessions lists the cell's live sessions the caller may see (the admin
// every one, any other principal its own), as admin.Admin.Sessions does.
//
// Deprecated: use admin.New(c).Sessions.
func (c *Client) Sessions(ctx context.Context) ([]SessionSummary, error) {
	var resp wire.ListSessionsResponse
	if err := c.call(ctx, wire.MethodListSessions, false, &wire.ListSessionsRequest{}, &resp); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	out := make([]SessionSummary, len(resp.Sessions))
	for i, s := range resp.Sessions {
		out[i] = SessionSummary{ID: s.ID, Client: s.Client, Principal: s.Principal, Created: time.Unix(0, s.Created),
			Lease: time.Duration(s.LeaseMillis) * time.Millisecond, Handles: int(s.Handles), Locks: s.Locks}
	}
	return out, nil
}

// CallsSent reports how many calls this process's clients have put on
// the wire, KeepAlives included: a cost a benchmark divides by its work.
//
// Deprecated: a measurement hook, not part of the client's job; kept for
// the programs that read it.
func CallsSent() uint64 { return callsSent.Load() }
