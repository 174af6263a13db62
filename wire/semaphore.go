package wire

// Counting semaphores and multi-locks (docs/flows.md#semaphores-and-multi-locks).
//
// A semaphore is a file created with OpenSemaphore and
// OpenRequest.SemLimit permits; its lock is taken with an ordinary
// Acquire in LockShared mode and has up to SemLimit holders, each with a
// sequencer of its own. A multi-lock takes the exclusive locks of several
// handles in one replicated command: all of them or none.

// MethodAcquireMulti takes the exclusive locks of several handles of the
// calling session, each on a different plain file, all at once; with
// Wait it queues for all of them as one waiter and blocks until it holds
// every one. It never holds a part: a group is granted in one command.
// Giving up is a CancelAcquire of any of its handles with this call's
// request id. Mutating.
const MethodAcquireMulti Method = 33

// MethodReleaseMulti lets go of the locks of several handles of the
// calling session in one command; a handle that holds nothing is passed
// over (CodeNotHeld only when none held anything). Mutating.
const MethodReleaseMulti Method = 34

func init() {
	methodNames[MethodAcquireMulti] = "AcquireMulti"
	methodNames[MethodReleaseMulti] = "ReleaseMulti"
}

// OpenSemaphore, with OpenCreate on a file, says the request carries
// SemLimit: the file is a counting semaphore of that many permits (an
// existing one must have that many). A master of a version without
// semaphores refuses the unknown flag rather than make a plain lock.
const OpenSemaphore uint32 = 1 << 9

// MaxSemLimit caps OpenRequest.SemLimit; MaxMultiLock caps the handles of
// one AcquireMulti or ReleaseMulti.
const (
	MaxSemLimit  = 1024
	MaxMultiLock = 32
)

// AcquireMultiRequest names the handles whose locks to take, each at most
// once, in any order.
type AcquireMultiRequest struct {
	Handles []uint64 `msgpack:"hs"`
	Wait    bool     `msgpack:"w,omitempty"`
}

// AcquireMultiResponse answers a granted AcquireMulti: one grant per
// handle, in the request's order, each with its own sequencer.
type AcquireMultiResponse struct {
	Locks []AcquireResponse `msgpack:"l"`
}

// ReleaseMultiRequest names the handles whose locks to let go of.
type ReleaseMultiRequest struct {
	Handles []uint64 `msgpack:"hs"`
}
