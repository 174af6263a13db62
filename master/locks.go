package master

import (
	"context"
	"errors"
	"time"

	"lockcell/fsm"
	"lockcell/sequencer"
	"lockcell/wire"
)

// release frees the handle's lock. A sequencer makes the release fenced:
// it applies only while the lock is held at the sequencer's generation,
// checked in the same entry, so a holder acting on an old grant cannot
// free a later one.
func (e *lockEndpoint) release(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.Empty, error) {
	fence, err := e.r.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	if fence != nil {
		var path string
		var ok bool
		e.r.read(func(v fsm.View) { path, ok = v.HandlePath(c.h.Session, req.Handle) })
		if ok && path != fence.Path {
			return nil, wire.Errorf(wire.CodeBadRequest, "the sequencer names the lock of %s, not of this handle's %s", fence.Path, path)
		}
	}
	cmd := commandOf(fsm.ReleaseArgs{Handle: req.Handle})
	cmd.Fence = fence
	_, err = e.w.apply(ctx, c, cmd)
	return &wire.Empty{}, err
}

// getSequencer answers a sequencer for the lock the handle holds, signed
// with the cell's key, after the leadership proof.
func (e *lockEndpoint) getSequencer(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.SequencerResponse, error) {
	fence, err := e.r.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	var resp *wire.SequencerResponse
	err = e.r.view(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		if err := validFence(v, c, fence); err != nil {
			return err
		}
		held, err := v.HeldLock(c.h.Session, req.Handle)
		if err != nil {
			return err
		}
		seq := sequencer.Sign(v.CellKey(), sequencer.Sequencer{Cell: e.cfg.Cell, Path: held.Path,
			Mode: sequencer.Mode(held.Mode), Generation: held.Generation})
		resp = &wire.SequencerResponse{Sequencer: seq}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// acquire takes a lock. A blocking acquire queues in the replicated FIFO
// and parks here until the state machine hands it the lock (in the entry
// that released it), the node goes away, or the caller gives up; giving up
// withdraws the wait through Raft, undoing a grant that raced the cancel.
func (e *lockEndpoint) acquire(ctx context.Context, c *call, req *wire.AcquireRequest) (*wire.AcquireResponse, error) {
	if req.Mode != wire.LockExclusive && req.Mode != wire.LockShared {
		return nil, wire.Errorf(wire.CodeBadRequest, "unknown lock mode %d", req.Mode)
	}
	var woke chan struct{}
	key := waitKey{c.h.Session, req.Handle, c.h.Seq}
	if req.Wait {
		// Attached before proposing, so no wake-up is missed; a retry of
		// this request id re-attaches to a wait it left detached.
		var err error
		if woke, err = e.waits.attach(ctx, key); err != nil {
			return nil, err
		}
	}
	res, err := e.w.apply(ctx, c, commandOf(fsm.AcquireArgs{Handle: req.Handle, Mode: req.Mode, Wait: req.Wait}))
	if woke != nil && (err != nil || res.Granted) {
		e.waits.leave(key, woke)
	}
	if err != nil {
		return nil, err
	}
	if res.Granted {
		return e.granted(c, req, res.LockGen), nil
	}
	// Queued (now, or by an earlier try of this request id at another master).
	for {
		var state fsm.WaitState
		var gen uint64
		var err error
		e.r.read(func(v fsm.View) { state, gen, err = v.LockWait(c.h.Session, req.Handle, c.h.Seq) })
		switch {
		case err != nil:
			e.waits.leave(key, woke)
			return nil, err
		case state == fsm.WaitGranted:
			e.waits.leave(key, woke)
			return e.granted(c, req, gen), nil
		case state == fsm.WaitGone:
			e.waits.leave(key, woke)
			return nil, wire.Errorf(wire.CodeCanceled, "the wait for the lock was withdrawn")
		}
		select {
		case <-woke:
		case <-c.stop:
			// Leave the wait queued: the client retries this request id at
			// the new master, which finds it queued (or granted).
			e.waits.leave(key, woke)
			return nil, errStopped
		case <-ctx.Done():
			// The stream ended: the client gave up (it says so with a
			// CancelAcquire) or lost the connection and retries this
			// request id. Either way the wait keeps its place for now:
			// withdrawing it here would send a client that only redialled
			// to the tail of the queue (acquireWaits).
			session, handle, seq := c.h.Session, req.Handle, c.h.Seq
			e.waits.detach(key, woke, c.stop, e.detachedFor(c, session), func() { e.withdraw(c, session, handle, seq) })
			return nil, ctx.Err()
		}
	}
}

// granted answers a granted Acquire with the grant's generation and its
// sequencer, signed as GetSequencer would sign it, so the holder needs no
// second call to fence its work. A sequencer for a grant that has since
// moved on is no harm: every check of it (the master's, a Guard's)
// compares its generation with the lock's.
func (e *lockEndpoint) granted(c *call, req *wire.AcquireRequest, gen uint64) *wire.AcquireResponse {
	var key []byte
	var path string
	var ok bool
	mode := req.Mode
	e.r.read(func(v fsm.View) {
		key = v.CellKey()
		path, ok = v.HandlePath(c.h.Session, req.Handle)
		if ok {
			mode = v.SequencerMode(path, req.Mode) // a semaphore's holder gets a Permit sequencer
		}
	})
	resp := &wire.AcquireResponse{LockGen: gen}
	if ok {
		resp.Sequencer = sequencer.Sign(key, sequencer.Sequencer{Cell: e.cfg.Cell, Path: path,
			Mode: sequencer.Mode(mode), Generation: gen})
	}
	return resp
}

// detachedFor is how long a wait of session whose call broke off is kept
// for the client's retry, asked again whenever that runs out: until the
// session's lease ends (a live client renews it, a gone one does not),
// and for one lease at most, renewed or not.
func (e *lockEndpoint) detachedFor(c *call, session uint64) func() time.Duration {
	deadline := e.cfg.Clock.Now().Add(e.sess.grantTTL())
	return func() time.Duration {
		now := e.cfg.Clock.Now()
		d := deadline.Sub(now)
		if left, ok := e.sess.leaseLeft([]uint64{session}, now)[session]; ok {
			d = min(d, left)
		}
		return max(d, 0)
	}
}

// withdraw removes an abandoned wait (or undoes its grant) through Raft:
// the wait detached (its call's stream ended) and no call of its request
// id came back in time (detachedFor).
func (e *lockEndpoint) withdraw(c *call, session, handle, seq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.w.applyInvalidating(ctx, c.stop, &fsm.Command{Session: session, Time: e.w.now(),
		Payload: &fsm.CancelWaitArgs{Handle: handle, WaitSeq: seq}})
	if err == nil {
		err = resultErr(res)
	}
	var re *fsm.Error
	if err != nil && !(errors.As(err, &re) && re.Kind == fsm.KindHandleInvalid) {
		e.cfg.Logger.Warn("withdrawing an abandoned lock wait failed; the client retries it", "handle", handle, "seq", seq, "err", err)
	}
}

func (e *lockEndpoint) cancelAcquire(ctx context.Context, c *call, req *wire.CancelAcquireRequest) (*wire.Empty, error) {
	_, err := e.w.apply(ctx, c, commandOf(fsm.CancelWaitArgs{Handle: req.Handle, WaitSeq: req.WaitSeq}))
	if err == nil { // the client withdrew it itself: nothing left to withdraw
		e.waits.forget(waitKey{c.h.Session, req.Handle, req.WaitSeq})
	}
	return &wire.Empty{}, err
}

// checkSequencer answers whether a sequencer is still valid: signed by
// this cell, and its lock held at that generation in that mode right now
// (a linearizable read); a Permit sequencer while a holder of its
// semaphore holds that generation. It reads the lock's state, so it needs
// read on the lock's node: a caller without it hears what it would of a
// lock whose node is gone, which tells it nothing about the name.
func (e *lockEndpoint) checkSequencer(ctx context.Context, c *call, req *wire.CheckSequencerRequest) (*wire.CheckSequencerResponse, error) {
	s, err := e.r.verifySequencer(req.Sequencer)
	if err != nil {
		return nil, err
	}
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	var ok bool
	var reason string
	err = e.r.view(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		ok, reason = v.FenceValidFor(&fsm.Fence{Path: s.Path, Mode: uint8(s.Mode), Generation: s.Generation},
			c.caller.Principal, c.isAdmin())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &wire.CheckSequencerResponse{Valid: ok, Reason: reason}, nil
}
