package master

import (
	"context"
	"slices"

	"lockcell/fsm"
	"lockcell/sequencer"
	"lockcell/wire"
)

// Semaphores and multi-locks at the master. A semaphore's permits are
// taken with the ordinary Acquire (locks.go) in shared mode; the state
// machine gives each holder its own generation, which granted and
// getSequencer sign. A multi-lock is its own call, below.

// The wire's caps are the state machine's.
const (
	_ = uint64(fsm.MaxSemLimit) - uint64(wire.MaxSemLimit) + (uint64(wire.MaxSemLimit) - uint64(fsm.MaxSemLimit))
	_ = uint64(fsm.MaxMultiLock) - uint64(wire.MaxMultiLock) + (uint64(wire.MaxMultiLock) - uint64(fsm.MaxMultiLock))
)

// checkSemaphore validates an Open's permit count and returns it (0: no
// semaphore).
func checkSemaphore(req *wire.OpenRequest) (uint32, error) {
	has := req.Flags&wire.OpenSemaphore != 0
	switch {
	case has != (req.SemLimit != 0):
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: the semaphore flag and a permit count go together", req.Path)
	case !has:
		return 0, nil
	case req.SemLimit > wire.MaxSemLimit:
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: a semaphore of %d permits is over the cap of %d", req.Path, req.SemLimit, wire.MaxSemLimit)
	case req.Flags&wire.OpenCreate == 0 || req.Flags&(wire.OpenDirectory|wire.OpenSequential|wire.OpenContainer|wire.OpenTTL|wire.OpenEphemeral) != 0:
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: a semaphore is made by a create of a plain file", req.Path)
	}
	return req.SemLimit, nil
}

// multiHandles checks a multi-lock's handles and returns them sorted: the
// order the state machine wants, so the same set is the same command
// whatever order the caller named it in.
func multiHandles(hs []uint64) ([]uint64, error) {
	if len(hs) == 0 || len(hs) > wire.MaxMultiLock {
		return nil, wire.Errorf(wire.CodeBadRequest, "a multi-lock names 1 to %d handles, not %d", wire.MaxMultiLock, len(hs))
	}
	sorted := slices.Sorted(slices.Values(hs))
	if len(slices.Compact(slices.Clone(sorted))) != len(sorted) {
		return nil, wire.Errorf(wire.CodeBadRequest, "a multi-lock names each handle once")
	}
	return sorted, nil
}

// acquireMulti takes the locks of several handles all at once. A blocking
// one parks like a blocking Acquire, attached to its first handle (in
// handle order) and request id, which the state machine reports granted
// or ended together with the others; giving up withdraws the whole group
// through that handle.
func (e *lockEndpoint) acquireMulti(ctx context.Context, c *call, req *wire.AcquireMultiRequest) (*wire.AcquireMultiResponse, error) {
	sorted, err := multiHandles(req.Handles)
	if err != nil {
		return nil, err
	}
	var woke chan struct{}
	key := waitKey{c.h.Session, sorted[0], c.h.Seq}
	if req.Wait {
		if woke, err = e.waits.attach(ctx, key); err != nil {
			return nil, err
		}
	}
	res, err := e.w.apply(ctx, c, commandOf(fsm.AcquireMultiArgs{Handles: sorted, Wait: req.Wait}))
	if woke != nil && (err != nil || res.Granted) {
		e.waits.leave(key, woke)
	}
	if err != nil {
		return nil, err
	}
	if res.Granted {
		return e.grantedMulti(c, req.Handles)
	}
	for {
		var state fsm.WaitState
		e.r.read(func(v fsm.View) { state, _, err = v.LockWait(c.h.Session, sorted[0], c.h.Seq) })
		switch {
		case err != nil:
			e.waits.leave(key, woke)
			return nil, err
		case state == fsm.WaitGranted:
			e.waits.leave(key, woke)
			return e.grantedMulti(c, req.Handles)
		case state == fsm.WaitGone:
			e.waits.leave(key, woke)
			return nil, wire.Errorf(wire.CodeCanceled, "the wait for the locks was withdrawn")
		}
		select {
		case <-woke:
		case <-c.stop:
			e.waits.leave(key, woke)
			return nil, errStopped
		case <-ctx.Done():
			// As for Acquire: the wait keeps its places for a retry of
			// this request id, and is withdrawn if none comes.
			session, handle, seq := c.h.Session, sorted[0], c.h.Seq
			e.waits.detach(key, woke, c.stop, e.detachedFor(c, session), func() { e.withdraw(c, session, handle, seq) })
			return nil, ctx.Err()
		}
	}
}

// grantedMulti answers a granted multi-lock: each handle's lock with its
// sequencer, in the caller's order.
func (e *lockEndpoint) grantedMulti(c *call, handles []uint64) (*wire.AcquireMultiResponse, error) {
	out := &wire.AcquireMultiResponse{Locks: make([]wire.AcquireResponse, len(handles))}
	err := e.r.view(func(v fsm.View) error {
		key := v.CellKey()
		for i, h := range handles {
			held, err := v.HeldLock(c.h.Session, h)
			if err != nil {
				return err
			}
			out.Locks[i] = wire.AcquireResponse{LockGen: held.Generation, Sequencer: sequencer.Sign(key, sequencer.Sequencer{
				Cell: e.cfg.Cell, Path: held.Path, Mode: sequencer.Mode(held.Mode), Generation: held.Generation})}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// releaseMulti lets go of several handles' locks in one command.
func (e *lockEndpoint) releaseMulti(ctx context.Context, c *call, req *wire.ReleaseMultiRequest) (*wire.Empty, error) {
	if len(req.Handles) == 0 || len(req.Handles) > wire.MaxMultiLock {
		return nil, wire.Errorf(wire.CodeBadRequest, "a multi-release names 1 to %d handles, not %d", wire.MaxMultiLock, len(req.Handles))
	}
	_, err := e.w.apply(ctx, c, commandOf(fsm.ReleaseMultiArgs{Handles: slices.Clone(req.Handles)}))
	return &wire.Empty{}, err
}
