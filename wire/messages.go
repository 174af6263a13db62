package wire

import (
	"strconv"
	"time"
)

// RPCMultiplex is the first byte a client writes on a new TCP connection to
// the client port: the rest of the connection is a yamux session carrying
// one stream per call. Other values are reserved for future protocols.
const RPCMultiplex byte = 'L'

// Method names a call. Numbers are append-only.
type Method uint8

// The methods of the client↔master protocol (Chubby's calls, plus session
// management and cell status).
const (
	MethodCreateSession      Method = 1
	MethodKeepAlive          Method = 2
	MethodCloseSession       Method = 3
	MethodOpen               Method = 4
	MethodClose              Method = 5
	MethodGetContentsAndStat Method = 6
	MethodGetStat            Method = 7
	MethodReadDir            Method = 8
	MethodSetContents        Method = 9
	MethodDelete             Method = 10
	MethodAcquire            Method = 11
	MethodRelease            Method = 12
	MethodCancelAcquire      Method = 13
	MethodCellStatus         Method = 14
	MethodGetSequencer       Method = 15
	MethodCheckSequencer     Method = 16
	MethodListSessions       Method = 17
	MethodSetACL             Method = 18
)

var methodNames = map[Method]string{
	MethodCreateSession: "CreateSession", MethodKeepAlive: "KeepAlive", MethodCloseSession: "CloseSession",
	MethodOpen: "Open", MethodClose: "Close", MethodGetContentsAndStat: "GetContentsAndStat",
	MethodGetStat: "GetStat", MethodReadDir: "ReadDir", MethodSetContents: "SetContents",
	MethodDelete: "Delete", MethodAcquire: "Acquire", MethodRelease: "Release",
	MethodCancelAcquire: "CancelAcquire", MethodCellStatus: "CellStatus",
	MethodGetSequencer: "GetSequencer", MethodCheckSequencer: "CheckSequencer",
	MethodListSessions: "ListSessions", MethodSetACL: "SetACL",
	MethodBackup: "Backup", MethodReplicaAdd: "ReplicaAdd", MethodReplicaRemove: "ReplicaRemove",
	MethodReplicaList: "ReplicaList", MethodBreakLock: "BreakLock", MethodListLocks: "ListLocks",
	MethodRequestRelease: "RequestRelease",
}

// String names the method for logs and errors.
func (m Method) String() string {
	if s, ok := methodNames[m]; ok {
		return s
	}
	return "Method(" + strconv.Itoa(int(m)) + ")"
}

// Mutating reports whether the method changes replicated state and so must
// carry a request id (Header.Seq) that the cell de-duplicates.
func (m Method) Mutating() bool {
	switch m {
	case MethodOpen, MethodClose, MethodSetContents, MethodDelete, MethodAcquire, MethodRelease, MethodCancelAcquire,
		MethodSetACL, MethodBreakLock, MethodTxn, MethodAcquireMulti, MethodReleaseMulti:
		return true
	}
	return false
}

// Header opens every request. Session names the calling session (many
// sessions may share a connection); Epoch is the master epoch the caller
// expects (0 only on CreateSession, KeepAlive and CellStatus, which learn
// it); Seq is the request id within the session for mutating calls, and Ack
// tells the cell that every Seq at or below it has completed, so their
// de-duplication entries may be dropped.
//
// KeepStream asks the replica to leave the call's stream open after its
// reply, for the client's next call: a stream reused this way costs no
// stream setup and teardown (two frames each way) per call. The client
// must then send its next request on the stream or close it; the replica
// closes a stream left idle for its stream idle timeout. Without it the
// replica closes its side once the reply is written.
type Header struct {
	Method     Method `msgpack:"m"`
	Session    uint64 `msgpack:"s,omitempty"`
	Epoch      uint64 `msgpack:"e,omitempty"`
	Seq        uint64 `msgpack:"q,omitempty"`
	Ack        uint64 `msgpack:"a,omitempty"`
	KeepStream bool   `msgpack:"k,omitempty"`
	// Incarnation: see above; omitted while 0, so a session never
	// resumed sends what it always did.
	Incarnation uint64 `msgpack:"in,omitempty"`
	// OnBehalfOf, set by a proxy, names the principal the call is made
	// for: its client's certificate name. The master honours it only
	// from a principal it trusts as a proxy (CodePermission otherwise);
	// ACLs, rations, quotas and the audit then apply to that principal.
	OnBehalfOf string `msgpack:"ob,omitempty"`
	// ProxyCache, set by a proxy that caches reads (docs/subsystems.md,
	// "Proxies"), names its own cache session on a read it forwards to
	// fill its cache: the master then registers that session as a cacher
	// of the name too (ContentsResponse.ProxyCacheable says whether it
	// did), so that every write of the name reaches the proxy first.
	// Honoured only from a trusted proxy naming a session of its own.
	ProxyCache uint64 `msgpack:"pc,omitempty"`
}

// Status opens every response. Leader is the client address of the current
// master when this replica is not it (empty when unknown); Epoch is the
// master's current epoch, so a caller told CodeBadEpoch can learn the new one.
type Status struct {
	Code   Code   `msgpack:"c"`
	Msg    string `msgpack:"g,omitempty"`
	Leader string `msgpack:"l,omitempty"`
	Epoch  uint64 `msgpack:"e,omitempty"`
}

// Err converts a Status into an error (nil for CodeOK).
func (s *Status) Err() error {
	if s.Code == CodeOK {
		return nil
	}
	return &Error{Code: s.Code, Msg: s.Msg}
}

// Open flags. Read and Write say what the handle may do; Create creates the
// node when missing; Excl with Create fails with CodeExists when it exists;
// Directory creates (or insists on) a directory; Ephemeral creates an
// ephemeral node that dies with its creating session. Sequential, with
// Create, makes a new node named Path followed by the parent directory's
// next sequence number in SeqDigits zero-padded digits (the name is in
// OpenResponse.Name); it never opens an existing node. Container, with
// Create and Directory, makes a container directory: it is deleted with
// its last child (docs/spec.md#ttl-and-container-nodes). TTL says the
// request carries TTLMillis: a master of a version without TTL nodes
// refuses the unknown flag rather than make a plain file.
const (
	OpenRead       uint32 = 1 << 0
	OpenWrite      uint32 = 1 << 1
	OpenCreate     uint32 = 1 << 2
	OpenExcl       uint32 = 1 << 3
	OpenDirectory  uint32 = 1 << 4
	OpenEphemeral  uint32 = 1 << 5
	OpenSequential uint32 = 1 << 6
	OpenContainer  uint32 = 1 << 7
	OpenTTL        uint32 = 1 << 8
	openAll               = OpenRead | OpenWrite | OpenCreate | OpenExcl | OpenDirectory | OpenEphemeral | OpenSequential |
		OpenContainer | OpenTTL | OpenSemaphore
)

// MinTTL and MaxTTL bound OpenRequest.TTLMillis: a TTL outside them is
// refused with CodeBadRequest.
const (
	MinTTL = 500 * time.Millisecond
	MaxTTL = 365 * 24 * time.Hour
)

// SeqDigits is the width of the number a sequential create appends to
// its prefix (ZooKeeper's); SeqPlaceholder is a number of that width, for
// checking a prefix leaves room for it (ValidateSeqPrefix).
const (
	SeqDigits      = 10
	SeqPlaceholder = "0000000000"
)

// ValidateSeqPrefix checks that prefix, the name of a sequential Open,
// makes valid names once the number is appended: prefix plus SeqDigits
// digits must pass ValidateName. Its last component may be empty (a
// prefix ending in '/' makes names of digits alone).
func ValidateSeqPrefix(cell, prefix string) error {
	if err := ValidateName(cell, prefix+SeqPlaceholder); err != nil {
		return Errorf(CodeInvalidName, "sequential prefix %.256q: %v", prefix, err)
	}
	return nil
}

// ValidOpenFlags reports whether f names only known flags.
func ValidOpenFlags(f uint32) bool { return f&^openAll == 0 }

// Lock modes.
const (
	LockFree      uint8 = 0
	LockExclusive uint8 = 1
	LockShared    uint8 = 2
)

// Stat is the metadata of a node (docs/spec.md#stat). Generations are Raft log
// indexes of the entry that last changed them, so they only ever grow, also
// across delete and re-create of a name.
type Stat struct {
	Instance    uint64 `msgpack:"i"`
	ContentGen  uint64 `msgpack:"cg"`
	LockGen     uint64 `msgpack:"lg"`
	ACLGen      uint64 `msgpack:"ag"`
	Checksum    uint64 `msgpack:"ck"`
	Size        uint64 `msgpack:"sz"`
	CTime       int64  `msgpack:"ct"` // Unix nanoseconds
	MTime       int64  `msgpack:"mt"` // Unix nanoseconds
	Dir         bool   `msgpack:"d,omitempty"`
	Ephemeral   bool   `msgpack:"ep,omitempty"`
	ReadACL     string `msgpack:"ra,omitempty"`
	WriteACL    string `msgpack:"wa,omitempty"`
	ChangeACL   string `msgpack:"ca,omitempty"`
	LockMode    uint8  `msgpack:"lm,omitempty"`
	LockHolders uint32 `msgpack:"lh,omitempty"`
	LockWaiters uint32 `msgpack:"lw,omitempty"`
	// LockDelayUntil (Unix ns) is when a lock freed by a failed holder may
	// be taken again; 0 when no lock-delay was ever imposed.
	LockDelayUntil int64 `msgpack:"ld,omitempty"`
	// Holders names the lock's holders in grant order, at most
	// MaxStatHolders of them (LockHolders counts them all). Only the reads
	// GetStat and GetContentsAndStat fill it, for a caller that may read
	// the node; a decoder that does not know the field skips it.
	Holders []LockHolder `msgpack:"ho,omitempty"`
	// Waiters names the queued Acquires in queue order, at most
	// MaxStatHolders of them (LockWaiters counts them all), filled like
	// Holders.
	Waiters []LockWaiter `msgpack:"wt,omitempty"`
	// LockDelayBy names the holder whose session's expiry imposed the
	// lock-delay that LockDelayUntil ends (the latest one imposed; it is
	// running only while LockDelayUntil is in the future). Filled like
	// Holders; nil when no lock-delay was ever imposed.
	LockDelayBy *LockDelayCause `msgpack:"lb,omitempty"`
	// TTLMillis is a TTL node's TTL (0: the node has none); Container
	// says the node is a container directory.
	TTLMillis int64 `msgpack:"tl,omitempty"`
	Container bool  `msgpack:"cn,omitempty"`
	// SemLimit is a semaphore's permit count (0: a plain lock).
	SemLimit uint32 `msgpack:"sl,omitempty"`
}

// MaxStatHolders bounds Stat.Holders, so a stat of a lock shared by
// thousands of sessions still fits a frame.
const MaxStatHolders = 64

// LockHolder is one holder of a lock: its session, the principal that
// session authenticated as ("" in a cell without TLS), the identity its
// client declared at CreateSession (Host, PID, Program; empty when it
// declared none), and Since, when the lock was granted to it (Unix ns,
// the master's clock; 0 when unknown). A BreakLock reply names only the
// session and principal.
type LockHolder struct {
	Session   uint64 `msgpack:"s"`
	Principal string `msgpack:"p,omitempty"`
	Host      string `msgpack:"ho,omitempty"`
	PID       int64  `msgpack:"pi,omitempty"`
	Program   string `msgpack:"pg,omitempty"`
	Since     int64  `msgpack:"t,omitempty"`
}

// Event kinds delivered on KeepAlive replies.
const (
	EventMasterFailover uint8 = 1
	EventInvalidate     uint8 = 2
	EventLockAcquired   uint8 = 3
	EventHandleInvalid  uint8 = 4
	EventContents       uint8 = 5
	EventChildAdded     uint8 = 6
	EventChildRemoved   uint8 = 7
	EventLockConflict   uint8 = 8
)

// Event mask bits a handle asks for at Open (OpenRequest.EventMask).
const (
	MaskContentsModified uint32 = 1 << 0
	MaskChildAdded       uint32 = 1 << 1
	MaskChildRemoved     uint32 = 1 << 2
	MaskLockAcquired     uint32 = 1 << 3
	MaskConflictingLock  uint32 = 1 << 4
	MaskHandleInvalid    uint32 = 1 << 5
)

// Event is one push from the master to a session, carried on a KeepAlive
// reply and acknowledged by the next KeepAlive (KeepAliveRequest.AckEvent).
type Event struct {
	Seq    uint64 `msgpack:"q"`
	Kind   uint8  `msgpack:"k"`
	Path   string `msgpack:"p,omitempty"`
	Handle uint64 `msgpack:"h,omitempty"`
	Gen    uint64 `msgpack:"g,omitempty"`
	Child  string `msgpack:"c,omitempty"`
	// Reason is the admin's reason of an EventLockBroken, the
	// requester's of an EventReleaseRequested.
	Reason string `msgpack:"r,omitempty"`
	// From and FromPrincipal name the requester's session and principal
	// of an EventReleaseRequested.
	From          uint64 `msgpack:"fs,omitempty"`
	FromPrincipal string `msgpack:"fp,omitempty"`
	// Pos is a handle event's position, when the master knows it (not
	// for a node the change deleted). The epoch of an event is the
	// KeepAliveResponse's: a master's event queues are not replicated, so
	// a reply carries only events its own master made.
	Pos *EventPos `msgpack:"o,omitempty"`
}

// EventPos is where a handle event happened: the node's instance and
// generations (as in Stat) just after the change it tells of. Generations
// only grow, so positions order the events of one node. A pointer keeps
// an Event without one as small as before, so a frame of events decodes
// within the codec's allocation bound.
type EventPos struct {
	Instance   uint64 `msgpack:"i,omitempty"`
	ContentGen uint64 `msgpack:"c,omitempty"`
	LockGen    uint64 `msgpack:"l,omitempty"`
}

// CreateSessionRequest asks for a new session. ClientName is for
// operators; so are Host, PID and Program, the identity the client
// declares, which Stat shows for each of the session's holds and waits.
// Nothing checks the identity's truth; CheckIdentity bounds its form.
type CreateSessionRequest struct {
	ClientName string `msgpack:"n,omitempty"`
	Host       string `msgpack:"ho,omitempty"`
	PID        int64  `msgpack:"pi,omitempty"`
	Program    string `msgpack:"pg,omitempty"`
}

// CreateSessionResponse names the new session and its first lease.
type CreateSessionResponse struct {
	Session uint64 `msgpack:"s"`
	Epoch   uint64 `msgpack:"e"`
	// LeaseMillis is the lease remaining when the master replied.
	LeaseMillis int64 `msgpack:"l"`
	// ResumeSecret is the session's secret (ResumeSecretSize bytes): with
	// the session id, what a new process of the same principal presents
	// to resume the session (MethodResumeSession). Empty from a master
	// that cannot resume sessions.
	ResumeSecret []byte `msgpack:"rs,omitempty"`
}

// KeepAliveRequest extends the session named in the header. AckEvent
// acknowledges every event with a Seq at or below it.
type KeepAliveRequest struct {
	AckEvent uint64 `msgpack:"a,omitempty"`
	// Prompt asks the master to reply at once instead of holding the
	// call: a client in jeopardy is searching for the master and needs
	// to know quickly whether this replica is it.
	Prompt bool `msgpack:"p,omitempty"`
}

// LeaseDriftMargin is what a lease's holder takes off every lease d it
// is granted (the client library, and a proxy for its own clock): its
// clock may run up to 1 % slower than the master's, which would otherwise
// see the lease end after the master has expired it, plus a fixed
// allowance for scheduling delay.
func LeaseDriftMargin(d time.Duration) time.Duration { return d/100 + 20*time.Millisecond }

// TrustedLeaseEnd is when a lease of length lease, counted from start on
// the holder's own clock (when it sent the call that earned it), ends for
// the holder: its drift margin before the master's end.
func TrustedLeaseEnd(start time.Time, lease time.Duration) time.Time {
	return start.Add(lease - LeaseDriftMargin(lease))
}

// SearchTry is how long one KeepAlive may wait on a replica while its
// lease has run out or is about to and the holder searches the replicas
// for the master: a third of the lease, within 200 ms..2 s. The master
// it knew may be frozen with its connection open, and a new master waits
// only about one lease for the session to be heard, so the holder
// cannot wait on one replica for long. The client library in jeopardy
// and a proxy's batch for its clients both try this long.
func SearchTry(lease time.Duration) time.Duration {
	return min(max(lease/3, 200*time.Millisecond), 2*time.Second)
}

// KeepAliveResponse grants the lease. The master held the call for
// HeldMillis and, when it replied, the lease had LeaseMillis to run; a
// client that sent the call at local time T may assume its lease runs until
// T + HeldMillis + LeaseMillis, less its drift margin (LeaseDriftMargin).
type KeepAliveResponse struct {
	Epoch       uint64  `msgpack:"e"`
	HeldMillis  int64   `msgpack:"h"`
	LeaseMillis int64   `msgpack:"l"`
	Events      []Event `msgpack:"v,omitempty"`
	// Proxy names the proxy that answered (its instance, drawn when it
	// starts; 0: a master). A client trusts what a proxy's cache served
	// it only under leases from that same proxy instance
	// (ContentsResponse.Proxy).
	Proxy uint64 `msgpack:"px,omitempty"`
}

// MaxReplyEvents and MaxReplyEventBytes bound the events of one
// KeepAliveResponse, well inside a frame (names are at most 1 KiB): a
// master's reply and a proxy's to its client alike.
const (
	MaxReplyEvents     = 1024
	MaxReplyEventBytes = 512 << 10
)

// EventSize over-estimates e's encoding: 64 bytes for its fixed fields
// and keys, and its strings.
func EventSize(e *Event) int {
	return 64 + len(e.Path) + len(e.Child) + len(e.Reason) + len(e.FromPrincipal)
}

// ReplyEvents copies the oldest of evs that fit one KeepAliveResponse of
// maxBytes of events by EventSize (at least one, at most MaxReplyEvents):
// a master's reply and a proxy's to its client alike.
func ReplyEvents(evs []Event, maxBytes int) []Event {
	n, size := 0, 0
	for n < len(evs) && n < MaxReplyEvents {
		size += EventSize(&evs[n])
		if n > 0 && size > maxBytes {
			break
		}
		n++
	}
	return append([]Event(nil), evs[:n]...)
}

// CloseSessionRequest ends the session in the header cleanly: its locks
// are released without lock-delay and its ephemeral nodes deleted.
type CloseSessionRequest struct{}

// OpenRequest opens (and with OpenCreate, creates) the node at Path.
// Contents are the initial contents of a created file. LockDelayMillis is
// the lock-delay this handle asks for when its session fails while it holds
// the lock (0 means the cell default).
type OpenRequest struct {
	Path            string `msgpack:"p"`
	Flags           uint32 `msgpack:"f"`
	Contents        []byte `msgpack:"c,omitempty"`
	LockDelayMillis int64  `msgpack:"ld,omitempty"`
	EventMask       uint32 `msgpack:"em,omitempty"`
	// Cache says the caller may keep the handle open for reuse after the
	// application closes it: the master then invalidates the name to it
	// like a cached read, and the caller drops the handle on invalidation.
	Cache bool `msgpack:"k,omitempty"`
	// CacheMissing asks that an Open without OpenCreate of a name the
	// caller cannot see (it does not exist, or the caller may neither
	// read nor write it: the two are answered alike) be answered by an
	// OpenResponse with Missing set instead of CodeNotFound, cacheable
	// when the master registered the caller as a cacher of the name's
	// parent directory, which it does only for a caller that may read
	// that directory. A master that does not know the field answers
	// CodeNotFound as before.
	CacheMissing bool `msgpack:"km,omitempty"`
	// TTLMillis, with Create and TTL on a file, makes a TTL node:
	// deleted once TTLMillis pass after its last write (or its create)
	// without another (docs/spec.md#ttl-and-container-nodes). It is set
	// exactly when the TTL flag is.
	TTLMillis int64 `msgpack:"tl,omitempty"`
	// SemLimit, with Create and OpenSemaphore on a file, makes it a
	// counting semaphore of that many permits (1 to MaxSemLimit); set
	// exactly when the OpenSemaphore flag is.
	SemLimit uint32 `msgpack:"sl,omitempty"`
}

// OpenResponse names the handle. Missing says no handle was opened: the
// name does not exist for the caller (asked for with CacheMissing). For a
// Missing answer, Cacheable says the caller may cache the absence: the
// master then invalidates the parent directory to it before any change
// that could make the name appear (a create of it, an ACL change that
// could reveal it).
type OpenResponse struct {
	Handle    uint64 `msgpack:"h"`
	Created   bool   `msgpack:"c,omitempty"`
	Stat      Stat   `msgpack:"s"`
	Cacheable bool   `msgpack:"k,omitempty"`
	Missing   bool   `msgpack:"m,omitempty"`
	// Name answers an Open with OpenSequential: the full name of the node
	// it created (the handle's name). Empty for every other Open.
	Name string `msgpack:"n,omitempty"`
}

// HandleRequest is the request of every call that names only a handle:
// Close, GetContentsAndStat, GetStat, ReadDir, Delete, Release,
// GetSequencer. Sequencer, when set (SetSequencer), makes the call fail
// with CodeStaleSequencer unless that sequencer is still valid; for
// mutating calls the check is atomic with the change.
type HandleRequest struct {
	Handle    uint64 `msgpack:"h"`
	Sequencer []byte `msgpack:"sq,omitempty"`
	// Cache says the caller will cache the answer: the master then sends
	// it an invalidation before any write that would make it stale.
	Cache bool `msgpack:"c,omitempty"`
	// After (ReadDir only) is the listing's cursor: the page holds only
	// children whose names sort strictly after it ("" from the start).
	// It need not name a child, so it reveals nothing.
	After string `msgpack:"a,omitempty"`
	// Limit (ReadDir only) bounds the page's entries; 0 or more than
	// MaxDirPage means MaxDirPage. The master also stops a page before
	// its names pass DirPageBytes, so a page may hold fewer.
	Limit uint32 `msgpack:"l,omitempty"`
}

// Listing pages. A directory's listing can hold any number of children,
// so ReadDir answers one page of at most MaxDirPage entries and about
// DirPageBytes: the largest page, 255-byte names throughout, encodes to
// well under MaxFrameSize (TestDirPageFitsAFrame).
const (
	// MaxDirPage bounds the entries of one ReadDir page.
	MaxDirPage = 4096
	// DirPageBytes bounds the sum of DirEntrySize over a page's entries;
	// a page always holds at least one entry.
	DirPageBytes = 512 << 10
	// DirEntryOverhead is the most a DirEntry's encoding costs beyond its
	// name's bytes (map and string headers, keys, the directory flag).
	DirEntryOverhead = 8
)

// DirEntrySize is the most bytes the encoding of a DirEntry named name
// takes in a ReadDirResponse.
func DirEntrySize(name string) int { return len(name) + DirEntryOverhead }

// SequencerResponse carries a signed sequencer (GetSequencer).
type SequencerResponse struct {
	Sequencer []byte `msgpack:"s"`
}

// CheckSequencerRequest asks whether a sequencer is still valid.
type CheckSequencerRequest struct {
	Sequencer []byte `msgpack:"s"`
}

// CheckSequencerResponse says whether it is, and if not why.
type CheckSequencerResponse struct {
	Valid  bool   `msgpack:"v"`
	Reason string `msgpack:"r,omitempty"`
}

// Empty is the response of calls that return nothing but their status.
type Empty struct{}

// ContentsResponse carries a file's contents and stat.
type ContentsResponse struct {
	Contents []byte `msgpack:"c"`
	Stat     Stat   `msgpack:"s"`
	// Cacheable: the caller may cache the answer (it asked to, and no
	// write of the node was in progress).
	Cacheable bool `msgpack:"k,omitempty"`
	// ProxyCacheable: the read named a proxy's cache session
	// (Header.ProxyCache), and the master registered it as a cacher of
	// the node: the proxy may serve the answer from its cache.
	ProxyCacheable bool `msgpack:"pk,omitempty"`
	// Proxy, when not 0, says a proxy's cache served the answer (the
	// proxy's instance, as KeepAliveResponse.Proxy): a client caches it
	// only while its leases come from that instance, and drops it when
	// they stop (the proxy alone knows it handed the entry out).
	Proxy uint64 `msgpack:"px,omitempty"`
}

// StatResponse carries a node's stat; ProxyCacheable and Proxy as in
// ContentsResponse.
type StatResponse struct {
	Stat           Stat   `msgpack:"s"`
	Cacheable      bool   `msgpack:"k,omitempty"`
	ProxyCacheable bool   `msgpack:"pk,omitempty"`
	Proxy          uint64 `msgpack:"px,omitempty"`
}

// DirEntry is one child in a listing.
type DirEntry struct {
	Name string `msgpack:"n"`
	Dir  bool   `msgpack:"d,omitempty"`
}

// ReadDirResponse is one page of a directory's listing: children in name
// order, strictly after the request's After, leaving out those the caller
// may neither read nor write. More says further children follow: ask
// again with After set to the last entry's name (a page with More is
// never empty). Each page is a linearizable read of its own.
type ReadDirResponse struct {
	Entries   []DirEntry `msgpack:"e"`
	Cacheable bool       `msgpack:"k,omitempty"`
	More      bool       `msgpack:"m,omitempty"`
}

// SetContentsRequest replaces a file's contents. With HasIfGeneration the
// write happens only if the file's content generation equals IfGeneration.
type SetContentsRequest struct {
	Handle          uint64 `msgpack:"h"`
	Contents        []byte `msgpack:"c"`
	IfGeneration    uint64 `msgpack:"g,omitempty"`
	HasIfGeneration bool   `msgpack:"i,omitempty"`
	Sequencer       []byte `msgpack:"sq,omitempty"`
}

// AcquireRequest takes the handle's lock in Mode. With Wait the call queues
// in FIFO order until the lock is granted or the call is cancelled; without,
// it fails at once with CodeLockHeld.
type AcquireRequest struct {
	Handle uint64 `msgpack:"h"`
	Mode   uint8  `msgpack:"m"`
	Wait   bool   `msgpack:"w,omitempty"`
}

// AcquireResponse reports the lock generation the grant produced and the
// grant's sequencer, the one GetSequencer would return for it, so the
// holder needs no second call to fence its work.
type AcquireResponse struct {
	LockGen   uint64 `msgpack:"g"`
	Sequencer []byte `msgpack:"sq,omitempty"`
}

// CancelAcquireRequest withdraws the blocking Acquire that carried request
// id WaitSeq on Handle: it leaves the queue, or, if it was granted after the
// caller gave up, the lock is released.
type CancelAcquireRequest struct {
	Handle  uint64 `msgpack:"h"`
	WaitSeq uint64 `msgpack:"w"`
}

// CellStatusRequest asks any replica about the cell. StateHash asks for a
// hash of the replica's whole replicated state as well: costly (it encodes
// the state while holding off the replica's applies), so only the cell's
// admin may ask, at most one is computed at a time per replica and at most
// one per interval (CodeTooMany otherwise), and the serving master
// declines (CodeUnavailable) unless AllowMaster says the admin accepts
// pausing its writes.
//
// Detail asks for the health detail as well (CellStatusResponse.Detail):
// the answering replica's disk usage and, from the master, each member's
// match index and last contact. Only the cell's admin and the principals
// listed in the monitor ACL file (/ls/<cell>/acl/monitor) may ask;
// anyone else gets CodePermission. A replica that predates it ignores the
// flag and answers without Detail.
type CellStatusRequest struct {
	StateHash   bool `msgpack:"h,omitempty"`
	AllowMaster bool `msgpack:"am,omitempty"`
	Detail      bool `msgpack:"dt,omitempty"`
}

// ReplicaStatus describes one replica as the answering replica sees it.
type ReplicaStatus struct {
	ID         string `msgpack:"i"`
	ClientAddr string `msgpack:"c"`
	RaftAddr   string `msgpack:"r"`
	Master     bool   `msgpack:"m,omitempty"`
	// Suffrage is SuffrageVoter or SuffrageNonvoter (empty from a
	// replica that does not know the configuration).
	Suffrage string `msgpack:"sf,omitempty"`
	// Healthy (from the master only) says the master heard from the
	// member within the last few heartbeats; the master is healthy.
	Healthy bool `msgpack:"h,omitempty"`
	// LastContactMillis (from the master only) is how long ago the master
	// last heard from the member; 0 for the master itself.
	LastContactMillis int64 `msgpack:"lc,omitempty"`
	// MatchIndex (from the master only: ReplicaList, and CellStatus with
	// Detail) is the highest log index the master knows the member holds
	// as its own; 0 for the master itself and for a member not heard
	// from in this term.
	MatchIndex uint64 `msgpack:"mi,omitempty"`
	// Role is RoleReadReplica for a read replica, empty for a member that
	// votes or will once caught up (every replica knows it: it is in the
	// replicated member table).
	Role string `msgpack:"ro,omitempty"`
}

// DiskUsage is what one replica keeps on disk, in bytes, measured at most
// every few seconds (a probe never costs a walk of the data folder each
// time): the whole data folder, the Raft log store within it, the
// snapshots it retains, and the newest snapshot's size and the log index
// it covers (0 when it has none).
type DiskUsage struct {
	DataBytes         int64  `msgpack:"d"`
	LogStoreBytes     int64  `msgpack:"l"`
	SnapshotsBytes    int64  `msgpack:"s"`
	LastSnapshotBytes int64  `msgpack:"lb,omitempty"`
	LastSnapshotIndex uint64 `msgpack:"li,omitempty"`
	// AgeMillis is how long ago the figures were measured.
	AgeMillis int64 `msgpack:"a,omitempty"`
}

// CellStatusResponse describes the cell from the answering replica.
type CellStatusResponse struct {
	Cell         string          `msgpack:"n"`
	Self         string          `msgpack:"s"`
	State        string          `msgpack:"st"`
	Master       string          `msgpack:"m,omitempty"`
	Epoch        uint64          `msgpack:"e"`
	Term         uint64          `msgpack:"t"`
	CommitIndex  uint64          `msgpack:"ci"`
	AppliedIndex uint64          `msgpack:"ai"`
	Sessions     uint64          `msgpack:"ss"`
	Nodes        uint64          `msgpack:"nn"`
	Replicas     []ReplicaStatus `msgpack:"r"`
	// StateHash (when asked) is a SHA-256 of the replicated state as of
	// entry HashIndex.
	StateHash []byte `msgpack:"sh,omitempty"`
	HashIndex uint64 `msgpack:"hi,omitempty"`
	// Detail says the health detail was given (asked for with
	// CellStatusRequest.Detail, by a caller allowed it): Disk is this
	// replica's disk usage, and when it is the Raft leader its Replicas
	// carry Healthy, LastContactMillis and MatchIndex.
	Detail bool       `msgpack:"dt,omitempty"`
	Disk   *DiskUsage `msgpack:"du,omitempty"`
}

// ListSessionsRequest asks the master for its live sessions.
type ListSessionsRequest struct{}

// SessionInfo describes one live session: Host, PID and Program are the
// identity its client declared at CreateSession (as LockHolder's; empty
// when it declared none, and from a master that predates them).
type SessionInfo struct {
	ID          uint64   `msgpack:"i"`
	Client      string   `msgpack:"c,omitempty"`
	Principal   string   `msgpack:"p,omitempty"`
	Created     int64    `msgpack:"t"`
	LeaseMillis int64    `msgpack:"l"`
	Handles     uint32   `msgpack:"h"`
	Locks       []string `msgpack:"k,omitempty"`
	Host        string   `msgpack:"ho,omitempty"`
	PID         int64    `msgpack:"pi,omitempty"`
	Program     string   `msgpack:"pg,omitempty"`
}

// ListSessionsResponse lists the live sessions in id order, at most
// MaxListedSessions of them, and fewer when their encoding would not fit
// well inside a frame (Total says how many there are).
type ListSessionsResponse struct {
	Sessions []SessionInfo `msgpack:"s"`
	Total    uint64        `msgpack:"t"`
}

// MaxListedSessions bounds a ListSessions reply so it fits in a frame.
const MaxListedSessions = 5000

// SetACLRequest replaces the three ACL file names of the handle's node
// (base names of files in /ls/<cell>/acl/; "" means the default rule).
// It needs the change-ACL permission. The response is a StatResponse.
// With HasIfGeneration the change happens only if the node's ACL
// generation (Stat.ACLGen) equals IfGeneration, and otherwise fails with
// CodeGenerationMismatch, changing nothing: the compare-and-swap
// SetContentsRequest has for contents. Both fields are omitted when
// unset, so a request without them is the one older clients send.
type SetACLRequest struct {
	Handle          uint64 `msgpack:"h"`
	Read            string `msgpack:"r,omitempty"`
	Write           string `msgpack:"w,omitempty"`
	ChangeACL       string `msgpack:"c,omitempty"`
	IfGeneration    uint64 `msgpack:"g,omitempty"`
	HasIfGeneration bool   `msgpack:"i,omitempty"`
}
