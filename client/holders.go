package client

import "lockcell/cell/wire"

// LockHolder is one holder of a lock, as Stat reports it: the holder's
// session id (the id Client.Session and Sessions report) and the principal
// that session authenticated as ("" in a cell without TLS).
//
// Stat.Holders is filled by the reads GetStat and GetContentsAndStat (a
// Stat returned by a write leaves it empty), in grant order and for at
// most the first MaxStatHolders holders; Stat.LockHolders counts them all.
// It is as fresh as the rest of the Stat: a cached Stat is invalidated
// whenever the lock changes hands. A caller that may not read the node
// learns nothing of its holders (the read fails with ErrPermission, or
// ErrNotFound when the caller may neither read nor write it).
type LockHolder struct {
	Session   uint64 `json:"session"`
	Principal string `json:"principal"`
}

// MaxStatHolders is the most holders a Stat names.
const MaxStatHolders = wire.MaxStatHolders

func holdersFrom(hs []wire.LockHolder) []LockHolder {
	if len(hs) == 0 {
		return nil
	}
	out := make([]LockHolder, len(hs))
	for i, h := range hs {
		out[i] = LockHolder{Session: h.Session, Principal: h.Principal}
	}
	return out
}

// holdersSize is what a cached Stat's holders cost beyond the entry's
// fixed overhead, for the cache's byte budget.
func holdersSize(hs []wire.LockHolder) int64 {
	n := int64(0)
	for _, h := range hs {
		n += int64(len(h.Principal)) + 40
	}
	return n
}
