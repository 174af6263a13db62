package fsm

import (
	"hash/fnv"
	"slices"
	"sort"
	"strings"

	"lockcell/acl"
)

// The replicated state's types: nodes with their locks, sessions, handles,
// the results of applying a command, and the changes apply reports to the
// master. The apply logic is in fsm.go (entry point, de-duplication,
// dispatch), sessions.go, files.go, locks.go, acl.go and members.go; the
// snapshot codec in snapshot.go and restore.go.

// Open flags as the state machine understands them. They equal the wire
// flags bit for bit; the master passes them through. Entries and snapshots
// store them, so the bits never change (TestPersistedEnumValues).
const (
	FlagRead      uint32 = 1 << 0
	FlagWrite     uint32 = 1 << 1
	FlagCreate    uint32 = 1 << 2
	FlagExcl      uint32 = 1 << 3
	FlagDirectory uint32 = 1 << 4
	FlagEphemeral uint32 = 1 << 5
	// FlagSequential with FlagCreate makes the node under a name of its
	// own: Path plus the parent directory's next sequence number
	// (sequential.go).
	FlagSequential uint32 = 1 << 6
	// FlagContainer with FlagCreate|FlagDirectory makes a container
	// directory: removed in the same command that removes its last child
	// (ttl.go).
	FlagContainer uint32 = 1 << 7
)

// Lock modes. Entries, snapshots and sequencers store them, so the numbers
// never change (TestPersistedEnumValues).
const (
	LockFree      uint8 = 0
	LockExclusive uint8 = 1
	LockShared    uint8 = 2
)

// Node is one file or directory. Generations are command indexes (the Raft
// index of the entry, or past it after group commit: batch.go), so they
// grow across delete and re-create of a name and across masters.
type Node struct {
	Path      string `msgpack:"p"`
	Dir       bool   `msgpack:"d,omitempty"`
	Ephemeral bool   `msgpack:"e,omitempty"`
	// Owner is the session that created an ephemeral node.
	Owner      uint64 `msgpack:"o,omitempty"`
	Contents   []byte `msgpack:"c,omitempty"`
	Instance   uint64 `msgpack:"i"`
	ContentGen uint64 `msgpack:"cg"`
	LockGen    uint64 `msgpack:"lg,omitempty"`
	ACLGen     uint64 `msgpack:"ag,omitempty"`
	Checksum   uint64 `msgpack:"ck,omitempty"`
	CTime      int64  `msgpack:"ct"`
	MTime      int64  `msgpack:"mt"`
	ReadACL    string `msgpack:"ra,omitempty"`
	WriteACL   string `msgpack:"wa,omitempty"`
	ChangeACL  string `msgpack:"ca,omitempty"`
	LockMode   uint8  `msgpack:"lm,omitempty"`
	// Holders hold the lock, in grant order.
	Holders []Holder `msgpack:"lh,omitempty"`
	// Waiters queue for the lock in FIFO order.
	Waiters []Waiter `msgpack:"lw,omitempty"`
	// LockDelayUntil (Unix ns) is when the lock may next be granted after a
	// holder's session failed while holding it.
	LockDelayUntil int64 `msgpack:"ld,omitempty"`

	// Creator is the principal that created the node: its owner under the
	// default ACL rule (acl package).
	Creator string `msgpack:"cr,omitempty"`

	// LockDelayBy names the holder whose session's expiry imposed the
	// latest lock-delay (the one LockDelayUntil ends), copied when it was
	// imposed because the session is gone by the time anyone asks; nil
	// when no lock-delay was ever imposed on this node.
	LockDelayBy *LockDelayCause `msgpack:"lb,omitempty"`

	// ChildSeq (directories only) is the number the next sequential
	// create below this directory tries (sequential.go). It only grows
	// while the directory lives, so a number is never handed out twice,
	// even after its child is deleted. Omitted while 0, so the snapshots
	// of cells that never made a sequential name encode as before.
	ChildSeq uint64 `msgpack:"sq,omitempty"`

	// TTL (files only, nanoseconds) makes the node a TTL node: once
	// MTime+TTL passes without a write, the master proposes its deletion
	// (ttl.go). Container marks a container directory, removed with its
	// last child. Both are omitted while unset, so the snapshots of cells
	// that never made such a node encode as before.
	TTL       int64 `msgpack:"tl,omitempty"`
	Container bool  `msgpack:"cn,omitempty"`

	// SemLimit (files only) makes the node a counting semaphore
	// (semaphore.go): its lock has up to SemLimit holders at once, each
	// with a generation of its own (Holder.Gen). SemDelays are the ends
	// (Unix ns) of the lock-delays of permits whose holders' sessions
	// failed: each keeps one permit from being granted until it passes.
	// Both are omitted while unset, so the snapshots of cells that never
	// made a semaphore encode as before.
	SemLimit  uint32  `msgpack:"sl,omitempty"`
	SemDelays []int64 `msgpack:"sd,omitempty"`

	children    map[string]bool // child name -> is directory; rebuilt on restore
	kids        dirIndex        // the children in name order (kids.go); rebuilt on restore
	openHandles int             // handles open on this instance; rebuilt on restore
}

// Holder is one holder of a lock. WaitSeq is the request id of the blocking
// Acquire that was granted (0 for an immediate grant), so a cancelled wait
// can undo exactly its own grant.
//
// Since is the Time of the entry that granted the lock (Unix ns): the
// acquisition time reads report. Holders of entries applied before it
// existed restore with 0, which reads report as unknown.
type Holder struct {
	Handle  uint64 `msgpack:"h"`
	Session uint64 `msgpack:"s"`
	WaitSeq uint64 `msgpack:"w,omitempty"`
	Since   int64  `msgpack:"t,omitempty"`
	// Gen is a semaphore holder's own generation (semaphore.go): its
	// permit's sequencer names it, so a holder that lost its permit is
	// told apart from those still holding. 0 on a plain lock, whose
	// holders share the node's LockGen.
	Gen uint64 `msgpack:"g,omitempty"`
}

// Waiter is one queued blocking Acquire. Since is the Time of the entry
// that queued it (Unix ns; 0 for one queued before the field existed).
type Waiter struct {
	Handle  uint64 `msgpack:"h"`
	Session uint64 `msgpack:"s"`
	Seq     uint64 `msgpack:"q"`
	Mode    uint8  `msgpack:"m"`
	Since   int64  `msgpack:"t,omitempty"`
	// Group names every handle of a multi-lock wait (semaphore.go),
	// sorted, the same in the queue of each of their nodes: the wait is
	// granted on all of them in one entry or on none. Nil for a
	// single-lock wait.
	Group []uint64 `msgpack:"gr,omitempty"`
}

// LockDelayCause is what started a lock-delay: the session that expired
// while holding the lock through Handle, with the identity it declared
// (Session's fields of the same names), and the Time of the entry that
// expired it (Unix ns).
type LockDelayCause struct {
	Session   uint64 `msgpack:"s"`
	Handle    uint64 `msgpack:"h,omitempty"`
	Principal string `msgpack:"p,omitempty"`
	Host      string `msgpack:"ho,omitempty"`
	PID       int64  `msgpack:"pi,omitempty"`
	Program   string `msgpack:"pg,omitempty"`
	Time      int64  `msgpack:"t,omitempty"`
}

// Session is a client session as replicated. Its lease lives only in the
// master's memory: a replica that becomes master starts every
// session with a fresh lease.
type Session struct {
	ID        uint64 `msgpack:"id"`
	Client    string `msgpack:"c,omitempty"`
	Principal string `msgpack:"p,omitempty"`
	Created   int64  `msgpack:"t"`
	// Host, PID and Program are the identity the client declared at
	// CreateSession (CreateSessionArgs), for operators: nothing checks
	// them, and each is at most MaxIdentityLen bytes.
	Host    string `msgpack:"ho,omitempty"`
	PID     int64  `msgpack:"pi,omitempty"`
	Program string `msgpack:"pg,omitempty"`
	// AckSeq: every request id at or below it has completed.
	AckSeq uint64 `msgpack:"a,omitempty"`
	// Incarnation is the command index of the session's latest
	// ResumeSession (0: never resumed); only client requests of this
	// incarnation apply (resume.go). Omitted while 0, so the snapshots of
	// cells that never resumed a session encode as before.
	Incarnation uint64 `msgpack:"in,omitempty"`
	// Results de-duplicates retried requests: request id -> first result.
	// Snapshots carry it as a sorted list (Go maps encode in random order).
	Results map[uint64]*Result `msgpack:"-"`

	handles map[uint64]bool // rebuilt on restore
}

// Handle is an open handle. It names the node instance it was opened on,
// so it goes invalid when the node is deleted or re-created.
type Handle struct {
	ID        uint64 `msgpack:"id"`
	Session   uint64 `msgpack:"s"`
	Path      string `msgpack:"p"`
	Instance  uint64 `msgpack:"i"`
	Flags     uint32 `msgpack:"f"`
	LockDelay int64  `msgpack:"ld,omitempty"`
	EventMask uint32 `msgpack:"em,omitempty"`
}

// Stat is a node's metadata as of the moment it was read.
type Stat struct {
	Instance, ContentGen, LockGen, ACLGen, Checksum, Size uint64
	CTime, MTime                                          int64
	Dir, Ephemeral                                        bool
	ReadACL, WriteACL, ChangeACL                          string
	LockMode                                              uint8
	LockHolders, LockWaiters                              uint32
	LockDelayUntil                                        int64
	// TTL (nanoseconds, 0: none) and Container say the node's lifetime
	// rule (ttl.go). Omitted while unset, so results stored before they
	// existed encode the same.
	TTL       int64 `msgpack:",omitempty"`
	Container bool  `msgpack:",omitempty"`
	// SemLimit is a semaphore's permit count (0: a plain lock).
	SemLimit uint32 `msgpack:",omitempty"`
}

// Result is what applying a command produced. Err carries a state-machine
// error as a value (raft's ApplyFuture.Response); the other fields depend on
// the command.
type Result struct {
	Err     *Error `msgpack:"e,omitempty"`
	Epoch   uint64 `msgpack:"ep,omitempty"`
	Session uint64 `msgpack:"s,omitempty"`
	Handle  uint64 `msgpack:"h,omitempty"`
	Created bool   `msgpack:"c,omitempty"`
	Granted bool   `msgpack:"g,omitempty"`
	Queued  bool   `msgpack:"q,omitempty"`
	LockGen uint64 `msgpack:"lg,omitempty"`
	Stat    Stat   `msgpack:"st,omitempty"`
	// Broken lists the holders a BreakLock freed, in grant order.
	Broken []Holder `msgpack:"bk,omitempty"`
	// Incarnation and NextSeq answer a ResumeSession: the session's new
	// incarnation, and the first request id its new process may use.
	Incarnation uint64 `msgpack:"in,omitempty"`
	NextSeq     uint64 `msgpack:"ns,omitempty"`
	// Name answers a sequential Open (FlagSequential): the name the node
	// was created under. Empty for every other command, so results
	// stored before it existed read the same.
	Name string `msgpack:"nm,omitempty"`
	// Txn answers a transaction (txn.go): its generation, or which check
	// or operation failed. Nil for every other command.
	Txn *TxnOutcome `msgpack:"tx,omitempty"`
}

// ChangeKind says what a Change reports. Changes live only in memory, on
// their way from apply to the master's observer, so the numbers are never
// stored and may change between versions.
type ChangeKind uint8

// Kinds of change the state machine reports to its observer.
const (
	ChangeLockGranted    ChangeKind = iota + 1 // Handle was granted the lock on Path by its wait Seq (0: immediately)
	ChangeWaitEnded                            // Handle's wait Seq on Path ended without a grant
	ChangeNode                                 // Path's contents, stat or existence changed
	ChangeSessionCreated                       // Session was created
	ChangeSessionClosed                        // Session was closed or expired
	ChangeLockDelay                            // Path is under lock-delay until Time with waiters queued
	ChangeContents                             // Path's contents were replaced
	ChangeChildAdded                           // Child was created in directory Path
	ChangeChildRemoved                         // Child was removed from directory Path
	ChangeDeleted                              // Path was deleted: handles on it are invalid
	ChangeLockConflict                         // Handle asked for the lock on Path while others hold it
	ChangeACL                                  // Path's ACL names changed
	ChangeLockBroken                           // Handle of Session lost Path's lock, held at generation Seq, to an admin's break
	ChangeSessionResumed                       // Session was resumed by a new process: its incarnation is Seq
)

// Change is one effect of an applied command, for the master's in-memory
// machinery (waking blocked acquires, invalidating caches).
type Change struct {
	Kind    ChangeKind
	Path    string
	Handle  uint64
	Session uint64
	Seq     uint64
	Time    int64
	Child   string
	// Reason is an admin's reason for a ChangeLockBroken.
	Reason string
	// ChildACL is the added or removed child's ACL, so the master tells
	// of it only watchers who may see it, also once it is gone. For a
	// ChangeDeleted it is the deleted node's ACL, and Seq its instance.
	ChildACL acl.NodeACL
}

// Observer receives the changes of each applied entry, in log order, on
// raft's apply goroutine. It must not block and must not call back into the
// FSM's write side.
type Observer func(index uint64, changes []Change)

func (n *Node) stat() Stat {
	delayUntil := n.LockDelayUntil
	if n.SemLimit != 0 && len(n.SemDelays) > 0 {
		// A semaphore's: when the last held-back permit is free again.
		delayUntil = slices.Max(n.SemDelays)
	}
	return Stat{
		Instance: n.Instance, ContentGen: n.ContentGen, LockGen: n.LockGen, ACLGen: n.ACLGen,
		Checksum: n.Checksum, Size: uint64(len(n.Contents)), CTime: n.CTime, MTime: n.MTime,
		Dir: n.Dir, Ephemeral: n.Ephemeral, ReadACL: n.ReadACL, WriteACL: n.WriteACL, ChangeACL: n.ChangeACL,
		LockMode: n.LockMode, LockHolders: uint32(len(n.Holders)), LockWaiters: uint32(len(n.Waiters)),
		LockDelayUntil: delayUntil, TTL: n.TTL, Container: n.Container, SemLimit: n.SemLimit,
	}
}

func checksum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// parentOf returns the parent of a name, "" for a name with no parent.
func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return ""
	}
	return p[:i]
}

func baseOf(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

func kindName(dir bool) string {
	if dir {
		return "directory"
	}
	return "file"
}

func modeName(m uint8) string {
	switch m {
	case LockExclusive:
		return "exclusive"
	case LockShared:
		return "shared"
	}
	return "free"
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func sortedStrings[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
