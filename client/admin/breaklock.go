package admin

import (
	"context"

	"lockcell/client"
	"lockcell/client/internal/link"
	"lockcell/wire"
)

// BreakResult is what a BreakLock did.
type BreakResult struct {
	// Holders are those the break freed, in grant order; none when the
	// lock was free (breaking a free lock succeeds and changes nothing,
	// except that a running lock-delay ends).
	Holders []client.LockHolder `json:"holders"`
	// Generation is the lock's generation after the break: each freed
	// holder's sequencer names an earlier one, so client.Client.CheckSequencer and
	// sequencer.Guard refuse it from now on.
	Generation uint64 `json:"generation"`
}

// BreakLock frees the lock on the file name from every holder: the cell's
// admin alone may (client.ErrPermission otherwise), and the reason goes to the
// master's audit log and to the holders. It is replicated like any write:
// once it returns, the lock's generation has moved on, so the holders'
// sequencers are stale; the next waiter has the lock, with no lock-delay
// (a break is deliberate); and each holder's session is told
// (a LockBroken event), so its handle's lock context ends with a cause
// matching client.ErrLockBroken. A missing name is client.ErrNotFound.
func (a *Admin) BreakLock(ctx context.Context, name, reason string) (BreakResult, error) {
	name = link.Abs(a.c, name)
	if len(reason) > wire.MaxBreakReason {
		return BreakResult{}, opErr("break lock", name, wire.Errorf(wire.CodeBadRequest, "reason of %d bytes exceeds %d", len(reason), wire.MaxBreakReason))
	}
	var resp wire.BreakLockResponse
	if err := link.Call(a.c, ctx, wire.MethodBreakLock, true, &wire.BreakLockRequest{Path: name, Reason: reason}, &resp); err != nil {
		return BreakResult{}, opErr("break lock", name, err)
	}
	return BreakResult{Holders: holdersFrom(resp.Holders), Generation: resp.LockGen}, nil
}
