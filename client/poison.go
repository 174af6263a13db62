package client

import (
	"context"
	"errors"
)

// Poison marks the handle so that every later call on it except Close and
// Name fails at once with an error matching ErrPoisoned, without a round
// trip to the cell, and calls in flight on it end with that error too (a
// blocking Acquire withdraws its wait at the master). It is for a
// program that must make sure no other goroutine goes on using the handle
// (Chubby's Poison): the handle's lock, if any, stays held, and its
// LockContext stays live, until the handle is closed. Poison is
// idempotent and never blocks.
func (h *Handle) Poison() {
	h.mu.Lock()
	h.poisoned = true
	inflight := h.inflight
	h.inflight = nil
	h.mu.Unlock()
	for _, g := range inflight {
		g.cancel(ErrPoisoned)
	}
}

// poisonedLocked reports whether Poison was called. Called with h.mu held.
func (h *Handle) poisonedLocked() bool { return h.poisoned }

// inflightCall is a call in flight on a handle: Poison ends it with
// cancel. id tells it from the handle's others.
type inflightCall struct {
	id     uint64
	cancel context.CancelCauseFunc
}

// guarded is a call on a handle, ended as well when the handle is
// poisoned: ctx is the caller's, gctx the call's.
type guarded struct {
	h         *Handle
	ctx, gctx context.Context
	cancel    context.CancelCauseFunc
	id        uint64
}

// guard returns the guarded call of ctx: gctx ends with ctx, and with
// ErrPoisoned when the handle is poisoned. The call must end with done.
//
// Each call registers its own cancel with the handle, which Poison calls:
// two allocations a call (the call's context and its cancel). A context
// the handle's poisoning ends, joined to each call's with
// context.AfterFunc, cost six.
func (h *Handle) guard(ctx context.Context) guarded {
	gctx, cancel := context.WithCancelCause(ctx)
	g := guarded{h: h, ctx: ctx, gctx: gctx, cancel: cancel}
	h.mu.Lock()
	if h.poisoned { // since the caller's check
		h.mu.Unlock()
		cancel(ErrPoisoned)
		return g
	}
	h.guardSeq++
	g.id = h.guardSeq
	h.inflight = append(h.inflight, inflightCall{id: g.id, cancel: cancel})
	h.mu.Unlock()
	return g
}

// done releases the call and returns its error err, turned into
// ErrPoisoned when the poisoning ended the call.
func (g guarded) done(err error) error {
	h := g.h
	h.mu.Lock()
	for i, c := range h.inflight {
		if c.id == g.id {
			last := len(h.inflight) - 1
			h.inflight[i] = h.inflight[last]
			h.inflight[last] = inflightCall{}
			h.inflight = h.inflight[:last]
			break
		}
	}
	h.mu.Unlock()
	poisoned := err != nil && g.ctx.Err() == nil && errors.Is(context.Cause(g.gctx), ErrPoisoned)
	g.cancel(nil)
	if poisoned {
		return ErrPoisoned
	}
	return err
}
