package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/wire"
)

// A supervised session (Config.RenewSession): after an expiry the
// keep-alive loop opens a new session (renew), re-opens every open handle
// in it (reopen), and only then lets the calls that waited for it go on
// (sessionState.endRenewal). A call belongs to the session generation it
// was made in: roundTrip never sends it in another, since the handle ids
// it names and the request id it carries are that session's; callAt moves
// it to the next session when it cannot have taken effect in its own.

// sessionGone is roundTrip's error when the session a call belongs to has
// expired (or was renewed since). doubt says a try may have reached the
// master without an answer, so a mutating call may have taken effect.
type sessionGone struct {
	err   error
	doubt bool
}

func (e *sessionGone) Error() string { return e.err.Error() }
func (e *sessionGone) Unwrap() error { return e.err }

// callAt runs one call in the current session (h == nil) or in the
// session h was last opened in (h.bind sets its id in the request). With Config.RenewSession, a call
// whose session expired before it could take effect (refused as expired,
// never sent, or one that changes nothing) waits for the renewal, for at
// most RetryTimeout and while ctx lives, and runs again in the new
// session. A mutating call that may have taken effect (seq != 0 and a
// try went unanswered) fails with the expiry: its outcome died with the
// session. It returns the generation of the session that answered.
func (c *Client) callAt(ctx context.Context, m wire.Method, seq uint64, req, resp any, h *Handle) (uint64, error) {
	gen, err := c.bindCall(h, req)
	if err != nil {
		return gen, err
	}
	for {
		_, err = c.roundTrip(ctx, callSpec{method: m, seq: seq, req: req, resp: resp, budget: c.cfg.RetryTimeout, gen: gen})
		// After an idle close the call waits for the new session whatever
		// RenewSession says (idle.go); the close may already be renewed.
		if err == nil || (!c.cfg.RenewSession && !c.sess.idleClosed() && c.sess.generation() == gen) {
			return gen, err
		}
		gone, ok := err.(*sessionGone) // roundTrip's own, unwrapped
		if !ok || (gone.doubt && seq != 0) {
			return gen, err
		}
		if werr := c.awaitRenewal(ctx, gen, c.cfg.RetryTimeout); werr != nil {
			if errors.Is(werr, ErrSessionExpired) {
				return gen, err
			}
			return gen, werr
		}
		prev := gen
		if gen, err = c.bindCall(h, req); err != nil {
			return gen, err
		}
		if gen == prev { // the handle was not moved (closed meanwhile)
			return gen, gone
		}
	}
}

// bindCall returns the session generation a call belongs to: h's, once
// its id is set in req, or the current session's when h is nil.
func (c *Client) bindCall(h *Handle, req any) (uint64, error) {
	if h != nil {
		return h.bind(req)
	}
	return c.sess.generation(), nil
}

// callHandle is a call on h: it names h's id in the session h was last
// opened in, and moves with h to a renewed session (callAt).
func (c *Client) callHandle(ctx context.Context, h *Handle, m wire.Method, req, resp any) error {
	var seq uint64
	if m.Mutating() {
		seq = c.ids.begin()
		defer c.ids.end(seq)
	}
	_, err := c.callAt(ctx, m, seq, req, resp, h)
	return err
}

// bind sets h's current id in req and returns the session generation
// that id belongs to; a handle the renewal could not re-open fails with
// why.
func (h *Handle) bind(req any) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.gen, h.lost
	}
	id := h.id.Load()
	switch r := req.(type) {
	case *wire.HandleRequest:
		r.Handle = id
	case *wire.SetContentsRequest:
		r.Handle = id
	case *wire.AcquireRequest:
		r.Handle = id
	case *wire.SetACLRequest:
		r.Handle = id
	case *wire.RequestReleaseRequest:
		r.Handle = id
	case *wire.CancelAcquireRequest:
		r.Handle = id
	case *wire.WatchSubtreeRequest:
		r.Handle = id
	}
	return h.gen, nil
}

// renewBackoffCap bounds the wait between a renewal's refused tries.
const renewBackoffCap = 5 * time.Second

// renew opens a new session after an expiry, or after an idle close once
// a call wants one (idle.go), and re-opens the open handles in it, trying
// again (with back-off) until it succeeds or the Client is closed. It
// reports false when the keep-alive loop should end: the session expired
// and Config.RenewSession is off, or the Client is closing.
func (c *Client) renew() bool {
	idle := c.sess.idleClosed()
	if (!c.cfg.RenewSession && !idle) || c.sess.movedAway() {
		return false
	}
	defer c.sess.endRenewal() // also when Close ends the renewal
	// Each CreateSession already searches for a master for RetryTimeout;
	// a cell that answers but refuses (a certificate, a cap on sessions)
	// is asked again after a wait that doubles up to renewBackoffCap.
	wait := backoffBase
	for c.base.Err() == nil && !c.sess.closingOrClosed() {
		var resp wire.CreateSessionResponse
		sent, err := c.roundTrip(c.base, callSpec{method: wire.MethodCreateSession, budget: c.cfg.RetryTimeout, renewal: true,
			req: identityRequest(c.cfg.ClientName, declaredIdentity(&c.cfg)), resp: &resp})
		if err != nil {
			if c.base.Err() != nil || errors.Is(err, ErrClosed) {
				return false
			}
			c.log.Warn("lockcell: could not open a new session after the expiry; trying again", "err", err, "in", wait)
			if c.sleep(c.base, wait) != nil {
				return false
			}
			wait = min(2*wait, renewBackoffCap)
			continue
		}
		gen, ok := c.sess.start(resp.Session, resp.Epoch, sent.Add(time.Duration(resp.LeaseMillis)*time.Millisecond), resp.LeaseMillis)
		if !ok {
			return false // Close has begun; the unused session ends with its lease
		}
		c.sess.setSecret(resp.ResumeSecret) // the new session's ticket
		if c.cache != nil {
			// The new session's master never sent us invalidations for
			// what the old one cached.
			c.cache.Purge()
			c.cache.Enable()
		}
		if !c.reopenAll(gen, resp.Session, resp.Epoch) {
			continue // the new session expired too (or Close began)
		}
		c.sess.endRenewal()
		if idle {
			c.log.Info("lockcell: new session opened after the idle one was closed", "session", resp.Session)
		} else {
			c.log.Info("lockcell: session renewed after its expiry", "session", resp.Session)
		}
		c.emit(Event{Kind: Renewed, Epoch: resp.Epoch, Session: resp.Session})
		return true
	}
	return false
}

// reopenAll re-opens every open handle of an earlier session in the
// session of generation gen; false: that session is gone as well.
func (c *Client) reopenAll(gen, session, epoch uint64) bool {
	for _, h := range c.streams.all() {
		if !c.reopen(h, gen, session, epoch) {
			return false
		}
	}
	return true
}

// reopen re-opens h in the session gen, with the request it was opened
// with, and tells its stream how that went (Reopened or ReopenFailed).
// A handle that created its node with Excl takes the node back if it is
// still that one (the same instance). false: the session is gone.
func (c *Client) reopen(h *Handle, gen, session, epoch uint64) bool {
	h.mu.Lock()
	skip := h.closed || h.lost != nil || h.gen >= gen || h.opened == nil
	var req wire.OpenRequest
	if !skip {
		req = *h.opened
	}
	old, oldInstance := h.id.Load(), h.instance.Load()
	h.mu.Unlock()
	if skip {
		return true
	}
	req.Cache, req.CacheMissing = false, false
	resp, err := c.reopenCall(gen, &req)
	if errors.Is(err, ErrExists) && req.Flags&wire.OpenExcl != 0 {
		again := req
		again.Flags &^= wire.OpenCreate | wire.OpenExcl
		again.Contents = nil
		if resp, err = c.reopenCall(gen, &again); err == nil && !resp.Missing && resp.Stat.Instance != oldInstance {
			c.closeIdle([]uint64{resp.Handle})
			err = wire.Errorf(wire.CodeExists, "%s exists again, created by another session", h.path)
		}
	}
	var gone *sessionGone
	if errors.As(err, &gone) || errors.Is(err, ErrClosed) || c.base.Err() != nil {
		return false
	}
	if err == nil && resp.Missing {
		err = missingErr(h.path)
	}
	if err == nil && h.sequential && resp.Stat.Instance != oldInstance {
		// Not the node this handle made: that one is gone, and the
		// name was made again by hand.
		c.closeIdle([]uint64{resp.Handle})
		err = wire.Errorf(wire.CodeNotFound, "%s was deleted and created again by another session", h.path)
	}
	now := c.clock.Now()
	if err != nil {
		lost := fmt.Errorf("%w: %s was not re-opened in the new session: %w", ErrHandleInvalid, h.path, err)
		h.mu.Lock()
		h.lost = lost
		h.mu.Unlock()
		c.log.Warn("lockcell: a handle could not be re-opened after the session was renewed", "path", h.path, "err", err)
		h.events.push(Event{Kind: ReopenFailed, Epoch: epoch, Time: now, Path: h.path, Session: session, Err: lost})
		return true
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.closeIdle([]uint64{resp.Handle})
		return true
	}
	h.id.Store(resp.Handle)
	h.instance.Store(resp.Stat.Instance)
	h.gen = gen
	h.dirty = true // its pool token is the old session's
	h.mu.Unlock()
	c.streams.rekey(old, resp.Handle, h)
	st := resp.Stat
	h.events.push(Event{Kind: Reopened, Epoch: epoch, Time: now, Path: h.path, Session: session,
		Instance: st.Instance, ContentGen: st.ContentGen, LockGen: st.LockGen})
	return true
}

// reopenCall sends one re-open in the session gen, searching for a master
// for as long as the Client lives.
func (c *Client) reopenCall(gen uint64, req *wire.OpenRequest) (*wire.OpenResponse, error) {
	seq := c.ids.begin()
	defer c.ids.end(seq)
	for {
		ctx, cancel := context.WithTimeout(c.base, c.cfg.RetryTimeout)
		var resp wire.OpenResponse
		_, err := c.roundTrip(ctx, callSpec{method: wire.MethodOpen, seq: seq, req: req, resp: &resp, budget: c.cfg.RetryTimeout, gen: gen})
		cancel()
		if errors.Is(err, ErrNoMaster) && c.base.Err() == nil {
			continue
		}
		return &resp, err
	}
}
