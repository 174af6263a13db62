package cell

import (
	"context"
	"errors"
	"time"

	"lockcell/audit"
	"lockcell/master"
	"lockcell/wire"
)

// auditRead answers AuditRead from this replica's own trail: every
// replica holds the same records (package audit), so any of them serves
// the cell's whole story, master or not. The trail names every principal
// and every name written, so only the admin may read it, refused before
// anything is read.
func (s *Server) auditRead(ctx context.Context, caller master.Caller, body []byte) (*wire.AuditReadResponse, error) {
	if caller.Principal != s.cfg.admin() {
		return nil, wire.Errorf(wire.CodePermission, "only the cell admin may read the audit trail")
	}
	var req wire.AuditReadRequest
	if len(body) > 0 {
		if err := wire.Decode(body, &req); err != nil {
			return nil, err
		}
	}
	if req.Prefix != "" {
		if err := wire.ValidateName(s.cfg.Cell, req.Prefix); err != nil {
			return nil, err
		}
	}
	q := audit.Query{Since: req.Since, Prefix: req.Prefix, MaxRecords: int(req.Max), MaxBytes: wire.MaxAuditReplyBytes}
	if q.MaxRecords <= 0 || q.MaxRecords > wire.MaxAuditRecords {
		q.MaxRecords = wire.MaxAuditRecords
	}
	if req.SinceTime > 0 {
		q.SinceTime = time.Unix(0, req.SinceTime)
	}
	trail := s.rep.Audit()
	wait := time.Duration(min(max(req.WaitMillis, 0), wire.MaxAuditWaitMillis)) * time.Millisecond
	deadline := time.Now().Add(wait)
	for {
		page, err := trail.Read(q)
		if err != nil {
			return nil, wire.Errorf(wire.CodeInternal, "replica %s: %v", s.cfg.Self, err)
		}
		if len(page.Lines) > 0 || wait <= 0 || !time.Now().Before(deadline) {
			return &wire.AuditReadResponse{Records: page.Lines, Next: page.Next, Oldest: page.Oldest, Last: page.Last,
				Replica: s.cfg.Self}, nil
		}
		// Nothing selected yet: wait for the trail to pass what was
		// looked at, then look again from there.
		q.Since = page.Next
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err = trail.Wait(wctx, max(page.Next, 1)-1)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return nil, wire.Errorf(wire.CodeCanceled, "audit read: %v", ctx.Err())
			}
			return nil, wire.Errorf(wire.CodeInternal, "replica %s: %v", s.cfg.Self, err)
		}
	}
}
