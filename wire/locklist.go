package wire

// MethodListLocks lists the locks that are held or waited for under a
// name, with their holders and waiters: all of them to the admin, to
// anyone else those it may read. A read, like ListSessions.
const MethodListLocks Method = 24

// ListLocksRequest names the directory (or file) whose locks to list: the
// lock of Prefix itself and those of every name below it.
type ListLocksRequest struct {
	Prefix string `msgpack:"p"`
}

// ListLocksResponse lists the locks in name order, at most MaxListedLocks
// of them; Truncated says there were more.
type ListLocksResponse struct {
	Locks     []LockInfo `msgpack:"l,omitempty"`
	Truncated bool       `msgpack:"t,omitempty"`
}

// LockInfo is one lock in a listing: mode, generation, the first
// MaxStatHolders holders in grant order and waiters in queue order
// (HolderCount and WaiterCount count them all), and the end of its
// lock-delay (Unix ns; 0 when none was ever imposed).
type LockInfo struct {
	Path           string       `msgpack:"p"`
	Mode           uint8        `msgpack:"m,omitempty"`
	Generation     uint64       `msgpack:"g,omitempty"`
	Holders        []LockHolder `msgpack:"h,omitempty"`
	HolderCount    uint32       `msgpack:"hc,omitempty"`
	Waiters        []LockWaiter `msgpack:"w,omitempty"`
	WaiterCount    uint32       `msgpack:"wc,omitempty"`
	LockDelayUntil int64        `msgpack:"ld,omitempty"`
	// SemLimit is a semaphore's permit count: its lock has up to that
	// many holders (0: a plain lock).
	SemLimit uint32 `msgpack:"sl,omitempty"`
}

// LockWaiter is one queued Acquire: its session, that session's
// principal and declared identity (as LockHolder's), the mode it asked
// for, and Since, when it was queued (Unix ns, the master's clock; 0 when
// unknown).
type LockWaiter struct {
	Session   uint64 `msgpack:"s"`
	Principal string `msgpack:"p,omitempty"`
	Mode      uint8  `msgpack:"m,omitempty"`
	Host      string `msgpack:"ho,omitempty"`
	PID       int64  `msgpack:"pi,omitempty"`
	Program   string `msgpack:"pg,omitempty"`
	Since     int64  `msgpack:"t,omitempty"`
}

// MaxListedLocks bounds a ListLocks reply so it fits in a frame (each
// lock names at most MaxStatHolders holders and as many waiters).
const MaxListedLocks = 1000
