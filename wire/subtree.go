package wire

// MethodWatchSubtree reads the changes below a directory after a
// position: nodes created, contents replaced, nodes deleted, locks
// granted, at any depth, each with its position (the Raft index of the
// entry that made it and its ordinal within the entry). It is a read
// that waits: with nothing to report it is answered once a change is
// recorded or WaitMillis runs out, and then Next is the position after
// every applied entry, so a consumer that saves Next keeps its place in
// the history however idle it is (like a progress notification). It
// needs no registration on the master, so a consumer resumes at any
// replica that becomes master, from any process, with the position it
// saved.
//
// The handle must be open in the session on a directory; the caller
// hears only of nodes its principal could read when each change was
// made (by their ACL names then, checked against the ACL files now).
const MethodWatchSubtree Method = 31

func init() { methodNames[MethodWatchSubtree] = "WatchSubtree" }

// The kinds of a SubtreeChange, also the bits of
// WatchSubtreeRequest.Kinds.
const (
	SubtreeCreated      uint8 = 1 << 0 // the node was created; Generation is its instance
	SubtreeContents     uint8 = 1 << 1 // its contents were replaced; Generation is the new content generation
	SubtreeDeleted      uint8 = 1 << 2 // it was deleted; Generation is the instance that went
	SubtreeLockAcquired uint8 = 1 << 3 // its lock was granted; Generation is the lock generation
	SubtreeAllKinds           = SubtreeCreated | SubtreeContents | SubtreeDeleted | SubtreeLockAcquired
)

// Bounds of a WatchSubtree call (docs/limits.md).
const (
	// MaxSubtreePage bounds the changes of one reply, so it fits a frame
	// (each at most a name and a few numbers).
	MaxSubtreePage = 1024
	// MaxSubtreeWait bounds how long a call waits for a change.
	MaxSubtreeWait = 30_000
)

// SubtreePos is a position in the cell's change history: Index the Raft
// index of an entry, Ord a change's ordinal (from 1) within it. {I, 0} is
// the position before every change of entry I.
type SubtreePos struct {
	Index uint64 `msgpack:"i,omitempty"`
	Ord   uint32 `msgpack:"o,omitempty"`
}

// WatchSubtreeRequest asks for the changes below the directory the handle
// names after position After (or, with Now, for no change but the current
// position), of the kinds in Kinds (0: every kind), at most Max of them
// (0 or past MaxSubtreePage: MaxSubtreePage), waiting up to WaitMillis
// (at most MaxSubtreeWait) for one when there is none.
type WatchSubtreeRequest struct {
	Handle     uint64     `msgpack:"h"`
	After      SubtreePos `msgpack:"a"`
	Now        bool       `msgpack:"n,omitempty"`
	Kinds      uint8      `msgpack:"k,omitempty"`
	Max        uint32     `msgpack:"m,omitempty"`
	WaitMillis uint32     `msgpack:"w,omitempty"`
}

// SubtreeChange is one change in a WatchSubtree reply.
type SubtreeChange struct {
	Pos        SubtreePos `msgpack:"p"`
	Path       string     `msgpack:"n"`
	Kind       uint8      `msgpack:"k"`
	Generation uint64     `msgpack:"g,omitempty"`
}

// WatchSubtreeResponse holds the changes in position order and Next, the
// position to ask after next time. Compacted says the history no longer
// reaches back to After (or After is not a position of this cell's log):
// the consumer must re-read what it watches and go on from Next, the
// current position.
type WatchSubtreeResponse struct {
	Changes   []SubtreeChange `msgpack:"c,omitempty"`
	Next      SubtreePos      `msgpack:"x"`
	Compacted bool            `msgpack:"z,omitempty"`
}
