package client

import (
	"context"
	"errors"
)

// ErrPoisoned is the error of every call on a handle after Poison (but
// Close), and of the calls in flight on it when Poison was called.
var ErrPoisoned = errors.New("lockcell: handle poisoned")

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
	defer h.mu.Unlock()
	h.lifeLocked()
	h.kill(ErrPoisoned)
}

// lifeLocked returns the context that Poison ends, creating it on first
// use. Called with h.mu held.
func (h *Handle) lifeLocked() context.Context {
	if h.life == nil {
		h.life, h.kill = context.WithCancelCause(context.Background())
	}
	return h.life
}

// poisonedLocked reports whether Poison was called. Called with h.mu held.
func (h *Handle) poisonedLocked() bool { return h.life != nil && h.life.Err() != nil }

// guard returns ctx, ended as well when the handle is poisoned, and the
// function that releases it; call done with the call's error, which it
// turns into ErrPoisoned when the poisoning ended the call.
func (h *Handle) guard(ctx context.Context) (context.Context, func(error) error) {
	h.mu.Lock()
	life := h.lifeLocked()
	h.mu.Unlock()
	gctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(life, func() { cancel(ErrPoisoned) })
	return gctx, func(err error) error {
		stop()
		poisoned := err != nil && ctx.Err() == nil && errors.Is(context.Cause(gctx), ErrPoisoned)
		cancel(nil)
		if poisoned {
			return ErrPoisoned
		}
		return err
	}
}
