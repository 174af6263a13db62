package master

import (
	"context"

	"lockcell/fsm"
	"lockcell/wire"
)

// listLocks lists the locks held or waited for at req.Prefix and below,
// with holders and waiters: every one to the admin, to anyone else only
// those it may read (a lock it may not read is left out, as its Stat
// would be refused). The listing is linearizable, like a read.
func (e *lockEndpoint) listLocks(ctx context.Context, c *call, req *wire.ListLocksRequest) (*wire.ListLocksResponse, error) {
	c.path = req.Prefix
	if err := wire.ValidateName(e.cfg.Cell, req.Prefix); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidName, "%v", err)
	}
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	out := &wire.ListLocksResponse{}
	err := e.r.view(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		locks, more := v.Locks(req.Prefix, c.caller.Principal, c.isAdmin(), wire.MaxListedLocks, wire.MaxStatHolders)
		var short bool
		out.Locks, short = lockInfos(locks, listLocksBytes)
		out.Truncated = more || short
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockInfos turns listed locks into their wire form, in order, until
// they would add up to more than budget bytes (an over-estimate of their
// encoding); short says it stopped before the end. The first lock is
// always kept: one lock's 64 holders and 64 waiters fit a frame whatever
// they declared.
func lockInfos(locks []fsm.LockListing, budget int) (out []wire.LockInfo, short bool) {
	for _, l := range locks {
		li := wire.LockInfo{Path: l.Path, Mode: l.Mode, Generation: l.Gen, HolderCount: uint32(l.HolderCount), SemLimit: l.SemLimit,
			WaiterCount: uint32(l.WaiterCount), LockDelayUntil: l.LockDelayUntil}
		size := len(l.Path) + 64
		for _, h := range l.Holders {
			li.Holders = append(li.Holders, wireHolder(h))
			size += len(h.Principal) + len(h.Host) + len(h.Program) + 48
		}
		for _, w := range l.Waiters {
			li.Waiters = append(li.Waiters, wireWaiter(w))
			size += len(w.Principal) + len(w.Host) + len(w.Program) + 48
		}
		if size > budget && len(out) > 0 {
			return out, true
		}
		budget -= size
		out = append(out, li)
	}
	return out, false
}

// listLocksBytes bounds what a ListLocks reply's locks may add up to (an
// over-estimate of their encoding), well inside a frame: a thousand locks
// each held and waited for by many sessions that declared long hosts and
// programs would not fit one, so the listing stops early and says so
// (Truncated).
const listLocksBytes = wire.MaxFrameSize / 2

// lockWaiters names the waiters for the lock on the node of hv, in queue
// order, for a read's Stat, as lockHolders names the holders.
func lockWaiters(v fsm.View, hv fsm.HandleView) []wire.LockWaiter {
	if hv.Stat.LockWaiters == 0 {
		return nil
	}
	ws := v.LockWaiters(hv.Handle.Path, wire.MaxStatHolders)
	out := make([]wire.LockWaiter, len(ws))
	for i, w := range ws {
		out[i] = wireWaiter(w)
	}
	return out
}

// wireWaiter is a waiter as the wire names it: session, principal,
// declared identity, mode and when it queued.
func wireWaiter(w fsm.LockWaiterView) wire.LockWaiter {
	return wire.LockWaiter{Session: w.Session, Principal: w.Principal, Mode: w.Mode, Host: w.Host, PID: w.PID, Program: w.Program, Since: w.Since}
}
