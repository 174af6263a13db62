package client

import (
	"context"
	"time"

	"lockcell/cell/wire"
)

// LockWaiter is one queued Acquire of a lock, as Locks and Stat report
// it: its session, that session's principal and declared identity (as
// LockHolder's), the mode it asked for, and Since, when it was queued by
// the master's clock (zero when unknown).
type LockWaiter struct {
	Session   uint64   `json:"session"`
	Principal string   `json:"principal"`
	Mode      LockMode `json:"mode"`
	Identity
	Since time.Time `json:"since,omitzero"`
}

// LockInfo is one lock that is held or waited for, as Locks reports it:
// its mode and generation, the first MaxStatHolders holders in grant order
// and waiters in queue order (HolderCount and WaiterCount count them all),
// and the end of its lock-delay (zero when none was ever imposed; a time
// in the past when it has run out).
type LockInfo struct {
	Name           string       `json:"name"`
	Mode           LockMode     `json:"mode"`
	Generation     uint64       `json:"generation"`
	Holders        []LockHolder `json:"holders"`
	HolderCount    int          `json:"holder_count"`
	Waiters        []LockWaiter `json:"waiters"`
	WaiterCount    int          `json:"waiter_count"`
	LockDelayUntil time.Time    `json:"lock_delay_until"`
}

// Locks lists, in name order, the locks held or waited for at the name
// prefix and below it ("" for the whole cell; a relative prefix is
// resolved as ResolveName says): all of them for the cell's admin, for anyone else
// those it may read (the others are left out without a trace). The list
// is as of one moment (a linearizable read); at most wire.MaxListedLocks
// locks are listed, and truncated says there were more.
func (c *Client) Locks(ctx context.Context, prefix string) (locks []LockInfo, truncated bool, err error) {
	if prefix == "" {
		prefix = "/ls/" + c.cfg.Cell // the whole cell
	} else {
		prefix = c.abs(prefix)
	}
	var resp wire.ListLocksResponse
	if err := c.call(ctx, wire.MethodListLocks, false, &wire.ListLocksRequest{Prefix: prefix}, &resp); err != nil {
		return nil, false, opErr("list locks", prefix, err)
	}
	locks = make([]LockInfo, 0, len(resp.Locks))
	for _, l := range resp.Locks {
		li := LockInfo{Name: l.Path, Mode: LockMode(l.Mode), Generation: l.Generation, Holders: holdersFrom(l.Holders),
			HolderCount: int(l.HolderCount), WaiterCount: int(l.WaiterCount)}
		if l.LockDelayUntil != 0 {
			li.LockDelayUntil = time.Unix(0, l.LockDelayUntil)
		}
		li.Waiters = waitersFrom(l.Waiters)
		locks = append(locks, li)
	}
	return locks, resp.Truncated, nil
}

func waitersFrom(ws []wire.LockWaiter) []LockWaiter {
	if len(ws) == 0 {
		return nil
	}
	out := make([]LockWaiter, len(ws))
	for i, w := range ws {
		out[i] = LockWaiter{Session: w.Session, Principal: w.Principal, Mode: LockMode(w.Mode),
			Identity: Identity{Host: w.Host, PID: int(w.PID), Program: w.Program}, Since: unixTime(w.Since)}
	}
	return out
}

// waitersSize is what a cached Stat's waiters cost, as holdersSize.
func waitersSize(ws []wire.LockWaiter) int64 {
	n := int64(0)
	for _, w := range ws {
		n += int64(len(w.Principal)+len(w.Host)+len(w.Program)) + 72
	}
	return n
}
