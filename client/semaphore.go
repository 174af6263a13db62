package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"lockcell/wire"
)

// MaxSemLimit is the most permits a semaphore may have; MaxMultiLock the
// most handles one AcquireAll, TryAcquireAll or ReleaseAll may name.
const (
	MaxSemLimit  = wire.MaxSemLimit
	MaxMultiLock = wire.MaxMultiLock
)

// WithSemaphore makes the file Open creates a counting semaphore of limit
// permits (1 to MaxSemLimit): its lock, taken in Shared mode, has up to
// limit holders at once. An Open that finds the file succeeds only if it
// is a semaphore of exactly limit permits (else ErrExists). 0 leaves the
// file a plain lock.
func WithSemaphore(limit int) OpenOption {
	return func(o *openOptions) {
		o.req.SemLimit = uint32(min(max(limit, 0), MaxSemLimit+1))
		if limit != 0 {
			o.req.Flags |= wire.OpenSemaphore
		} else {
			o.req.Flags &^= wire.OpenSemaphore
		}
	}
}

// Semaphore is a counting semaphore (Curator's InterProcessSemaphoreV2,
// consul lock -n): at most Limit holders at once across the cell, waiters
// granted in FIFO order, each holder with a sequencer of its own that a
// resource server can check (it goes stale exactly when that holder lost
// its permit). A holder whose session fails leaves its permit unavailable
// for the handle's lock-delay (WithLockDelay); a Release frees it at
// once. One Semaphore holds at most one permit; a process that wants two
// opens two.
//
// It is a Handle opened on the semaphore's file, whose lock it takes in
// Shared mode: Handle returns it, for GetStat and the rest.
type Semaphore struct {
	h     *Handle
	limit int
}

// OpenSemaphore opens the semaphore name of limit permits for writing
// (what taking a permit needs), creating it if it does not exist; an
// existing file must be a semaphore of exactly limit permits (else
// ErrExists). opts are Open's (WithLockDelay, WithParents, ...).
func (c *Client) OpenSemaphore(ctx context.Context, name string, limit int, opts ...OpenOption) (*Semaphore, error) {
	if limit < 1 || limit > MaxSemLimit {
		return nil, opErr("open", c.abs(name), wire.Errorf(wire.CodeBadRequest, "a semaphore has 1 to %d permits, not %d", MaxSemLimit, limit))
	}
	h, err := c.Open(ctx, name, Write|Create, append(slices.Clip(opts), WithSemaphore(limit), WithoutCache())...)
	if err != nil {
		return nil, err
	}
	return &Semaphore{h: h, limit: limit}, nil
}

// Handle is the handle the semaphore holds its permit through.
func (s *Semaphore) Handle() *Handle { return s.h }

// Limit is the semaphore's permit count.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes a permit, waiting in FIFO order behind earlier requests
// until one is granted or ctx ends (then the wait is withdrawn), as
// Handle.Acquire waits for a lock.
func (s *Semaphore) Acquire(ctx context.Context) error { return s.h.Acquire(ctx, Shared) }

// TryAcquire takes a permit if one is free right now and nobody queues;
// false (and a nil error) when all are held, ErrLockDelay when the
// permits not held are under the lock-delay of failed holders.
func (s *Semaphore) TryAcquire(ctx context.Context) (bool, error) { return s.h.TryAcquire(ctx, Shared) }

// Release gives the permit back; the next waiter gets it in the same
// replicated step.
func (s *Semaphore) Release(ctx context.Context) error { return s.h.Release(ctx) }

// LockContext is live while this Semaphore holds its permit and the
// client can be sure of it (see Handle.LockContext).
func (s *Semaphore) LockContext() context.Context { return s.h.LockContext() }

// GetSequencer returns the sequencer of this holder's permit: a resource
// server's CheckSequencer says it is valid exactly while this holder
// holds it, whoever else holds the semaphore's other permits.
func (s *Semaphore) GetSequencer(ctx context.Context) (Sequencer, error) {
	return s.h.GetSequencer(ctx)
}

// Holders reads the semaphore's holders (at most MaxStatHolders of them,
// in grant order), and how many there are and wait.
func (s *Semaphore) Holders(ctx context.Context) (holders []LockHolder, held, waiting int, err error) {
	st, err := s.h.GetStat(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	return st.Holders, st.LockHolders, st.LockWaiters, nil
}

// Close closes the semaphore's handle, giving back a permit it holds.
func (s *Semaphore) Close() error { return s.h.Close() }

// AcquireAll takes the exclusive locks of handles (of this Client, each
// on a different plain file) all at once, waiting until every one is
// free (Curator's MultiLock). The cell grants them in one replicated
// step or not at all, so the caller never holds a part of them, and two
// callers asking for {A,B} and {B,A} cannot deadlock: waits are served in
// arrival order, and a waiting group keeps the free locks it needs from
// later arrivals. Each handle then has its own LockContext and sequencer,
// and may be released on its own (Release) or with the others
// (ReleaseAll). When ctx ends first, the group's wait is withdrawn (and a
// grant that raced the cancel undone).
func (c *Client) AcquireAll(ctx context.Context, handles ...*Handle) error {
	if err := c.checkGroup(handles); err != nil {
		return err
	}
	for {
		resp, err := c.acquireAllOnce(ctx, handles)
		if errors.Is(err, ErrCanceled) && ctx.Err() == nil {
			continue // withdrawn by the master after our call broke off: queue again
		}
		if err != nil {
			return opErr("lock", handles[0].path, err)
		}
		c.grantedAll(handles, resp)
		return nil
	}
}

// TryAcquireAll takes the exclusive locks of handles all at once if every
// one is free right now with nobody queued, else none: false (and a nil
// error) when one is held or waited for, ErrLockDelay when one is under
// lock-delay.
func (c *Client) TryAcquireAll(ctx context.Context, handles ...*Handle) (bool, error) {
	if err := c.checkGroup(handles); err != nil {
		return false, err
	}
	var resp wire.AcquireMultiResponse
	err := c.call(ctx, wire.MethodAcquireMulti, true, &wire.AcquireMultiRequest{Handles: handleIDs(handles)}, &resp)
	if errors.Is(err, ErrLockHeld) {
		return false, nil
	}
	if err != nil {
		return false, opErr("lock", handles[0].path, err)
	}
	c.grantedAll(handles, &resp)
	return true, nil
}

// ReleaseAll lets go of the locks handles hold, in one replicated step;
// handles that hold nothing are passed over (ErrNotHeld only if none
// held anything). Each handle's LockContext ends.
func (c *Client) ReleaseAll(ctx context.Context, handles ...*Handle) error {
	if err := c.checkGroup(handles); err != nil {
		return err
	}
	err := c.call(ctx, wire.MethodReleaseMulti, true, &wire.ReleaseMultiRequest{Handles: handleIDs(handles)}, &wire.Empty{})
	if err == nil || releaseEnds(err) {
		cause := err
		if err == nil {
			cause = ErrReleased
		}
		for _, h := range handles {
			h.endLock(cause)
		}
	}
	return opErr("unlock", handles[0].path, err)
}

// checkGroup refuses a group the cell would: empty, too large, a handle
// of another Client, closed, or named twice.
func (c *Client) checkGroup(handles []*Handle) error {
	if len(handles) == 0 || len(handles) > MaxMultiLock {
		return opErr("lock", "", wire.Errorf(wire.CodeBadRequest, "a multi-lock names 1 to %d handles, not %d", MaxMultiLock, len(handles)))
	}
	seen := map[*Handle]bool{}
	for _, h := range handles {
		if h == nil || h.c != c || seen[h] {
			return opErr("lock", "", wire.Errorf(wire.CodeBadRequest, "a multi-lock's handles are distinct handles of its Client"))
		}
		seen[h] = true
		if err := h.check(); err != nil {
			return opErr("lock", h.path, err)
		}
		h.markDirty()
	}
	return nil
}

func handleIDs(handles []*Handle) []uint64 {
	ids := make([]uint64, len(handles))
	for i, h := range handles {
		ids[i] = h.id.Load()
	}
	return ids
}

// acquireAllOnce queues the group once, under one request id, and waits;
// when ctx ends it withdraws the wait (CancelAcquire of the first handle
// in id order, which the cell applies to the whole group).
func (c *Client) acquireAllOnce(ctx context.Context, handles []*Handle) (*wire.AcquireMultiResponse, error) {
	seq := c.ids.begin()
	defer c.ids.end(seq)
	ids := handleIDs(handles)
	req := &wire.AcquireMultiRequest{Handles: ids, Wait: true}
	var resp wire.AcquireMultiResponse
	for {
		_, err := c.callAt(ctx, wire.MethodAcquireMulti, seq, req, &resp, nil)
		if err == nil {
			return &resp, nil
		}
		if ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(c.base, min(c.cfg.RetryTimeout, 10*time.Second))
			cerr := c.call(cctx, wire.MethodCancelAcquire, true, &wire.CancelAcquireRequest{Handle: slices.Min(ids), WaitSeq: seq}, &wire.Empty{})
			cancel()
			if cerr != nil && !errors.Is(cerr, ErrHandleInvalid) && !errors.Is(cerr, ErrClosed) {
				c.log.Warn("lockcell: could not withdraw an abandoned multi-lock wait", "path", handles[0].path, "err", cerr)
			}
			return nil, ctx.Err()
		}
		if !errors.Is(err, ErrNoMaster) {
			return nil, err
		}
	}
}

// grantedAll records each handle's grant, as Acquire does for one.
func (c *Client) grantedAll(handles []*Handle, resp *wire.AcquireMultiResponse) {
	for i, h := range handles {
		if i < len(resp.Locks) {
			h.granted(&resp.Locks[i], Exclusive)
		}
	}
}
