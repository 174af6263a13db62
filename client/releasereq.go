package client

import (
	"context"
	"time"
	"unicode/utf8"

	"lockcell/wire"
)

// ReleaseRequest is another session's request that a handle let go of the
// lock it holds (Handle.RequestRelease), as the holder hears it: the
// ReleaseRequest of a ReleaseRequested event on the holding handle's
// Events. It is advice: the lock stays held until the holder releases it
// (or closes the handle, or its session ends).
type ReleaseRequest struct {
	// Path names the lock's file.
	Path string
	// Generation is the lock's generation when the request was made: the
	// holding it is about (see Stat.LockGen and sequencers).
	Generation uint64
	// Session and Principal name the requester ("" in a cell without TLS).
	Session   uint64
	Principal string
	// Reason is the requester's own words, at most MaxReleaseReason bytes.
	Reason string
	// Time is when this client heard the request.
	Time time.Time
}

// RequestRelease asks every other holder of the lock on this handle's node
// to let it go, with a reason that reaches each of them (a
// ReleaseRequested event on the holding handle's Events) and the master's
// audit log. It returns
// how many holders were asked: 0 when the lock is free or held only
// through this handle. Nothing is freed: each holder decides, and a
// waiter's Acquire is granted when they let go.
//
// The caller needs the write permission on the node (the one Acquire
// needs) or to be the cell's admin (ErrPermission otherwise; ErrNotFound
// when it may neither read nor write the node). A caller that may not
// read the node learns only whether anyone was asked (0 or 1). One session
// may ask the holders of one lock once per RequestReleaseInterval: sooner
// fails with ErrTooMany (also when an earlier try of this same call, whose
// answer was lost, did ask them). A request is not replicated: one the
// master queued for a holder that had not fetched it when the master
// failed over is lost, and the caller may ask again.
func (h *Handle) RequestRelease(ctx context.Context, reason string) (int, error) {
	if len(reason) > MaxReleaseReason || !utf8.ValidString(reason) {
		return 0, opErr("request release", h.path, wire.Errorf(wire.CodeBadRequest,
			"the reason must be valid UTF-8 of at most %d bytes, got %d bytes", MaxReleaseReason, len(reason)))
	}
	var resp wire.RequestReleaseResponse
	if err := h.do(ctx, "request release", wire.MethodRequestRelease, &wire.RequestReleaseRequest{Handle: h.id.Load(), Reason: reason}, &resp); err != nil {
		return 0, err
	}
	return int(resp.Asked), nil
}

// releaseRequested returns the request a ReleaseRequested event carries
// if the handle it names still holds the lock at the generation it was
// asked at; nil when it is moot (about an earlier grant, or heard after
// the holder let go), and then nobody hears it.
func (c *Client) releaseRequested(ev wire.Event) *ReleaseRequest {
	c.locks.mu.Lock()
	var hs []*Handle
	for h := range c.locks.byPath[ev.Path] {
		if h.id.Load() == ev.Handle {
			hs = append(hs, h)
		}
	}
	c.locks.mu.Unlock()
	for _, h := range hs {
		h.mu.Lock()
		holds := h.held != nil && h.held.gen == ev.Gen
		h.mu.Unlock()
		if holds {
			return &ReleaseRequest{Path: ev.Path, Generation: ev.Gen, Session: ev.From, Principal: ev.FromPrincipal,
				Reason: ev.Reason, Time: c.clock.Now()}
		}
	}
	return nil
}
