package master

import (
	"context"
	"unicode/utf8"

	"lockcell/fsm"
	"lockcell/wire"
)

// breakLock frees the lock on req.Path from every holder, for the cell's
// admin alone (a replicated BreakLock: the state machine decides it again
// in the entry). The holders' sessions are told by EventLockBroken, their
// sequencers go stale because the lock's generation moves on, and the next
// waiter gets the lock at once, with no lock-delay: a break is deliberate.
// Every break asked for by the admin, done or failed, is one audit line
// with the reason and the sessions freed; a refused non-admin is the
// dispatcher's denial line.
func (e *lockEndpoint) breakLock(ctx context.Context, c *call, req *wire.BreakLockRequest) (*wire.BreakLockResponse, error) {
	c.path = req.Path
	if !c.isAdmin() {
		return nil, wire.Errorf(wire.CodePermission, "%s: only the cell's admin may break a lock", req.Path)
	}
	resp, err := e.breakLockAsAdmin(ctx, c, req)
	result := "ok"
	var freed []uint64
	if err != nil {
		we := toWire(err).(*wire.Error)
		result = we.Code.String() + ": " + we.Msg
	} else {
		for _, h := range resp.Holders {
			freed = append(freed, h.Session)
		}
	}
	e.cfg.Audit.Info("audit", "principal", c.caller.Principal, "op", c.h.Method.String(), "path", req.Path,
		"session", c.h.Session, "reason", req.Reason, "freed_sessions", freed, "result", result)
	return resp, err
}

func (e *lockEndpoint) breakLockAsAdmin(ctx context.Context, c *call, req *wire.BreakLockRequest) (*wire.BreakLockResponse, error) {
	if err := wire.ValidateName(e.cfg.Cell, req.Path); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidName, "%v", err)
	}
	if len(req.Reason) > wire.MaxBreakReason || !utf8.ValidString(req.Reason) {
		return nil, wire.Errorf(wire.CodeBadRequest, "a break's reason must be valid UTF-8 of at most %d bytes", wire.MaxBreakReason)
	}
	res, err := e.w.apply(ctx, c, &fsm.Command{Payload: &fsm.BreakLockArgs{Path: req.Path, Reason: req.Reason}})
	if err != nil {
		return nil, err
	}
	resp := &wire.BreakLockResponse{LockGen: res.LockGen}
	e.r.read(func(v fsm.View) {
		for _, ho := range res.Broken {
			p, _ := v.SessionPrincipal(ho.Session)
			resp.Holders = append(resp.Holders, wire.LockHolder{Session: ho.Session, Principal: p})
		}
	})
	return resp, nil
}

// brokenLockEvent tells the session of a holder freed by a break which of
// its handles lost the lock, and the generation it held.
func brokenLockEvent(c fsm.Change) sessionEvent {
	return sessionEvent{c.Session, wire.Event{Kind: wire.EventLockBroken, Path: c.Path, Handle: c.Handle, Gen: c.Seq, Reason: c.Reason}}
}
