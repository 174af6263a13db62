package client

import (
	"context"
	"errors"
	"fmt"

	"lockcell/cell/wire"
)

// ErrLockBroken is the cause (context.Cause of Handle.LockContext, under
// errors.Is) when the cell's admin broke the lock the handle held
// (BreakLock): the lock is free or another's, at a later generation, and
// the handle's sequencer is stale at every resource server that checks it.
var ErrLockBroken = errors.New("lockcell: lock broken by the cell's admin")

// BreakResult is what a BreakLock did.
type BreakResult struct {
	// Holders are those the break freed, in grant order; none when the
	// lock was free (breaking a free lock succeeds and changes nothing,
	// except that a running lock-delay ends).
	Holders []LockHolder `json:"holders"`
	// Generation is the lock's generation after the break: each freed
	// holder's sequencer names an earlier one, so CheckSequencer and
	// sequencer.Guard refuse it from now on.
	Generation uint64 `json:"generation"`
}

// BreakLock frees the lock on the file name from every holder: the cell's
// admin alone may (ErrPermission otherwise), and the reason goes to the
// master's audit log and to the holders. It is replicated like any write:
// once it returns, the lock's generation has moved on, so the holders'
// sequencers are stale; the next waiter has the lock, with no lock-delay
// (a break is deliberate); and each holder's session is told
// (a LockBroken event), so its handle's lock context ends with a cause
// matching ErrLockBroken. A missing name is ErrNotFound.
func (c *Client) BreakLock(ctx context.Context, name, reason string) (BreakResult, error) {
	name = c.abs(name)
	if len(reason) > wire.MaxBreakReason {
		return BreakResult{}, opErr("break lock", name, wire.Errorf(wire.CodeBadRequest, "reason of %d bytes exceeds %d", len(reason), wire.MaxBreakReason))
	}
	var resp wire.BreakLockResponse
	if err := c.call(ctx, wire.MethodBreakLock, true, &wire.BreakLockRequest{Path: name, Reason: reason}, &resp); err != nil {
		return BreakResult{}, opErr("break lock", name, err)
	}
	return BreakResult{Holders: holdersFrom(resp.Holders), Generation: resp.LockGen}, nil
}

// lockBroken ends the lock context of the handle a LockBroken event names
// (only that handle: others of this client on the same name may be
// waiting, or be the new holder).
func (c *Client) lockBroken(ev wire.Event) {
	cause := fmt.Errorf("%w: %s held at generation %d (reason: %q)", ErrLockBroken, ev.Path, ev.Gen, ev.Reason)
	c.locks.mu.Lock()
	var hs []*Handle
	for h := range c.locks.byPath[ev.Path] {
		if h.id.Load() == ev.Handle {
			hs = append(hs, h)
		}
	}
	c.locks.mu.Unlock()
	for _, h := range hs {
		h.endBrokenLock(ev.Gen, cause)
	}
}

// endBrokenLock ends the handle's lock context if it is still that of the
// broken generation: a grant at a later generation, heard before this
// event, stays live.
func (h *Handle) endBrokenLock(gen uint64, cause error) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held == nil || held.gen != gen {
		return
	}
	h.endLock(cause)
}
