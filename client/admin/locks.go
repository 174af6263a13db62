package admin

import (
	"context"
	"time"

	"lockcell/client"
	"lockcell/client/internal/link"
	"lockcell/wire"
)

// LockInfo is one lock that is held or waited for, as Locks reports it:
// its mode and generation, the first client.MaxStatHolders holders in grant order
// and waiters in queue order (HolderCount and WaiterCount count them all),
// and the end of its lock-delay (zero when none was ever imposed; a time
// in the past when it has run out).
type LockInfo struct {
	Name           string              `json:"name"`
	Mode           client.LockMode     `json:"mode"`
	Generation     uint64              `json:"generation"`
	Holders        []client.LockHolder `json:"holders"`
	HolderCount    int                 `json:"holder_count"`
	Waiters        []client.LockWaiter `json:"waiters"`
	WaiterCount    int                 `json:"waiter_count"`
	LockDelayUntil time.Time           `json:"lock_delay_until"`
	// SemLimit is a semaphore's permit count (0: a plain lock), so a
	// listing shows how many of its permits are held.
	SemLimit int `json:"sem_limit,omitempty"`
}

// Locks lists, in name order, the locks held or waited for at the name
// prefix and below it ("" for the whole cell; a relative prefix is
// resolved as client.ResolveName says): all of them for the cell's admin, for anyone else
// those it may read (the others are left out without a trace). The list
// is as of one moment (a linearizable read); at most 1000
// locks are listed, and truncated says there were more.
func (a *Admin) Locks(ctx context.Context, prefix string) (locks []LockInfo, truncated bool, err error) {
	if prefix == "" {
		prefix = "/ls/" + a.c.Cell() // the whole cell
	} else {
		prefix = link.Abs(a.c, prefix)
	}
	var resp wire.ListLocksResponse
	if err := link.Call(a.c, ctx, wire.MethodListLocks, false, &wire.ListLocksRequest{Prefix: prefix}, &resp); err != nil {
		return nil, false, opErr("list locks", prefix, err)
	}
	locks = make([]LockInfo, 0, len(resp.Locks))
	for _, l := range resp.Locks {
		li := LockInfo{Name: l.Path, Mode: client.LockMode(l.Mode), Generation: l.Generation, Holders: holdersFrom(l.Holders),
			HolderCount: int(l.HolderCount), WaiterCount: int(l.WaiterCount), SemLimit: int(l.SemLimit)}
		if l.LockDelayUntil != 0 {
			li.LockDelayUntil = time.Unix(0, l.LockDelayUntil)
		}
		li.Waiters = waitersFrom(l.Waiters)
		locks = append(locks, li)
	}
	return locks, resp.Truncated, nil
}

func waitersFrom(ws []wire.LockWaiter) []client.LockWaiter {
	if len(ws) == 0 {
		return nil
	}
	out := make([]client.LockWaiter, len(ws))
	for i, w := range ws {
		out[i] = client.LockWaiter{Session: w.Session, Principal: w.Principal, Mode: client.LockMode(w.Mode),
			Identity: client.Identity{Host: w.Host, PID: int(w.PID), Program: w.Program}, Since: unixTime(w.Since)}
	}
	return out
}

func holdersFrom(hs []wire.LockHolder) []client.LockHolder {
	if len(hs) == 0 {
		return nil
	}
	out := make([]client.LockHolder, len(hs))
	for i, h := range hs {
		out[i] = client.LockHolder{Session: h.Session, Principal: h.Principal,
			Identity: client.Identity{Host: h.Host, PID: int(h.PID), Program: h.Program}, Since: unixTime(h.Since)}
	}
	return out
}

// unixTime is the time of Unix nanoseconds ns; zero for 0 (unknown).
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
