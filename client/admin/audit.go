package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/client/internal/link"
	"lockcell/wire"
)

// AuditRecord is one mutation of the cell's audit trail: what was done
// (Op: create_session, close_session, expire_session, resume_session,
// create, write,
// delete, acquire, release, grant, break_lock, set_acl, member_put,
// member_remove, member_seed, epoch, backup, expire_ttl; "gap" for records the
// answering replica does not hold), by whom, to which name, with what
// result. Index orders the trail and is the same on every replica.
// Proxy, when set, is the principal of the trusted proxy the call came
// through on Principal's behalf.
type AuditRecord struct {
	Index     uint64 `json:"index"`
	Time      string `json:"time"`
	Op        string `json:"op"`
	Principal string `json:"principal,omitempty"`
	Admin     bool   `json:"admin,omitempty"`
	Proxy     string `json:"proxy,omitempty"`
	Session   uint64 `json:"session,omitempty"`
	Client    string `json:"client,omitempty"`
	Host      string `json:"host,omitempty"`
	PID       int64  `json:"pid,omitempty"`
	Program   string `json:"program,omitempty"`
	Name      string `json:"name,omitempty"`
	Detail    string `json:"detail,omitempty"`
	Result    string `json:"result"`
	Error     string `json:"error,omitempty"`
}

// AuditQuery selects audit records: from index Since on (0: the oldest
// the replica keeps), at or after SinceTime (zero: any), about Prefix or a
// name below it ("": all), at most Max (0: the most one reply holds).
// Wait, when positive, lets a read that finds nothing wait up to that
// long (at most 30 s) for a record to be written.
type AuditQuery struct {
	Since     uint64
	SinceTime time.Time
	Prefix    string
	Max       int
	Wait      time.Duration
}

// AuditPage is a run of records in index order. Next is the Since of the
// query that continues after them; Oldest is the first index the replica
// still keeps, Last the newest it holds; Replica is the replica's id.
type AuditPage struct {
	Records []AuditRecord
	Next    uint64
	Oldest  uint64
	Last    uint64
	Replica string
}

// ReadAudit reads the audit trail from the replica at addr, master or not
// (every replica holds the same records), over a connection made as cfg
// says (its Dialer, TLS and DialTimeout). It needs no session, and only
// the cell's admin may read it (client.ErrPermission).
func ReadAudit(ctx context.Context, cfg client.Config, addr string, q AuditQuery) (*AuditPage, error) {
	req := &wire.AuditReadRequest{Since: q.Since, Prefix: q.Prefix, Max: uint32(max(q.Max, 0)), WaitMillis: q.Wait.Milliseconds()}
	if !q.SinceTime.IsZero() {
		req.SinceTime = q.SinceTime.UnixNano()
	}
	var resp wire.AuditReadResponse
	if err := link.CallReplica(ctx, cfg, addr, wire.MethodAuditRead, req, &resp); err != nil {
		return nil, fmt.Errorf("audit trail of %s: %w", addr, err)
	}
	page := &AuditPage{Next: resp.Next, Oldest: resp.Oldest, Last: resp.Last, Replica: resp.Replica,
		Records: make([]AuditRecord, len(resp.Records))}
	for i, line := range resp.Records {
		if err := json.Unmarshal(line, &page.Records[i]); err != nil {
			return nil, fmt.Errorf("audit trail of %s: record %d: %w", addr, i, err)
		}
	}
	return page, nil
}
