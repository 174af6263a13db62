package master

import (
	"context"

	"lockcell/cell/wire"
	"lockcell/replica"
)

// listLocks lists the locks held or waited for at req.Prefix and below,
// with holders and waiters: every one to the admin, to anyone else only
// those it may read (a lock it may not read is left out, as its Stat
// would be refused). The listing is linearizable, like a read.
func (c *call) listLocks(ctx context.Context, req *wire.ListLocksRequest) (*wire.ListLocksResponse, error) {
	c.path = req.Prefix
	if err := wire.ValidateName(c.cfg.Cell, req.Prefix); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidName, "%v", err)
	}
	if err := c.verifyRead(ctx); err != nil {
		return nil, err
	}
	out := &wire.ListLocksResponse{}
	err := c.state.Read(func(v replica.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		locks, more := v.Locks(req.Prefix, c.caller.Principal, c.isAdmin(), wire.MaxListedLocks, wire.MaxStatHolders)
		out.Truncated = more
		for _, l := range locks {
			li := wire.LockInfo{Path: l.Path, Mode: l.Mode, Generation: l.Gen, HolderCount: uint32(l.HolderCount),
				WaiterCount: uint32(l.WaiterCount), LockDelayUntil: l.LockDelayUntil}
			for _, h := range l.Holders {
				li.Holders = append(li.Holders, wire.LockHolder{Session: h.Session, Principal: h.Principal})
			}
			for _, w := range l.Waiters {
				li.Waiters = append(li.Waiters, wire.LockWaiter{Session: w.Session, Principal: w.Principal, Mode: w.Mode})
			}
			out.Locks = append(out.Locks, li)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockWaiters names the waiters for the lock on the node of hv, in queue
// order, for a read's Stat, as lockHolders names the holders.
func lockWaiters(v replica.View, hv replica.HandleView) []wire.LockWaiter {
	if hv.Stat.LockWaiters == 0 {
		return nil
	}
	ws := v.LockWaiters(hv.Handle.Path, wire.MaxStatHolders)
	out := make([]wire.LockWaiter, len(ws))
	for i, w := range ws {
		out[i] = wire.LockWaiter{Session: w.Session, Principal: w.Principal, Mode: w.Mode}
	}
	return out
}
