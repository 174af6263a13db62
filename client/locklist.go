package client

import (
	"time"

	"lockcell/wire"
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
