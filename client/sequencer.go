package client

import (
	"context"

	"lockcell/cell/wire"
)

// GetSequencer returns a sequencer for the lock this handle holds: an
// opaque, cell-signed byte string naming the lock, its mode and its lock
// generation, to pass to resource servers (see package sequencer). It
// fails with ErrNotHeld when the handle holds no lock.
func (h *Handle) GetSequencer(ctx context.Context) ([]byte, error) {
	var resp wire.SequencerResponse
	if err := h.do(ctx, "sequencer", wire.MethodGetSequencer, &wire.HandleRequest{Handle: h.id}, &resp); err != nil {
		return nil, err
	}
	return resp.Sequencer, nil
}

// SetSequencer attaches seq to the handle: from now on every call on the
// handle (except Close and Release) fails with ErrStaleSequencer unless
// seq's lock is still held at its generation and mode, and for writes the
// check is atomic with the write. It fails at once if seq is not valid
// now. A nil seq detaches.
func (h *Handle) SetSequencer(ctx context.Context, seq []byte) error {
	if err := h.check(); err != nil {
		return opErr("set sequencer", h.path, err)
	}
	if seq != nil {
		ok, err := h.c.CheckSequencer(ctx, seq)
		if err != nil {
			return opErr("set sequencer", h.path, err)
		}
		if !ok {
			return opErr("set sequencer", h.path, wire.Errorf(wire.CodeStaleSequencer, "the sequencer's lock is no longer held"))
		}
	}
	h.mu.Lock()
	h.dirty = true
	h.seq = append([]byte(nil), seq...)
	if seq == nil {
		h.seq = nil
	}
	h.mu.Unlock()
	return nil
}

// CheckSequencer asks the master whether seq is still valid: signed by
// this cell, and its lock held right now at that generation in that mode.
// A malformed or forged sequencer is an error wrapping ErrBadSequencer.
// Client satisfies sequencer.Checker.
func (c *Client) CheckSequencer(ctx context.Context, seq []byte) (bool, error) {
	var resp wire.CheckSequencerResponse
	if err := c.call(ctx, wire.MethodCheckSequencer, false, &wire.CheckSequencerRequest{Sequencer: seq}, &resp); err != nil {
		return false, opErr("check sequencer", "", err)
	}
	return resp.Valid, nil
}
