package client

import (
	"context"
	"fmt"
	"log/slog"

	"lockcell/sequencer"
	"lockcell/wire"
)

// Sequencer is a lock's sequencer as the cell signed it: the bytes to
// pass to resource servers (package sequencer), with accessors that read
// the fields they carry, without a call, for logs and for fencing a
// resource by generation directly (a SQL row's generation column, say).
//
// A Sequencer is a []byte, so it goes unchanged wherever a sequencer's
// bytes go: SetSequencer, IfSequencer, CheckSequencer, sequencer.Guard,
// sequencer.EncodeText. The accessors trust the bytes to be a sequencer,
// as GetSequencer's always are; for bytes from elsewhere (a header, an
// environment variable), Fields reports a malformed one, for which the
// accessors return zero values. Only the cell can tell a forged one
// (CheckSequencer).
type Sequencer []byte

// Fields decodes the sequencer's fields; the error wraps
// sequencer.ErrMalformed when the bytes are not a sequencer.
func (s Sequencer) Fields() (sequencer.Sequencer, error) { return sequencer.Parse(s) }

func (s Sequencer) fields() sequencer.Sequencer {
	f, _ := sequencer.Parse(s)
	return f
}

// Path is the name of the lock's file.
func (s Sequencer) Path() string { return s.fields().Path }

// Mode is the mode the lock was held in when the sequencer was issued:
// Exclusive, Shared, or Permit for a holder of a semaphore's permit
// (whose sequencer a resource's Guard confirms at the cell, never by
// comparing generations: the holders hold at once).
func (s Sequencer) Mode() LockMode { return LockMode(s.fields().Mode) }

// Generation is the lock generation the sequencer was issued at: it grows
// each time the lock goes from free to held, so a larger one is a later
// holder, and a resource that keeps the largest it has seen per lock
// can refuse any older holder's writes.
func (s Sequencer) Generation() uint64 { return s.fields().Generation }

// Cell is the name of the cell that issued the sequencer.
func (s Sequencer) Cell() string { return s.fields().Cell }

// String renders the fields for people, for instance
// "/ls/local/jobs exclusive generation 42 (cell local)".
func (s Sequencer) String() string {
	f, err := s.Fields()
	if err != nil {
		return fmt.Sprintf("malformed sequencer (%d bytes)", len(s))
	}
	return f.String()
}

// LogValue logs the sequencer as its fields (path, mode, generation,
// cell), not as bytes: slog.Any("sequencer", seq).
func (s Sequencer) LogValue() slog.Value {
	f, err := s.Fields()
	if err != nil {
		return slog.StringValue(s.String())
	}
	return slog.GroupValue(slog.String("path", f.Path), slog.String("mode", f.Mode.String()),
		slog.Uint64("generation", f.Generation), slog.String("cell", f.Cell))
}

// GetSequencer returns a sequencer for the lock this handle holds: a
// cell-signed byte string naming the lock, its mode and its lock
// generation, to pass to resource servers (see package sequencer), whose
// fields its methods read. It fails with ErrNotHeld when the handle holds
// no lock.
//
// While the handle's LockContext lives, it returns the sequencer the
// master sent with the grant, without a call: the same bytes the master
// would sign for that grant. Like any sequencer it may be stale by the
// time it is used (the lock broken or lost since); the resource server's
// check is what fences, not this call.
func (h *Handle) GetSequencer(ctx context.Context) (Sequencer, error) {
	if err := h.check(); err != nil {
		return nil, opErr("sequencer", h.path, err)
	}
	if seq := h.grantedSequencer(); seq != nil {
		return seq, nil
	}
	var resp wire.SequencerResponse
	if err := h.do(ctx, "sequencer", wire.MethodGetSequencer, &wire.HandleRequest{Handle: h.id.Load()}, &resp); err != nil {
		return nil, err
	}
	return resp.Sequencer, nil
}

// SetSequencer attaches seq to the handle: from now on every call on the
// handle (except Close and Release) fails with ErrStaleSequencer unless
// seq's lock is still held at its generation and mode, and for writes the
// check is atomic with the write. As for CheckSequencer, the principal
// needs read permission on the lock's file. It fails at once if seq is
// not valid now. A nil seq detaches.
func (h *Handle) SetSequencer(ctx context.Context, seq []byte) error {
	if err := h.check(); err != nil {
		return opErr("set sequencer", h.path, err)
	}
	if seq != nil {
		valid, reason, err := h.c.sequencerStatus(ctx, seq)
		if err != nil {
			return opErr("set sequencer", h.path, err)
		}
		if !valid {
			return opErr("set sequencer", h.path, wire.Errorf(wire.CodeStaleSequencer, "%s", reason))
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
// It needs read permission on the lock's file: to a principal without it
// every sequencer of that lock is stale, as if the file were gone. A
// malformed or forged sequencer is an error wrapping ErrBadSequencer.
// Client satisfies sequencer.Checker.
func (c *Client) CheckSequencer(ctx context.Context, seq []byte) (bool, error) {
	valid, _, err := c.sequencerStatus(ctx, seq)
	return valid, err
}

// sequencerStatus asks the master for its verdict on seq: whether it is
// valid and, when not, why (for people and logs: package admin's
// SequencerStatus).
func (c *Client) sequencerStatus(ctx context.Context, seq []byte) (valid bool, reason string, err error) {
	var resp wire.CheckSequencerResponse
	if err := c.call(ctx, wire.MethodCheckSequencer, false, &wire.CheckSequencerRequest{Sequencer: seq}, &resp); err != nil {
		return false, "", opErr("check sequencer", "", err)
	}
	if !resp.Valid && resp.Reason == "" {
		resp.Reason = "the sequencer's lock is no longer held"
	}
	return resp.Valid, resp.Reason, nil
}

// ReleaseOption adjusts a Release.
type ReleaseOption func(*releaseOptions)

type releaseOptions struct {
	seq    []byte
	fenced bool
}

// IfSequencer fences a Release with seq, a sequencer of this handle's
// lock (GetSequencer): the lock is released only if it is still held at
// seq's generation and in seq's mode, checked atomically with the release
// at the master. Otherwise the Release fails with an error matching
// ErrStaleSequencer and changes nothing: the lock has moved on since seq
// was issued (released and taken again, by anyone, at a later
// generation). A sequencer of another lock fails with ErrBadRequest, a
// forged, malformed or missing one with ErrBadSequencer.
func IfSequencer(seq []byte) ReleaseOption {
	return func(o *releaseOptions) { o.seq, o.fenced = seq, true }
}
