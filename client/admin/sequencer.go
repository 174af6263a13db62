package admin

import (
	"context"

	"lockcell/client/internal/link"
	"lockcell/wire"
)

// SequencerStatus is the master's verdict on a sequencer.
type SequencerStatus struct {
	// Valid: signed by this cell, and its lock held right now at its
	// generation in its mode.
	Valid bool
	// Reason says why a sequencer is stale ("" when valid): the lock
	// file is gone, the lock is free, held at another generation, or in
	// the other mode.
	Reason string
}

// SequencerStatus is client.Client.CheckSequencer with the reason a stale
// sequencer is stale, for people (lockcell seq check) and logs. As for
// client.Client.CheckSequencer, a malformed or forged sequencer is an error wrapping
// client.ErrBadSequencer.
func (a *Admin) SequencerStatus(ctx context.Context, seq []byte) (SequencerStatus, error) {
	var resp wire.CheckSequencerResponse
	if err := link.Call(a.c, ctx, wire.MethodCheckSequencer, false, &wire.CheckSequencerRequest{Sequencer: seq}, &resp); err != nil {
		return SequencerStatus{}, opErr("check sequencer", "", err)
	}
	st := SequencerStatus{Valid: resp.Valid, Reason: resp.Reason}
	if !st.Valid && st.Reason == "" {
		st.Reason = "the sequencer's lock is no longer held"
	}
	return st, nil
}
