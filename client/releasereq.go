package client

import (
	"context"
	"time"
	"unicode/utf8"

	"lockcell/cell/wire"
)

// ReleaseRequest is another session's request that a handle let go of the
// lock it holds (Handle.RequestRelease), as the holder hears it on
// Handle.ReleaseRequested. It is advice: the lock stays held until the
// holder releases it (or closes the handle, or its session ends).
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

// releaseQueue is how many requests a handle keeps for its holder to read.
const releaseQueue = 16

// RequestRelease asks every other holder of the lock on this handle's node
// to let it go, with a reason that reaches each of them (a ReleaseRequest
// on the holding handle's ReleaseRequested channel, and a ReleaseRequested
// event on their Client's Events) and the master's audit log. It returns
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
	if err := h.do(ctx, "request release", wire.MethodRequestRelease, &wire.RequestReleaseRequest{Handle: h.id, Reason: reason}, &resp); err != nil {
		return 0, err
	}
	return int(resp.Asked), nil
}

// ReleaseRequested returns the channel on which this handle hears the
// requests of other sessions that it let go of the lock it holds, in the
// order the master sent them. Only requests about the holding the handle
// has when they arrive are delivered (one about an earlier grant, or
// heard after Release, is moot and dropped). The channel keeps the
// oldest 16 unread requests; later ones are dropped with a warning in the
// client's log until the holder reads (it has been asked already). It is
// never closed: select on it together with LockContext().Done().
func (h *Handle) ReleaseRequested() <-chan ReleaseRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.askedLocked()
}

func (h *Handle) askedLocked() chan ReleaseRequest {
	if h.asked == nil {
		h.asked = make(chan ReleaseRequest, releaseQueue)
	}
	return h.asked
}

// releaseRequested hands a ReleaseRequested event to the handle it names,
// if that handle still holds the lock at the generation it was asked at,
// and reports whether one took it.
func (c *Client) releaseRequested(ev wire.Event) bool {
	rr := ReleaseRequest{Path: ev.Path, Generation: ev.Gen, Session: ev.From, Principal: ev.FromPrincipal,
		Reason: ev.Reason, Time: c.clock.Now()}
	c.locks.mu.Lock()
	var hs []*Handle
	for h := range c.locks.byPath[ev.Path] {
		if h.id == ev.Handle {
			hs = append(hs, h)
		}
	}
	c.locks.mu.Unlock()
	took := false
	for _, h := range hs {
		took = h.askedToRelease(rr) || took
	}
	return took
}

// askedToRelease queues rr for the holder unless it is about another
// holding than the handle's, or the holder has releaseQueue unread.
func (h *Handle) askedToRelease(rr ReleaseRequest) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil || h.held.gen != rr.Generation {
		return false
	}
	select {
	case h.askedLocked() <- rr:
		return true
	default:
		h.c.log.Warn("lockcell: release request dropped, the holder is not reading ReleaseRequested()",
			"path", rr.Path, "from_session", rr.Session, "reason", rr.Reason)
		return true // the holder has been asked, and its unread requests say so
	}
}
