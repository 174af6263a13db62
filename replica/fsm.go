package replica

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"lockcell/acl"
	"lockcell/cell/wire/bound"
)

// Open flags as the state machine understands them. They equal the wire
// flags bit for bit; the master passes them through.
const (
	FlagRead      uint32 = 1 << 0
	FlagWrite     uint32 = 1 << 1
	FlagCreate    uint32 = 1 << 2
	FlagExcl      uint32 = 1 << 3
	FlagDirectory uint32 = 1 << 4
	FlagEphemeral uint32 = 1 << 5
)

// Lock modes.
const (
	LockFree      uint8 = 0
	LockExclusive uint8 = 1
	LockShared    uint8 = 2
)

// maxDedupPerSession bounds the request de-duplication table of one
// session. A well-behaved client acknowledges completed requests long
// before; past the bound the oldest results are forgotten (a retry of one
// then gets KindDuplicate rather than a second application).
const maxDedupPerSession = 4096

// Node is one file or directory. Generations are Raft indexes, so they grow
// across delete and re-create of a name and across masters.
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

	children    map[string]bool // child name -> is directory; rebuilt on restore
	kids        dirIndex        // the children in name order (kids.go); rebuilt on restore
	openHandles int             // handles open on this instance; rebuilt on restore
}

// Holder is one holder of a lock. WaitSeq is the request id of the blocking
// Acquire that was granted (0 for an immediate grant), so a cancelled wait
// can undo exactly its own grant.
type Holder struct {
	Handle  uint64 `msgpack:"h"`
	Session uint64 `msgpack:"s"`
	WaitSeq uint64 `msgpack:"w,omitempty"`
}

// Waiter is one queued blocking Acquire.
type Waiter struct {
	Handle  uint64 `msgpack:"h"`
	Session uint64 `msgpack:"s"`
	Seq     uint64 `msgpack:"q"`
	Mode    uint8  `msgpack:"m"`
}

// Session is a client session as replicated. Its lease lives only in the
// master's memory (SPEC 4).
type Session struct {
	ID        uint64 `msgpack:"id"`
	Client    string `msgpack:"c,omitempty"`
	Principal string `msgpack:"p,omitempty"`
	Created   int64  `msgpack:"t"`
	// AckSeq: every request id at or below it has completed.
	AckSeq uint64 `msgpack:"a,omitempty"`
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
}

// ChangeKind says what a Change reports.
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
	// ChildACL is the added or removed child's ACL, so the master tells
	// of it only watchers who may see it, also once it is gone.
	ChildACL acl.NodeACL
}

// Observer receives the changes of each applied entry, in log order, on
// raft's apply goroutine. It must not block and must not call back into the
// FSM's write side.
type Observer func(index uint64, changes []Change)

// FSM is the replicated state machine: the namespace, sessions, handles,
// locks and the request de-duplication table. Reads from the master go
// through its read methods, which take a shared lock.
type FSM struct {
	log *slog.Logger

	mu       sync.RWMutex
	cell     string
	epoch    uint64
	nodes    map[string]*Node
	sessions map[uint64]*Session
	// principals counts live sessions per principal (derived; rebuilt on
	// restore), so the master's per-principal cap costs no scan.
	principals map[string]int
	handles    map[uint64]*Handle
	applied    uint64
	cellKey    []byte
	observer   Observer
	// watch indexes handles that asked for events: name -> handle -> mask.
	watch map[string]map[uint64]uint32
	// usage counts what the quotas cap (quota.go; derived, rebuilt on
	// restore).
	usage usage
	// members is the member table (members.go).
	members memberTable

	changes []Change // scratch, used under mu by apply

	// aclParsed caches parsed ACL files by name. Readers fill it under
	// mu.RLock, so it has its own lock.
	aclMu     sync.Mutex
	aclParsed map[string]parsedACL

	// live is set once raft has started on this FSM (Replica.Open): a
	// Restore after that is a snapshot install, not the start-up restore
	// (the CrashSnapshotInstall crash point tells the two apart).
	live atomic.Bool
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns the state machine of an empty cell: just the root
// directory /ls/<cell>.
func NewFSM(cell string, logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.Default()
	}
	f := &FSM{log: logger, cell: cell}
	f.reset()
	return f
}

func (f *FSM) reset() {
	root := "/ls/" + f.cell
	f.epoch = 0
	f.nodes = map[string]*Node{root: {Path: root, Dir: true, children: map[string]bool{}}}
	f.sessions = map[uint64]*Session{}
	f.principals = map[string]int{}
	f.usage = newUsage()
	f.handles = map[uint64]*Handle{}
	f.watch = map[string]map[uint64]uint32{}
}

// Root returns the name of the cell's root directory.
func (f *FSM) Root() string { return "/ls/" + f.cell }

// SetObserver installs the observer of applied changes (nil removes it).
func (f *FSM) SetObserver(o Observer) {
	f.mu.Lock()
	f.observer = o
	f.mu.Unlock()
}

// Apply applies one committed Raft entry. It returns a *Result; state
// errors are values inside it, never panics, except for an entry this
// version cannot decode, where stopping beats diverging.
func (f *FSM) Apply(l *raft.Log) any {
	cmd, err := DecodeCommand(l.Data)
	if err != nil {
		panic(fmt.Sprintf("lockcell replica: cannot apply entry %d: %v", l.Index, err))
	}
	f.mu.Lock()
	f.changes = f.changes[:0]
	res := f.applyDedup(l.Index, cmd)
	f.applied = l.Index
	obs := f.observer
	var changes []Change
	if obs != nil && len(f.changes) > 0 {
		changes = append([]Change(nil), f.changes...)
	}
	f.mu.Unlock()
	if changes != nil {
		obs(l.Index, changes)
	}
	return res
}

func (f *FSM) applyDedup(index uint64, c *Command) *Result {
	if c.Session == 0 || c.Seq == 0 {
		if err := f.checkFence(c); err != nil {
			return &Result{Err: err}
		}
		return f.apply(index, c)
	}
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	if c.Ack > s.AckSeq {
		for q := range s.Results {
			if q <= c.Ack {
				delete(s.Results, q)
			}
		}
		s.AckSeq = c.Ack
	}
	if c.Seq <= s.AckSeq {
		return &Result{Err: errf(KindDuplicate, "request %d of session %d already completed", c.Seq, c.Session)}
	}
	if r, ok := s.Results[c.Seq]; ok && !bugNoDedup {
		return r
	}
	var r *Result
	if err := f.checkFence(c); err != nil {
		r = &Result{Err: err}
	} else {
		r = f.apply(index, c)
	}
	if f.sessions[c.Session] == s { // CloseSession removes it
		if s.Results == nil {
			s.Results = map[uint64]*Result{}
		}
		if len(s.Results) >= maxDedupPerSession {
			oldest := ^uint64(0)
			for q := range s.Results {
				oldest = min(oldest, q)
			}
			delete(s.Results, oldest)
			s.AckSeq = max(s.AckSeq, oldest)
		}
		s.Results[c.Seq] = r
	}
	return r
}

func (f *FSM) apply(index uint64, c *Command) *Result {
	switch c.Type {
	case CmdEpoch:
		f.epoch++
		return &Result{Epoch: f.epoch}
	case CmdCreateSession:
		f.sessions[index] = &Session{ID: index, Client: c.Client, Principal: c.Principal, Created: c.Time, handles: map[uint64]bool{}}
		f.principals[c.Principal]++
		f.note(Change{Kind: ChangeSessionCreated, Session: index})
		return &Result{Session: index}
	case CmdCloseSession:
		return f.closeSession(index, c)
	case CmdOpen:
		return f.open(index, c)
	case CmdClose:
		h, err := f.ownHandle(c)
		if err != nil {
			return &Result{Err: err}
		}
		f.closeHandle(index, h, false, c.Time)
		return &Result{}
	case CmdSetContents:
		return f.setContents(index, c)
	case CmdDelete:
		return f.delete(index, c)
	case CmdAcquire:
		return f.acquire(index, c)
	case CmdRelease:
		h, n, err := f.liveHandle(c)
		if err != nil {
			return &Result{Err: err}
		}
		if !n.removeHolder(h.ID) {
			return &Result{Err: errf(KindNotHeld, "%s: this handle does not hold the lock", n.Path)}
		}
		f.afterRelease(index, n, c.Time)
		return &Result{}
	case CmdCancelWait:
		return f.cancelWait(index, c)
	case CmdCellKey:
		if len(f.cellKey) == 0 && len(c.Contents) >= 16 {
			f.cellKey = append([]byte(nil), c.Contents...)
		}
		return &Result{}
	case CmdGrant:
		if n := f.nodes[c.Path]; n != nil {
			f.grantWaiters(index, n, c.Time)
		}
		return &Result{}
	case CmdSetACL:
		return f.setACL(index, c)
	case CmdMembersSeed, CmdMemberPut, CmdMemberRemove:
		return f.applyMembers(c)
	}
	panic(fmt.Sprintf("lockcell replica: unknown command type %d at index %d", c.Type, index))
}

func (f *FSM) note(c Change) { f.changes = append(f.changes, c) }

func (f *FSM) addWatch(h *Handle) {
	if h.EventMask == 0 {
		return
	}
	w := f.watch[h.Path]
	if w == nil {
		w = map[uint64]uint32{}
		f.watch[h.Path] = w
	}
	w[h.ID] = h.EventMask
}

// checkFence reports whether the sequencer c carries names a lock still
// held as claimed. A lock c's principal may not read is checked as if its
// node were gone (fenceNode).
func (f *FSM) checkFence(c *Command) *Error {
	if c.Fence == nil {
		return nil
	}
	if reason := fenceReasonOf(c.Fence, f.fenceNode(c.Fence, c.Principal, c.Admin)); reason != "" {
		return errf(KindStaleSequencer, "%s", reason)
	}
	return nil
}

// fenceReason is "" when the lock fc names is held at fc's generation in
// fc's mode, else why not.
func (f *FSM) fenceReason(fc *Fence) string { return fenceReasonOf(fc, f.nodes[fc.Path]) }

// fenceReasonOf is fenceReason given n, the node of the lock fc names
// (nil: there is none).
func fenceReasonOf(fc *Fence, n *Node) string {
	switch {
	case n == nil:
		return fmt.Sprintf("%s no longer exists", fc.Path)
	case len(n.Holders) == 0:
		return fmt.Sprintf("%s is no longer locked", fc.Path)
	case n.LockGen != fc.Generation:
		return fmt.Sprintf("%s is locked at generation %d, not %d", fc.Path, n.LockGen, fc.Generation)
	case n.LockMode != fc.Mode:
		return fmt.Sprintf("%s is locked %s, not %s", fc.Path, modeName(n.LockMode), modeName(fc.Mode))
	}
	return ""
}

// ownHandle finds the handle named by c and checks it belongs to c's session.
func (f *FSM) ownHandle(c *Command) (*Handle, *Error) {
	h := f.handles[c.Handle]
	if h == nil || h.Session != c.Session {
		return nil, errf(KindHandleInvalid, "handle %d is not open in session %d", c.Handle, c.Session)
	}
	return h, nil
}

// liveHandle is ownHandle plus: the handle's node instance still exists.
func (f *FSM) liveHandle(c *Command) (*Handle, *Node, *Error) {
	h, err := f.ownHandle(c)
	if err != nil {
		return nil, nil, err
	}
	n := f.nodes[h.Path]
	if n == nil || n.Instance != h.Instance {
		return nil, nil, errf(KindHandleInvalid, "%s: the node this handle opened was deleted", h.Path)
	}
	return h, n, nil
}

func (f *FSM) open(index uint64, c *Command) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	n := f.nodes[c.Path]
	if n != nil && f.hiddenFrom(c, n) {
		// Answer as for a missing name, up to the one point where that
		// cannot be done: a create the caller may make cannot make a
		// taken name (see openHidden).
		return &Result{Err: f.openHidden(c)}
	}
	created := false
	if n == nil {
		if c.Flags&FlagCreate == 0 {
			return &Result{Err: errf(KindNotFound, "%s does not exist", c.Path)}
		}
		parent, err := f.checkCreate(c)
		if err != nil {
			return &Result{Err: err}
		}
		parentPath := parent.Path
		dir := c.Flags&FlagDirectory != 0
		n = &Node{
			Path: c.Path, Dir: dir, Ephemeral: c.Flags&FlagEphemeral != 0,
			Contents: c.Contents, Instance: index, ContentGen: index, ACLGen: index,
			Checksum: checksum(c.Contents), CTime: c.Time, MTime: c.Time,
			ReadACL: parent.ReadACL, WriteACL: parent.WriteACL, ChangeACL: parent.ChangeACL,
			Creator: c.Principal,
		}
		if n.Ephemeral {
			n.Owner = c.Session
		}
		if dir {
			n.children = map[string]bool{}
		}
		f.nodes[c.Path] = n
		f.usage.add(n)
		parent.children[baseOf(c.Path)] = dir
		parent.addKid(baseOf(c.Path), n)
		created = true
		f.note(Change{Kind: ChangeNode, Path: c.Path})
		f.note(Change{Kind: ChangeNode, Path: parentPath})
		f.note(Change{Kind: ChangeChildAdded, Path: parentPath, Child: baseOf(c.Path), ChildACL: nodeACL(n)})
	} else if err := f.permitOpen(c, n); err != nil {
		// Not hidden (checked above): the caller may read or write n.
		return &Result{Err: err}
	} else if c.Flags&FlagCreate != 0 {
		if c.Flags&FlagExcl != 0 {
			return &Result{Err: errf(KindExists, "%s already exists", c.Path)}
		}
		if want := c.Flags&FlagDirectory != 0; want != n.Dir {
			return &Result{Err: errf(KindExists, "%s already exists as a %s", c.Path, kindName(n.Dir))}
		}
	} else if c.Flags&FlagDirectory != 0 && !n.Dir {
		return &Result{Err: errf(KindNotDir, "%s is a file", c.Path)}
	}
	h := &Handle{ID: index, Session: c.Session, Path: c.Path, Instance: n.Instance,
		Flags: c.Flags, LockDelay: c.LockDelay, EventMask: c.EventMask}
	f.handles[index] = h
	s.handles[index] = true
	f.addWatch(h)
	n.openHandles++
	return &Result{Handle: index, Created: created, Stat: n.stat()}
}

// checkCreate makes the checks a create of the missing name c.Path must
// pass, and returns the parent directory. A parent the caller may not see
// answers as a missing one, so what lies below a hidden name reads as
// below a missing name. openHidden relies on every answer here depending
// on nothing but the parent and the command.
func (f *FSM) checkCreate(c *Command) (*Node, *Error) {
	parentPath := parentOf(c.Path)
	parent := f.nodes[parentPath]
	if parent == nil || f.hiddenFrom(c, parent) {
		return nil, errf(KindNotFound, "%s: parent directory %s does not exist", c.Path, parentPath)
	}
	if !parent.Dir {
		return nil, errf(KindNotDir, "%s: parent %s is a file", c.Path, parentPath)
	}
	if err := f.permit(c, parent, acl.Write); err != nil {
		return nil, err
	}
	if err := f.checkACLContents(c.Path, c.Contents); err != nil {
		return nil, err
	}
	if c.Flags&FlagDirectory != 0 && len(c.Contents) > 0 {
		return nil, errf(KindBadRequest, "%s: a directory has no contents", c.Path)
	}
	if err := f.checkQuota(c, 1, int64(len(c.Contents))); err != nil {
		return nil, err
	}
	return parent, nil
}

func (f *FSM) setContents(index uint64, c *Command) *Result {
	h, n, err := f.liveHandle(c)
	if err != nil {
		return &Result{Err: err}
	}
	if n.Dir {
		return &Result{Err: errf(KindIsDir, "%s is a directory", n.Path)}
	}
	if h.Flags&FlagWrite == 0 {
		return &Result{Err: errf(KindPermission, "%s: handle was not opened for writing", n.Path)}
	}
	if err := f.permit(c, n, acl.Write); err != nil {
		return &Result{Err: err}
	}
	if c.HasIfGen && n.ContentGen != c.IfGen {
		return &Result{Err: errf(KindGenerationMismatch, "%s: content generation is %d, not %d", n.Path, n.ContentGen, c.IfGen)}
	}
	if err := f.checkACLContents(n.Path, c.Contents); err != nil {
		return &Result{Err: err}
	}
	grow := int64(len(c.Contents)) - int64(len(n.Contents))
	if err := f.checkQuota(c, 0, grow); err != nil {
		return &Result{Err: err}
	}
	f.usage.bytes += grow
	n.Contents = c.Contents
	n.ContentGen = index
	n.Checksum = checksum(c.Contents)
	n.MTime = c.Time
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.note(Change{Kind: ChangeContents, Path: n.Path})
	return &Result{Stat: n.stat()}
}

func (f *FSM) delete(index uint64, c *Command) *Result {
	h, n, err := f.liveHandle(c)
	if err != nil {
		return &Result{Err: err}
	}
	if h.Flags&FlagWrite == 0 {
		return &Result{Err: errf(KindPermission, "%s: handle was not opened for writing", n.Path)}
	}
	if n.Path == f.Root() {
		return &Result{Err: errf(KindBadRequest, "%s: the cell root cannot be deleted", n.Path)}
	}
	if err := f.permit(c, n, acl.Write); err != nil {
		return &Result{Err: err}
	}
	if n.Dir && len(n.children) > 0 {
		// No count: it would tell of children the caller may not see.
		return &Result{Err: errf(KindNotEmpty, "%s is not empty", n.Path)}
	}
	f.removeNode(index, n, c.Time)
	return &Result{}
}

// removeNode deletes n (a file or an empty directory): its waiters are told
// their wait ended, its handles go invalid (they name a dead instance), and
// an ephemeral parent left empty goes too.
func (f *FSM) removeNode(index uint64, n *Node, now int64) {
	for _, w := range n.Waiters {
		f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: w.Handle, Session: w.Session, Seq: w.Seq})
	}
	n.Waiters, n.Holders = nil, nil
	delete(f.nodes, n.Path)
	f.usage.remove(n)
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.note(Change{Kind: ChangeDeleted, Path: n.Path})
	parentPath := parentOf(n.Path)
	parent := f.nodes[parentPath]
	if parent == nil {
		return
	}
	delete(parent.children, baseOf(n.Path))
	parent.removeKid(baseOf(n.Path))
	parent.MTime = now
	f.note(Change{Kind: ChangeNode, Path: parentPath})
	f.note(Change{Kind: ChangeChildRemoved, Path: parentPath, Child: baseOf(n.Path), ChildACL: nodeACL(n)})
	if parent.Ephemeral && len(parent.children) == 0 && parent.openHandles == 0 {
		f.removeNode(index, parent, now)
	}
}

func (f *FSM) acquire(index uint64, c *Command) *Result {
	h, n, err := f.liveHandle(c)
	if err != nil {
		return &Result{Err: err}
	}
	if c.Mode != LockExclusive && c.Mode != LockShared {
		return &Result{Err: errf(KindBadRequest, "unknown lock mode %d", c.Mode)}
	}
	if h.Flags&FlagWrite == 0 {
		return &Result{Err: errf(KindPermission, "%s: taking a lock needs a handle opened for writing", n.Path)}
	}
	if err := f.permit(c, n, acl.Write); err != nil {
		return &Result{Err: err}
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			if n.LockMode == c.Mode {
				return &Result{Granted: true, LockGen: n.LockGen}
			}
			return &Result{Err: errf(KindLockHeld, "%s: this handle already holds the lock in %s mode", n.Path, modeName(n.LockMode))}
		}
	}
	for _, w := range n.Waiters {
		if w.Handle == h.ID {
			return &Result{Err: errf(KindLockHeld, "%s: this handle is already waiting for the lock", n.Path)}
		}
	}
	delayed := n.LockDelayUntil > c.Time
	if !delayed && n.LockMode == LockFree && len(n.Waiters) > 0 {
		// A lock-delay ran out and its hand-off (CmdGrant) has not been
		// applied yet: the queue goes first, no barging.
		f.grantWaiters(index, n, c.Time)
	}
	free := n.LockMode == LockFree && len(n.Waiters) == 0
	shareable := n.LockMode == LockShared && c.Mode == LockShared && len(n.Waiters) == 0
	if !delayed && (free || shareable) {
		f.grant(index, n, h.ID, h.Session, 0, c.Mode)
		return &Result{Granted: true, LockGen: n.LockGen}
	}
	if len(n.Holders) > 0 {
		f.note(Change{Kind: ChangeLockConflict, Path: n.Path, Handle: h.ID, Session: h.Session})
	}
	if c.Wait {
		n.Waiters = append(n.Waiters, Waiter{Handle: h.ID, Session: h.Session, Seq: c.Seq, Mode: c.Mode})
		if delayed && n.LockMode == LockFree {
			f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: n.LockDelayUntil})
		}
		return &Result{Queued: true}
	}
	if delayed && n.LockMode == LockFree {
		return &Result{Err: errf(KindLockDelay, "%s: lock is free but under lock-delay for %.1fs", n.Path, float64(n.LockDelayUntil-c.Time)/1e9)}
	}
	return &Result{Err: errf(KindLockHeld, "%s: held in %s mode by %d holder(s), %d waiting", n.Path, modeName(n.LockMode), len(n.Holders), len(n.Waiters))}
}

func (f *FSM) grant(index uint64, n *Node, handle, session, waitSeq uint64, mode uint8) {
	if n.LockMode == LockFree {
		n.LockGen = index
		n.LockMode = mode
	}
	n.Holders = append(n.Holders, Holder{Handle: handle, Session: session, WaitSeq: waitSeq})
	f.note(Change{Kind: ChangeLockGranted, Path: n.Path, Handle: handle, Session: session, Seq: waitSeq})
	f.note(Change{Kind: ChangeNode, Path: n.Path})
}

func (n *Node) removeHolder(handle uint64) bool {
	for i, ho := range n.Holders {
		if ho.Handle == handle {
			n.Holders = append(n.Holders[:i:i], n.Holders[i+1:]...)
			return true
		}
	}
	return false
}

// afterRelease frees the lock when its last holder left and hands it on,
// in the same entry, to the next waiter (or run of shared waiters).
func (f *FSM) afterRelease(index uint64, n *Node, now int64) {
	if len(n.Holders) == 0 {
		n.LockMode = LockFree
	}
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.grantWaiters(index, n, now)
}

func (f *FSM) grantWaiters(index uint64, n *Node, now int64) {
	for len(n.Waiters) > 0 {
		w := n.Waiters[0]
		if n.LockDelayUntil > now {
			if n.LockMode == LockFree {
				f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: n.LockDelayUntil})
			}
			return
		}
		if !(n.LockMode == LockFree || n.LockMode == LockShared && w.Mode == LockShared) {
			return
		}
		n.Waiters = n.Waiters[1:]
		f.grant(index, n, w.Handle, w.Session, w.Seq, w.Mode)
		if w.Mode == LockExclusive {
			return
		}
	}
}

func (f *FSM) cancelWait(index uint64, c *Command) *Result {
	h, n, err := f.liveHandle(c)
	if err != nil {
		return &Result{Err: err}
	}
	for i, w := range n.Waiters {
		if w.Handle == h.ID && w.Seq == c.WaitSeq {
			n.Waiters = append(n.Waiters[:i:i], n.Waiters[i+1:]...)
			f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: h.ID, Session: h.Session, Seq: c.WaitSeq})
			// A queue head leaving may unblock shared waiters behind it.
			f.grantWaiters(index, n, c.Time)
			return &Result{}
		}
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID && ho.WaitSeq == c.WaitSeq && c.WaitSeq != 0 {
			n.removeHolder(h.ID)
			f.afterRelease(index, n, c.Time)
			return &Result{}
		}
	}
	return &Result{}
}

// closeHandle releases what the handle holds and forgets it. failed says
// the handle's session failed (expired): a lock it held then stays free of
// other holders for the handle's lock-delay.
func (f *FSM) closeHandle(index uint64, h *Handle, failed bool, now int64) {
	delete(f.handles, h.ID)
	if w := f.watch[h.Path]; w != nil {
		delete(w, h.ID)
		if len(w) == 0 {
			delete(f.watch, h.Path)
		}
	}
	if s := f.sessions[h.Session]; s != nil {
		delete(s.handles, h.ID)
	}
	n := f.nodes[h.Path]
	if n == nil || n.Instance != h.Instance {
		return
	}
	n.openHandles--
	for i, w := range n.Waiters {
		if w.Handle == h.ID {
			n.Waiters = append(n.Waiters[:i:i], n.Waiters[i+1:]...)
			f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: h.ID, Session: h.Session, Seq: w.Seq})
			break
		}
	}
	if n.removeHolder(h.ID) {
		if failed && h.LockDelay > 0 && len(n.Holders) == 0 && !bugNoLockDelay {
			n.LockDelayUntil = max(n.LockDelayUntil, now+h.LockDelay)
		}
		f.afterRelease(index, n, now)
	} else {
		// The departed waiter may have headed the queue (say, an exclusive
		// waiter ahead of shared ones while the lock is held shared).
		f.grantWaiters(index, n, now)
	}
	if n.Ephemeral && n.openHandles == 0 && (!n.Dir || len(n.children) == 0) {
		f.removeNode(index, n, now)
	}
}

func (f *FSM) closeSession(index uint64, c *Command) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	for _, id := range sortedKeys(s.handles) {
		if h := f.handles[id]; h != nil {
			f.closeHandle(index, h, c.Expired, c.Time)
		}
	}
	// Ephemeral files die with their creating session even if others still
	// hold them open; deepest first so ephemeral directories empty out.
	var owned []*Node
	for _, n := range f.nodes {
		if n.Ephemeral && n.Owner == s.ID {
			owned = append(owned, n)
		}
	}
	sort.Slice(owned, func(i, j int) bool { return owned[i].Path > owned[j].Path })
	for _, n := range owned {
		if f.nodes[n.Path] == n && (!n.Dir || len(n.children) == 0) {
			f.removeNode(index, n, c.Time)
		}
	}
	delete(f.sessions, s.ID)
	if f.principals[s.Principal]--; f.principals[s.Principal] <= 0 {
		delete(f.principals, s.Principal)
	}
	f.note(Change{Kind: ChangeSessionClosed, Session: s.ID})
	return &Result{}
}

func (n *Node) stat() Stat {
	return Stat{
		Instance: n.Instance, ContentGen: n.ContentGen, LockGen: n.LockGen, ACLGen: n.ACLGen,
		Checksum: n.Checksum, Size: uint64(len(n.Contents)), CTime: n.CTime, MTime: n.MTime,
		Dir: n.Dir, Ephemeral: n.Ephemeral, ReadACL: n.ReadACL, WriteACL: n.WriteACL, ChangeACL: n.ChangeACL,
		LockMode: n.LockMode, LockHolders: uint32(len(n.Holders)), LockWaiters: uint32(len(n.Waiters)),
		LockDelayUntil: n.LockDelayUntil,
	}
}

func checksum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
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

// snapshotImage is the persisted form of the state machine.
type snapshotImage struct {
	Version  uint8      `msgpack:"v"`
	Cell     string     `msgpack:"c"`
	Epoch    uint64     `msgpack:"e"`
	Applied  uint64     `msgpack:"a"`
	Nodes    []*Node    `msgpack:"n"`
	Sessions []*Session `msgpack:"s"`
	Handles  []*Handle  `msgpack:"h"`
	// Key is the cell's secret sequencer key.
	Key []byte `msgpack:"k,omitempty"`
	// Results are the sessions' de-duplication tables, by (session, seq).
	Results []sessionResult `msgpack:"r"`
	// Members and MemberSize are the member table (members.go), omitted
	// until it is seeded, so older snapshots restore.
	Members    []MemberAddrs `msgpack:"mb,omitempty"`
	MemberSize int           `msgpack:"ms,omitempty"`
}

type sessionResult struct {
	Session uint64  `msgpack:"s"`
	Seq     uint64  `msgpack:"q"`
	Result  *Result `msgpack:"r"`
}

// snapshotVersion 2: de-dup tables moved out of the sessions into Results.
const snapshotVersion = 2

// fsmSnapshot is the state encoded at one applied index, in chunks.
type fsmSnapshot struct{ data *chunkBuffer }

// Snapshot encodes the whole state under the read lock (applies wait for
// it), so the bytes are the state at one applied index. Contents slices are
// never mutated in place, so encoding is the only copy. The encoding goes
// into fixed-size chunks (chunkBuffer): the snapshot costs its own size
// once, never a contiguous buffer grown by doubling.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf chunkBuffer
	if err := f.writeStateLocked(&buf); err != nil {
		return nil, err
	}
	return &fsmSnapshot{data: &buf}, nil
}

// StateHash returns the index of the last applied entry and a SHA-256 of
// the whole state at it (the snapshot bytes, which are byte-for-byte
// repeatable). Two replicas at the same index must give the same hash; the
// chaos tests compare them after healing. The encoding streams into the
// hash under the read lock, so a hash holds no copy of the state.
func (f *FSM) StateHash() (uint64, [32]byte, error) {
	h := sha256.New()
	w := bufio.NewWriterSize(h, hashBufferSize)
	f.mu.RLock()
	err := f.writeStateLocked(w)
	applied := f.applied
	f.mu.RUnlock()
	if err == nil {
		err = w.Flush() // a hash never fails a write
	}
	if err != nil {
		return 0, [32]byte{}, err
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return applied, sum, nil
}

// hashBufferSize batches the encoder's many small writes into the hash.
const hashBufferSize = 64 << 10

// encodeLocked renders the state as one contiguous slice of snapshot
// bytes; f.mu is held. Only seeding a restored replica wants that;
// Snapshot and StateHash stream (writeStateLocked).
func (f *FSM) encodeLocked() ([]byte, error) {
	var buf chunkBuffer
	if err := f.writeStateLocked(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeStateLocked encodes the state as snapshot bytes to w; f.mu is held.
// Map keys are sorted and the arrays are in key order, so identical states
// give identical bytes.
func (f *FSM) writeStateLocked(w io.Writer) error {
	img := snapshotImage{Version: snapshotVersion, Cell: f.cell, Epoch: f.epoch, Applied: f.applied, Key: f.cellKey,
		Nodes: make([]*Node, 0, len(f.nodes)), Sessions: make([]*Session, 0, len(f.sessions)),
		Handles: make([]*Handle, 0, len(f.handles))}
	for _, p := range sortedStrings(f.nodes) {
		img.Nodes = append(img.Nodes, f.nodes[p])
	}
	for _, id := range sortedKeys(f.sessions) {
		sess := f.sessions[id]
		img.Sessions = append(img.Sessions, sess)
		for _, q := range sortedKeys(sess.Results) {
			img.Results = append(img.Results, sessionResult{Session: id, Seq: q, Result: sess.Results[q]})
		}
	}
	for _, id := range sortedKeys(f.handles) {
		img.Handles = append(img.Handles, f.handles[id])
	}
	f.members.image(&img)
	enc := msgpack.NewEncoder(w)
	enc.SetSortMapKeys(true) // identical states give identical bytes
	if err := enc.Encode(&img); err != nil {
		return fmt.Errorf("replica: encode snapshot: %w", err)
	}
	return nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	// Two parts so that an armed crash point dies with half a snapshot
	// written to the sink (raft's file store buffers 4 KiB and writes
	// through past that; its temp folder holds meta.json and a partial
	// state.bin, never renamed into place).
	half := s.data.Len() / 2
	if err := s.data.writeRange(sink, 0, half); err != nil {
		sink.Cancel()
		return err
	}
	crashPoint(CrashSnapshotPersist)
	if err := s.data.writeRange(sink, half, s.data.Len()); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the chunks, so they are garbage even while a reference to
// the snapshot lingers.
func (s *fsmSnapshot) Release() { s.data.reset() }

// maxSnapshotSize bounds the bytes Restore reads. Snapshot encodes the
// whole state in memory, so a state this large could not be snapshotted
// either; a longer stream is refused rather than read to the end.
const maxSnapshotSize = 1 << 30

// Restore replaces the whole state with a snapshot's. The snapshot is read
// into memory (at most maxSnapshotSize bytes), its bytes pass bound.Check
// and a count check before they are decoded, so hostile or corrupt bytes
// cannot make decoding allocate more than a small multiple of their size,
// and the decoded image is validated as a whole before any of it is used.
// Every rejection wraps ErrMalformedSnapshot (ErrSnapshotTooLarge for the
// size cap) and leaves the state the FSM had.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotSize+1))
	if err != nil {
		return fmt.Errorf("replica: read snapshot: %w", err)
	}
	if len(b) > maxSnapshotSize {
		return fmt.Errorf("%w: more than %d bytes", ErrSnapshotTooLarge, maxSnapshotSize)
	}
	img, err := decodeSnapshot(b)
	if err != nil {
		return err
	}
	next, err := f.restoredState(img)
	if err != nil {
		return err
	}
	if f.live.Load() {
		crashPoint(CrashSnapshotInstall) // snapshot stored by raft, state not yet replaced
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch, f.applied, f.cellKey = next.epoch, next.applied, next.cellKey
	f.nodes, f.sessions, f.handles, f.watch = next.nodes, next.sessions, next.handles, next.watch
	f.members = next.members
	f.principals = map[string]int{}
	for _, s := range f.sessions {
		f.principals[s.Principal]++
	}
	f.usage = usageOf(f.nodes, f.Root())
	// Parsed ACL files are derived from the state just replaced.
	f.aclMu.Lock()
	f.aclParsed = nil
	f.aclMu.Unlock()
	return nil
}

// The fewest bytes one element of a snapshot's arrays takes as Snapshot
// writes it: the encoding of the type's zero value, since fields without
// omitempty are always written, integers at their full width, and no value
// encodes shorter than its type's zero. TestSnapshotElementSizes keeps
// them in step with the struct tags and the encoder.
const (
	minNodeBytes    = 51  // p, i, cg, ct, mt
	minHolderBytes  = 23  // h, s
	minWaiterBytes  = 38  // h, s, q, m
	minSessionBytes = 24  // id, t
	minHandleBytes  = 45  // id, s, p, i, f
	minResultBytes  = 280 // s, q, r with its st
)

// snapshotFields are the top-level keys of a snapshotImage, with the least
// encoded size of one element of each array field.
var snapshotFields = map[string]int{
	"v": 0, "c": 0, "e": 0, "a": 0, "k": 0,
	"n": minNodeBytes, "s": minSessionBytes, "h": minHandleBytes, "r": minResultBytes,
	"ms": 0, "mb": minMemberBytes,
}

// decodeSnapshot decodes snapshot bytes into an image. bound.Check caps
// every claimed length by the bytes present, but it lets a short array's
// elements take one byte each and a long one's two, while an element
// decodes into a Node of some 300 bytes or slices twice the size of its
// elements; so the bytes must also have the shape Snapshot writes (see
// checkSnapshotShape) before they are decoded.
func decodeSnapshot(b []byte) (*snapshotImage, error) {
	if err := bound.Check(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	if err := checkSnapshotShape(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	var img snapshotImage
	if err := msgpack.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	return &img, nil
}

// checkSnapshotShape checks bytes that passed bound.Check have the shape
// Snapshot writes: a map of snapshotImage's keys, each at most once (a key
// this version does not know would be dropped silently), whose array
// fields hold maps, and whose arrays, with the lock holders and waiters
// inside the nodes, claim no more elements than the bytes could hold at
// their least encoded size. Decoding then allocates a small multiple of
// len(b).
func checkSnapshotShape(b []byte) error {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	least := 0
	// array skips an array (or nil) of maps, charging per bytes for each
	// and calling elem, when set, on the key of each of its entries.
	array := func(per int, elem func(key string) error) error {
		count, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		least += max(count, 0) * per
		for range count {
			if c, err := d.PeekCode(); err != nil || !isMapCode(c) {
				return fmt.Errorf("element of type byte %#x, not a map", c)
			}
			if elem == nil {
				err = d.Skip()
			} else {
				err = mapEntries(d, elem)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	node := func(key string) error {
		switch key {
		case "lh":
			return array(minHolderBytes, nil)
		case "lw":
			return array(minWaiterBytes, nil)
		}
		return d.Skip()
	}
	seen := map[string]bool{}
	field := func(key string) error {
		per, known := snapshotFields[key]
		if !known || seen[key] {
			return fmt.Errorf("unknown or repeated")
		}
		seen[key] = true
		switch {
		case per == 0:
			return d.Skip()
		case key == "n":
			return array(per, node)
		}
		return array(per, nil)
	}
	if !isMapCode(b[0]) {
		return fmt.Errorf("type byte %#x, not a map", b[0])
	}
	if err := mapEntries(d, field); err != nil {
		return err
	}
	if least > len(b) {
		return fmt.Errorf("its arrays claim elements of at least %d bytes in all, but it has %d", least, len(b))
	}
	return nil
}

// mapEntries reads a map's header and calls value on each string key; value
// reads or skips the key's value.
func mapEntries(d *msgpack.Decoder, value func(key string) error) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		if err := value(key); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	return nil
}

// isMapCode reports whether c starts a msgpack map.
func isMapCode(c byte) bool { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }

// restoredState validates a decoded snapshot image and builds the state it
// describes in a scratch FSM, touching nothing of f's. It refuses what no
// run of this FSM could have snapshotted, as far as applying later entries
// relies on it, and requires: a version and cell that match; no nil or repeated entries; a root
// directory that is not ephemeral, every other node in a directory below
// it; sessions and handles with ids of entries already applied; handles of
// existing sessions; de-duplication results that exist, of existing
// sessions, above their session's acknowledgement; and locks whose mode
// matches their holders and whose holders and waiters are handles open on
// that node, each at most once.
func (f *FSM) restoredState(img *snapshotImage) (*FSM, error) {
	bad := func(format string, args ...any) (*FSM, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrMalformedSnapshot}, args...)...)
	}
	if img.Version != snapshotVersion {
		return bad("version %d is not %d", img.Version, snapshotVersion)
	}
	if img.Cell != f.cell {
		return bad("snapshot of cell %q restored into cell %q", img.Cell, f.cell)
	}
	next := &FSM{cell: f.cell, epoch: img.Epoch, applied: img.Applied, cellKey: img.Key,
		nodes:    make(map[string]*Node, len(img.Nodes)),
		sessions: make(map[uint64]*Session, len(img.Sessions)),
		handles:  make(map[uint64]*Handle, len(img.Handles)),
		watch:    map[string]map[uint64]uint32{},
	}
	root := next.Root()
	for i, n := range img.Nodes {
		switch {
		case n == nil:
			return bad("node %d is nil", i)
		case next.nodes[n.Path] != nil:
			return bad("node %q appears twice", n.Path)
		case n.Path == root && (!n.Dir || n.Ephemeral):
			return bad("root %q is not a plain directory", root)
		case n.Path != root && !strings.HasPrefix(n.Path, root+"/"):
			return bad("node %q is outside the root %q", n.Path, root)
		}
		if n.Dir {
			n.children = map[string]bool{}
		}
		next.nodes[n.Path] = n
	}
	if next.nodes[root] == nil {
		return bad("no root %q", root)
	}
	for _, n := range img.Nodes {
		if n.Path == root {
			continue
		}
		p := next.nodes[parentOf(n.Path)]
		if p == nil || !p.Dir {
			return bad("node %q has no parent directory", n.Path)
		}
		p.children[baseOf(n.Path)] = n.Dir
		p.addKid(baseOf(n.Path), n)
	}
	for i, s := range img.Sessions {
		switch {
		case s == nil:
			return bad("session %d is nil", i)
		case s.ID == 0 || s.ID > img.Applied:
			return bad("session id %d is not an applied index (applied %d)", s.ID, img.Applied)
		case next.sessions[s.ID] != nil:
			return bad("session %d appears twice", s.ID)
		}
		s.Results, s.handles = nil, map[uint64]bool{}
		next.sessions[s.ID] = s
	}
	for _, r := range img.Results {
		s := next.sessions[r.Session]
		switch {
		case s == nil:
			return bad("result %d of unknown session %d", r.Seq, r.Session)
		case r.Result == nil:
			return bad("result %d of session %d is nil", r.Seq, r.Session)
		case r.Seq <= s.AckSeq:
			return bad("result %d of session %d is at or below its acknowledgement %d", r.Seq, r.Session, s.AckSeq)
		case s.Results[r.Seq] != nil:
			return bad("result %d of session %d appears twice", r.Seq, r.Session)
		}
		if s.Results == nil {
			s.Results = map[uint64]*Result{}
		}
		s.Results[r.Seq] = r.Result
	}
	for i, h := range img.Handles {
		switch {
		case h == nil:
			return bad("handle %d is nil", i)
		case h.ID == 0 || h.ID > img.Applied:
			return bad("handle id %d is not an applied index (applied %d)", h.ID, img.Applied)
		case next.handles[h.ID] != nil:
			return bad("handle %d appears twice", h.ID)
		case next.sessions[h.Session] == nil:
			return bad("handle %d of unknown session %d", h.ID, h.Session)
		}
		next.handles[h.ID] = h
		next.addWatch(h)
		next.sessions[h.Session].handles[h.ID] = true
		if n := next.nodes[h.Path]; n != nil && n.Instance == h.Instance {
			n.openHandles++
		}
	}
	if err := next.checkRestoredLocks(img.Nodes); err != nil {
		return nil, err
	}
	if err := next.members.restore(img); err != nil {
		return nil, err
	}
	return next, nil
}

// checkRestoredLocks checks the locks of restored nodes: the mode says
// whether there are holders (exactly one when exclusive), waiters ask for
// a real mode, and every holder and waiter is a handle of its session open
// on that node instance, holding or waiting at most once.
func (f *FSM) checkRestoredLocks(nodes []*Node) error {
	bad := func(n *Node, format string, args ...any) error {
		return fmt.Errorf("%w: lock of %q: "+format, append([]any{ErrMalformedSnapshot, n.Path}, args...)...)
	}
	onNode := func(n *Node, handle, session uint64) bool {
		h := f.handles[handle]
		return h != nil && h.Session == session && h.Path == n.Path && h.Instance == n.Instance
	}
	seen := map[uint64]bool{} // a handle is open on one node: holds or waits once
	for _, n := range nodes {
		switch {
		case n.LockMode > LockShared:
			return bad(n, "mode %d", n.LockMode)
		case (n.LockMode == LockFree) != (len(n.Holders) == 0):
			return bad(n, "mode %s with %d holders", modeName(n.LockMode), len(n.Holders))
		case n.LockMode == LockExclusive && len(n.Holders) != 1:
			return bad(n, "exclusive with %d holders", len(n.Holders))
		}
		for _, ho := range n.Holders {
			if !onNode(n, ho.Handle, ho.Session) || seen[ho.Handle] {
				return bad(n, "holder %+v is not a handle open on it, or holds twice", ho)
			}
			seen[ho.Handle] = true
		}
		for _, w := range n.Waiters {
			if w.Mode != LockExclusive && w.Mode != LockShared {
				return bad(n, "waiter %+v asks for mode %d", w, w.Mode)
			}
			if !onNode(n, w.Handle, w.Session) || seen[w.Handle] {
				return bad(n, "waiter %+v is not a handle open on it, or holds or waits twice", w)
			}
			seen[w.Handle] = true
		}
	}
	return nil
}

// parentOf returns the parent of a name, "" for a name with no parent.
func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return ""
	}
	return p[:i]
}

func sortedStrings[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
