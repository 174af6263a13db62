package wire

// MethodBreakLock frees a lock by an administrator's decision: every
// holder loses it, its generation moves on so their sequencers go stale,
// and the next waiter gets it as after a release. Only the cell's admin
// may call it; it carries a request id (Mutating) so a retried break is
// applied once.
const MethodBreakLock Method = 23

// EventLockBroken tells a holder's session that an admin broke the lock
// its handle held (Event.Handle names the handle, Event.Gen the broken
// generation). It is delivered whatever events the handle asked for: a
// holder must learn that it holds nothing any more.
const EventLockBroken uint8 = 9

// BreakLockRequest names the lock to break (its file's full name) and why;
// the reason goes to the audit log.
type BreakLockRequest struct {
	Path   string `msgpack:"p"`
	Reason string `msgpack:"r,omitempty"`
}

// BreakLockResponse reports what the break did: the holders freed, in
// grant order (none when nobody held the lock: breaking a free lock is
// not an error), and the lock's generation after the break, which every
// sequencer of the freed holders now falls short of.
type BreakLockResponse struct {
	Holders []LockHolder `msgpack:"h,omitempty"`
	LockGen uint64       `msgpack:"g,omitempty"`
}

// MaxBreakReason bounds BreakLockRequest.Reason, which is logged.
const MaxBreakReason = 1024
