package fsm

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// The model-based test of the replicated state machine. Random sequences
// of commands (sessions and their expiry, opens that create files,
// directories and ephemeral nodes, sequential creates, contents with and without a generation
// check, deletes, exclusive and shared locks with waits, cancels and
// lock-delay hand-offs, ACL changes and retried requests) go through
// Encode and FSM.Apply as committed log entries, and through a small
// reference model kept here in plain maps. After every entry the result
// and the whole observable state (every node's kind, contents,
// generations, times, ACL names, lock mode, holders, waiters and
// lock-delay; every session with its acknowledgements and
// de-duplication table; every handle) must be equal. The log is replayed
// on a second FSM, snapshots taken at random points are restored into
// followers that apply the rest of the log, and all of them must end with
// the main FSM's state hash.
//
// modelObserve reads the FSM's state through the snapshot encoding, a
// persisted format, so the apply code and the FSM's in-memory types can be
// reorganised without touching the comparison (fsmtCheckInvariants, run
// after every entry too, is the one reader of the in-memory maps).
//
// Run counts: modelChecksDefault sequences in make test, modelChecksTorture
// with LOCKCELL_CHAOS_TORTURE=1 (make torture); -rapid.checks overrides
// both (modelFlags).

const (
	modelChecksDefault = 300
	modelChecksTorture = 10000
	modelMaxSteps      = 60
)

// modelOps weights the operations of a sequence (rapid draws small indexes
// somewhat more often, so the common ones come first).
var modelOps = []string{
	"open", "acquire", "release", "set", "open", "acquire", "retry", "close session", "close",
	"cancel", "set acl", "release", "delete", "new session", "acquire", "open", "set", "retry",
	"grant", "pause", "close session", "epoch", "cancel", "new session", "break", "resume",
	"expire ttl", "delete",
	"txn", "txn",
}

// modelNames are the names (below the root) the sequences use: two levels
// of directories when the creates make them so, files otherwise.
var modelNames = []string{"a", "b", "a/x", "a/y", "b/z", "a/x/q", "j-0000000001", "a/j-0000000000"}

// modelSeqPrefixes are the prefixes of sequential creates: the names they
// make can meet the last two modelNames, made by hand, which they must
// skip; "a/" makes names of digits alone.
var modelSeqPrefixes = []string{"j-", "a/j-", "a/"}

// modelTTLs are the TTLs opens ask for: within the bounds, at them, and
// outside.
var modelTTLs = []int64{int64(time.Second), int64(500 * time.Millisecond), int64(3 * time.Second),
	int64(499 * time.Millisecond), -int64(time.Second)}

// The principals of the client sessions, and the ACL files the setup
// writes: "all" lists everyone, "p1only" lists p1. The empty name is the
// default rule (everyone reads; only the creator writes or changes ACLs).
var (
	modelPrincipals = []string{"p1", "p2"}
	modelACLNames   = []string{"", "all", "p1only", "missing"}
)

// modelHosts are the hosts and programs sessions declare: mostly fine,
// sometimes one a Stat could not show (too long, a control character,
// not UTF-8), which CreateSession refuses.
var modelHosts = []string{"", "h1", "h2", "prog", strings.Repeat("x", MaxIdentityLen), strings.Repeat("y", MaxIdentityLen+1),
	"bad\nline", "bad\xff"}

// modelIdentityOK is the rule a declared identity must pass: host and
// program of at most MaxIdentityLen bytes of UTF-8 printable text, and a
// pid that is not negative.
func modelIdentityOK(id CreateSessionArgs) bool {
	for _, v := range []string{id.Host, id.Program} {
		if len(v) > MaxIdentityLen || !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return false
		}
	}
	return id.PID >= 0
}

// mNode is the model's node.
type mNode struct {
	dir, eph   bool
	owner      uint64
	contents   string
	inst, cgen uint64
	lgen, agen uint64
	ctime      int64
	mtime      int64
	acl        [3]string // read, write, change-ACL
	creator    string
	mode       uint8
	holders    []Holder
	waiters    []Waiter
	delay      int64
	delayBy    *LockDelayCause // who started the latest lock-delay
	sum        uint64          // contents checksum (the root's is zero)
	seq        uint64          // a directory's next sequence number
	ttl        int64           // a TTL file's TTL (ns)
	container  bool            // a container directory: goes with its last child
	semLimit   uint32          // a semaphore's permits (0: a plain lock)
	semDelays  []int64         // the ends of a semaphore's held-back permits
}

type mHandle struct {
	session   uint64
	path      string
	inst      uint64
	flags     uint32
	lockDelay int64
}

type mSession struct {
	client, principal string
	host, program     string
	pid               int64
	created           int64
	ack               uint64
	results           map[uint64]mResult
	incarnation       uint64
}

// mResult is what the test compares of a Result: the error kind and every
// value field.
type mResult struct {
	Kind    Kind
	Epoch   uint64
	Session uint64
	Handle  uint64
	Created bool
	Granted bool
	Queued  bool
	LockGen uint64
	Stat    Stat
	Broken  []Holder
	// Incarnation and NextSeq answer a ResumeSession.
	Incarnation, NextSeq uint64
	// Name answers a sequential create.
	Name string
	// Txn answers a transaction.
	Txn TxnOutcome
}

func (r mResult) short() string {
	return fmt.Sprintf("kind=%d ep=%d s=%d h=%d c=%v g=%v q=%v lg=%d", r.Kind, r.Epoch, r.Session, r.Handle, r.Created, r.Granted, r.Queued, r.LockGen)
}

func resultOf(r *Result) mResult {
	m := mResult{Epoch: r.Epoch, Session: r.Session, Handle: r.Handle, Created: r.Created,
		Granted: r.Granted, Queued: r.Queued, LockGen: r.LockGen, Stat: r.Stat, Broken: r.Broken,
		Incarnation: r.Incarnation, NextSeq: r.NextSeq, Name: r.Name}
	if r.Txn != nil {
		m.Txn = *r.Txn
	}
	if r.Err != nil {
		m.Kind = r.Err.Kind
	}
	return m
}

// model is the reference state machine: the rules written out once, over
// plain maps, with derived facts (children, open handles) recomputed by
// scanning rather than kept up to date.
type model struct {
	root     string
	epoch    uint64
	nodes    map[string]*mNode
	sessions map[uint64]*mSession
	handles  map[uint64]*mHandle
	skipped  int // sequential creates that skipped a taken name (a statistic)
	// containersRemoved counts containers removed with their last child
	// (a statistic).
	containersRemoved int
	// nextIndex hands out the next command index (the run's), which a
	// command granting a second semaphore permit takes for its
	// generation; lastPermit is the generation of the last permit.
	nextIndex  func() uint64
	lastPermit uint64
	// permits counts semaphore permits granted, delayedPermits permits
	// held back by a failed holder (statistics).
	permits, delayedPermits int
}

func newModel() *model {
	return &model{root: fsmtRoot,
		nodes:    map[string]*mNode{fsmtRoot: {dir: true}},
		sessions: map[uint64]*mSession{}, handles: map[uint64]*mHandle{}}
}

func modelParent(p string) string { return p[:strings.LastIndexByte(p, '/')] }

func (m *model) children(p string) int {
	k := 0
	for q := range m.nodes {
		if q != m.root && modelParent(q) == p {
			k++
		}
	}
	return k
}

func (m *model) openHandles(p string) int {
	n, k := m.nodes[p], 0
	for _, h := range m.handles {
		if h.path == p && h.inst == n.inst {
			k++
		}
	}
	return k
}

// allowed is the ACL rule: the admin may do anything; an empty name lets
// everyone read and only the creator write or change ACLs; a named file
// lets whoever it lists (a missing file lets no one).
func (m *model) allowed(who string, admin bool, n *mNode, perm int) bool {
	if who == "" || admin {
		return true
	}
	switch n.acl[perm] {
	case "":
		return perm == 0 || who == n.creator
	case "all":
		return true
	case "p1only":
		return who == "p1"
	}
	return false
}

const (
	permRead   = 0
	permWrite  = 1
	permChange = 2
)

// mCmd is a command as the model reads it: the envelope with every
// payload field alongside, flat. The model is written against what each
// command means, independently of how the replica types its payloads.
type mCmd struct {
	Command
	Path      string
	Handle    uint64
	Flags     uint32
	Contents  []byte
	IfGen     uint64
	HasIfGen  bool
	Mode      uint8
	Wait      bool
	WaitSeq   uint64
	LockDelay int64
	Expired   bool
	Idle      bool
	ACL       *ACLNames
	Identity  CreateSessionArgs
	TTL       int64  // an Open's TTL
	SemLimit  uint32 // an Open's semaphore permits
	Instance  uint64 // an ExpireTTL's instance
	Txn       *TxnArgs
}

// flatCmd flattens an encoded command (its Type set) for the model.
func flatCmd(c Command) mCmd {
	m := mCmd{Command: c}
	switch p := c.Payload.(type) {
	case *CreateSessionArgs:
		m.Identity = *p
	case *CloseSessionArgs:
		m.Expired, m.Idle = p.Expired, p.Idle
	case *OpenArgs:
		m.Path, m.Flags, m.Contents, m.LockDelay, m.TTL, m.SemLimit = p.Path, p.Flags, p.Contents, p.LockDelay, p.TTL, p.SemLimit
	case *ExpireTTLArgs:
		m.Path, m.Instance, m.IfGen = p.Path, p.Instance, p.Gen
	case *CloseArgs:
		m.Handle = p.Handle
	case *SetContentsArgs:
		m.Handle, m.Contents, m.IfGen, m.HasIfGen = p.Handle, p.Contents, p.IfGen, p.HasIfGen
	case *DeleteArgs:
		m.Handle = p.Handle
	case *AcquireArgs:
		m.Handle, m.Mode, m.Wait = p.Handle, p.Mode, p.Wait
	case *ReleaseArgs:
		m.Handle = p.Handle
	case *CancelWaitArgs:
		m.Handle, m.WaitSeq = p.Handle, p.WaitSeq
	case *GrantArgs:
		m.Path = p.Path
	case *BreakLockArgs:
		m.Path = p.Path
	case *SetACLArgs:
		m.Handle, m.ACL, m.IfGen, m.HasIfGen = p.Handle, p.ACL, p.IfGen, p.HasIfGen
	case *TxnArgs:
		m.Txn = p
	}
	return m
}

func (m *model) hidden(c *mCmd, n *mNode) bool {
	return c.Principal != "" && !m.allowed(c.Principal, c.Admin, n, permRead) && !m.allowed(c.Principal, c.Admin, n, permWrite)
}

func (m *model) stat(n *mNode) Stat {
	delay := n.delay
	if n.semLimit != 0 && len(n.semDelays) > 0 {
		delay = slices.Max(n.semDelays)
	}
	return Stat{Instance: n.inst, ContentGen: n.cgen, LockGen: n.lgen, ACLGen: n.agen,
		Checksum: n.sum, Size: uint64(len(n.contents)), CTime: n.ctime, MTime: n.mtime,
		Dir: n.dir, Ephemeral: n.eph, ReadACL: n.acl[0], WriteACL: n.acl[1], ChangeACL: n.acl[2],
		LockMode: n.mode, LockHolders: uint32(len(n.holders)), LockWaiters: uint32(len(n.waiters)),
		LockDelayUntil: delay, TTL: n.ttl, Container: n.container, SemLimit: n.semLimit}
}

// semaphoreOK: a semaphore is a created plain file of 1 to 1,024 permits.
func semaphoreOK(c mCmd) bool {
	return c.SemLimit == 0 || c.SemLimit <= 1024 && c.Flags&FlagCreate != 0 &&
		c.Flags&(FlagDirectory|FlagSequential|FlagContainer) == 0 && c.TTL == 0
}

// permitGen: a permit's generation is its grant's command index, or a
// fresh one for each further permit the same command grants.
func (m *model) permitGen(idx uint64) uint64 {
	gen := idx
	if gen <= m.lastPermit {
		gen = m.nextIndex()
	}
	m.lastPermit = gen
	return gen
}

// liveDelays counts a semaphore's held-back permits at now, dropping
// those that ended.
func liveDelays(n *mNode, now int64) int {
	var keep []int64
	for _, d := range n.semDelays {
		if d > now {
			keep = append(keep, d)
		}
	}
	n.semDelays = keep
	return len(keep)
}

// acquirePermit: a permit at once if one is free and nobody waits; else
// a place in the queue, or why not.
func (m *model) acquirePermit(idx uint64, c mCmd, n *mNode) mResult {
	if c.Mode != LockShared {
		return errResult(KindBadRequest)
	}
	for _, ho := range n.holders {
		if ho.Handle == c.Handle {
			return mResult{Granted: true, LockGen: ho.Gen}
		}
	}
	for _, w := range n.waiters {
		if w.Handle == c.Handle {
			return errResult(KindLockHeld)
		}
	}
	m.grantPermits(idx, n, c.Time)
	if len(n.waiters) == 0 && int(n.semLimit)-len(n.holders)-liveDelays(n, c.Time) > 0 {
		gen := m.permitGen(idx)
		n.mode, n.lgen = LockShared, gen
		n.holders = append(slices.Clone(n.holders), Holder{Handle: c.Handle, Session: c.Session, Since: c.Time, Gen: gen})
		m.permits++
		return mResult{Granted: true, LockGen: gen}
	}
	delayed := liveDelays(n, c.Time)
	if c.Wait {
		n.waiters = append(slices.Clone(n.waiters), Waiter{Handle: c.Handle, Session: c.Session, Seq: c.Seq, Mode: LockShared, Since: c.Time})
		return mResult{Queued: true}
	}
	if delayed > 0 && len(n.holders)+delayed >= int(n.semLimit) && len(n.waiters) == 0 {
		return errResult(KindLockDelay)
	}
	return errResult(KindLockHeld)
}

// grantPermits hands a semaphore's free permits to its queue, in order.
func (m *model) grantPermits(idx uint64, n *mNode, now int64) {
	for len(n.waiters) > 0 && int(n.semLimit)-len(n.holders)-liveDelays(n, now) > 0 {
		w := n.waiters[0]
		n.waiters = slices.Clone(n.waiters[1:])
		gen := m.permitGen(idx)
		n.mode, n.lgen = LockShared, gen
		n.holders = append(slices.Clone(n.holders), Holder{Handle: w.Handle, Session: w.Session, WaitSeq: w.Seq, Since: now, Gen: gen})
		m.permits++
	}
}

// lifetimeOK: the rules of a TTL or container open. A TTL only for a
// created plain file, of 500ms to 365 days; a container only a created
// plain directory; never both, never ephemeral.
func lifetimeOK(c mCmd) bool {
	container := c.Flags&FlagContainer != 0
	dir := c.Flags&FlagDirectory != 0
	switch {
	case c.TTL == 0 && !container:
		return true
	case c.Flags&FlagCreate == 0 || c.Flags&FlagEphemeral != 0:
		return false
	case c.TTL != 0:
		return !container && !dir && c.TTL >= int64(500*time.Millisecond) && c.TTL <= int64(365*24*time.Hour)
	}
	return dir
}

func errResult(k Kind) mResult { return mResult{Kind: k} }

// apply is the model's Apply: request de-duplication, then the command.
func (m *model) apply(idx uint64, c mCmd) mResult {
	// A client request of a session's earlier incarnation (its process
	// was replaced by a resume) is refused and leaves no result behind.
	if s := m.sessions[c.Session]; s != nil && c.Principal != "" && c.Type != CmdResumeSession && c.Incarnation != s.incarnation {
		return errResult(KindSessionExpired)
	}
	if c.Session == 0 || c.Seq == 0 {
		return m.exec(idx, c)
	}
	s := m.sessions[c.Session]
	if s == nil {
		return errResult(KindSessionExpired)
	}
	if c.Ack > s.ack {
		s.ack = c.Ack
		for q := range s.results {
			if q <= s.ack {
				delete(s.results, q)
			}
		}
	}
	if c.Seq <= s.ack {
		return errResult(KindDuplicate)
	}
	if r, ok := s.results[c.Seq]; ok {
		return r // the first answer; nothing changes
	}
	r := m.exec(idx, c)
	if m.sessions[c.Session] == s {
		s.results[c.Seq] = r
	}
	return r
}

// liveHandle: the handle is the session's own and its node instance
// still exists.
func (m *model) liveHandle(c mCmd) (*mHandle, *mNode, Kind) {
	h := m.handles[c.Handle]
	if h == nil || h.session != c.Session {
		return nil, nil, KindHandleInvalid
	}
	n := m.nodes[h.path]
	if n == nil || n.inst != h.inst {
		return nil, nil, KindHandleInvalid
	}
	return h, n, KindNone
}

func (m *model) exec(idx uint64, c mCmd) mResult {
	switch c.Type {
	case CmdEpoch:
		m.epoch++
		return mResult{Epoch: m.epoch}
	case CmdCreateSession:
		if !modelIdentityOK(c.Identity) {
			return errResult(KindBadRequest)
		}
		m.sessions[idx] = &mSession{client: c.Client, principal: c.Principal, created: c.Time, results: map[uint64]mResult{},
			host: c.Identity.Host, pid: c.Identity.PID, program: c.Identity.Program}
		return mResult{Session: idx}
	case CmdCloseSession, CmdIdleCloseSession:
		s := m.sessions[c.Session]
		if s == nil {
			return errResult(KindSessionExpired)
		}
		var ids []uint64
		for id, h := range m.handles {
			if h.session == c.Session {
				ids = append(ids, id)
			}
		}
		if c.Idle && len(ids) > 0 {
			return errResult(KindCanceled) // in use: the idle close is withdrawn
		}
		slices.Sort(ids)
		for _, id := range ids {
			if h := m.handles[id]; h != nil {
				m.closeHandle(idx, id, c.Expired, c.Time)
			}
		}
		// Ephemeral nodes die with their creating session, deepest first.
		type owned struct {
			path string
			inst uint64
		}
		var own []owned
		for p, n := range m.nodes {
			if n.eph && n.owner == c.Session {
				own = append(own, owned{p, n.inst})
			}
		}
		sort.Slice(own, func(i, j int) bool { return own[i].path > own[j].path })
		for _, o := range own {
			if n := m.nodes[o.path]; n != nil && n.inst == o.inst && (!n.dir || m.children(o.path) == 0) {
				m.removeNode(o.path, c.Time)
			}
		}
		delete(m.sessions, c.Session)
		return mResult{}
	case CmdOpen, CmdOpenSequential, CmdOpenLifetime, CmdOpenSemaphore:
		return m.open(idx, c)
	case CmdExpireTTL:
		// The master's deletion of a TTL file whose TTL passed: only the
		// instance and generation it saw, only once the entry's time is
		// past mtime+TTL; then as a Delete.
		n := m.nodes[c.Path]
		switch {
		case n == nil || n.inst != c.Instance:
			return errResult(KindNotFound)
		case n.ttl == 0:
			return errResult(KindBadRequest)
		case n.cgen != c.IfGen:
			return errResult(KindGenerationMismatch)
		case c.Time < n.mtime+n.ttl:
			return errResult(KindBadRequest)
		}
		m.removeNode(c.Path, c.Time)
		return mResult{}
	case CmdClose:
		h := m.handles[c.Handle]
		if h == nil || h.session != c.Session {
			return errResult(KindHandleInvalid)
		}
		m.closeHandle(idx, c.Handle, false, c.Time)
		return mResult{}
	case CmdTxn:
		return m.txn(idx, c)
	case CmdSetContents:
		h, n, k := m.liveHandle(c)
		switch {
		case k != KindNone:
			return errResult(k)
		case n.dir:
			return errResult(KindIsDir)
		case h.flags&FlagWrite == 0 || !m.allowed(c.Principal, c.Admin, n, permWrite):
			return errResult(KindPermission)
		case c.HasIfGen && n.cgen != c.IfGen:
			return errResult(KindGenerationMismatch)
		}
		n.contents, n.cgen, n.mtime, n.sum = string(c.Contents), idx, c.Time, checksum(c.Contents)
		return mResult{Stat: m.stat(n)}
	case CmdDelete:
		h, n, k := m.liveHandle(c)
		switch {
		case k != KindNone:
			return errResult(k)
		case h.flags&FlagWrite == 0:
			return errResult(KindPermission)
		case m.handles[c.Handle].path == m.root:
			return errResult(KindBadRequest)
		case !m.allowed(c.Principal, c.Admin, n, permWrite):
			return errResult(KindPermission)
		case n.dir && m.children(h.path) > 0:
			return errResult(KindNotEmpty)
		}
		m.removeNode(h.path, c.Time)
		return mResult{}
	case CmdAcquire:
		return m.acquire(idx, c)
	case CmdRelease:
		h, n, k := m.liveHandle(c)
		if k != KindNone {
			return errResult(k)
		}
		if !removeHolder(n, c.Handle) {
			return errResult(KindNotHeld)
		}
		m.afterRelease(idx, h.path, c.Time)
		return mResult{}
	case CmdCancelWait:
		h, n, k := m.liveHandle(c)
		if k != KindNone {
			return errResult(k)
		}
		for i, w := range n.waiters {
			if w.Handle == c.Handle && w.Seq == c.WaitSeq {
				n.waiters = slices.Delete(slices.Clone(n.waiters), i, i+1)
				m.grantWaiters(idx, h.path, c.Time)
				return mResult{}
			}
		}
		for _, ho := range n.holders {
			// A grant that raced the cancel is undone: exactly the grant
			// of that wait.
			if ho.Handle == c.Handle && ho.WaitSeq == c.WaitSeq && c.WaitSeq != 0 {
				removeHolder(n, c.Handle)
				m.afterRelease(idx, h.path, c.Time)
				break
			}
		}
		return mResult{}
	case CmdGrant:
		if m.nodes[c.Path] != nil {
			m.grantWaiters(idx, c.Path, c.Time)
		}
		return mResult{}
	case CmdBreakLock:
		// The admin's alone; every holder goes, the generation moves on
		// (when anyone held it), a running lock-delay ends, and the
		// waiters get the lock as after a release.
		n := m.nodes[c.Path]
		switch {
		case !c.Admin:
			return errResult(KindPermission)
		case n == nil:
			return errResult(KindNotFound)
		case len(n.holders) == 0 && n.delay <= c.Time && len(n.semDelays) == 0:
			return mResult{LockGen: n.lgen}
		}
		n.semDelays = nil
		broken := n.holders
		if len(broken) == 0 {
			broken = nil
		}
		n.holders, n.mode, n.delay = nil, LockFree, min(n.delay, c.Time)
		if len(broken) > 0 {
			n.lgen = idx
		}
		m.afterRelease(idx, c.Path, c.Time)
		return mResult{LockGen: n.lgen, Broken: broken}
	case CmdResumeSession:
		// A new incarnation; every lock of the session a new generation;
		// its queued waits withdrawn (in handle order, each as a close
		// would withdraw it).
		s := m.sessions[c.Session]
		switch {
		case s == nil:
			return errResult(KindSessionExpired)
		case s.principal != c.Principal:
			return errResult(KindPermission)
		}
		s.incarnation = idx
		var ids []uint64
		for id, h := range m.handles {
			if h.session == c.Session {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			h := m.handles[id]
			n := m.nodes[h.path]
			if n == nil || n.inst != h.inst {
				continue
			}
			for i, w := range n.waiters {
				if w.Handle == id {
					n.waiters = slices.Delete(slices.Clone(n.waiters), i, i+1)
					m.grantWaiters(idx, h.path, c.Time)
					break
				}
			}
			for i, ho := range n.holders {
				if ho.Handle == id && n.semLimit != 0 {
					n.holders = slices.Clone(n.holders)
					n.holders[i].Gen = m.permitGen(idx)
					n.lgen = n.holders[i].Gen
				} else if ho.Handle == id {
					n.lgen = idx
				}
			}
		}
		next := s.ack
		for q := range s.results {
			next = max(next, q)
		}
		return mResult{Session: c.Session, Incarnation: idx, NextSeq: next + 1}
	case CmdSetACL, CmdSetACLIfGen:
		_, n, k := m.liveHandle(c)
		if k != KindNone {
			return errResult(k)
		}
		if !m.allowed(c.Principal, c.Admin, n, permChange) {
			return errResult(KindPermission)
		}
		if c.HasIfGen && n.agen != c.IfGen {
			return errResult(KindGenerationMismatch)
		}
		n.acl = [3]string{c.ACL.Read, c.ACL.Write, c.ACL.ChangeACL}
		n.agen = idx
		return mResult{Stat: m.stat(n)}
	}
	panic(fmt.Sprintf("model: command %s", c.Type))
}

// checkCreate: what a create of the missing name must pass.
func (m *model) checkCreate(c mCmd) Kind {
	parent := m.nodes[modelParent(c.Path)]
	switch {
	case parent == nil || m.hidden(&c, parent):
		return KindNotFound
	case !parent.dir:
		return KindNotDir
	case !m.allowed(c.Principal, c.Admin, parent, permWrite):
		return KindPermission
	case c.Flags&FlagDirectory != 0 && len(c.Contents) > 0:
		return KindBadRequest
	}
	return KindNone
}

func (m *model) open(idx uint64, c mCmd) mResult {
	if m.sessions[c.Session] == nil {
		return errResult(KindSessionExpired)
	}
	if !lifetimeOK(c) || !semaphoreOK(c) {
		return errResult(KindBadRequest)
	}
	if c.Flags&FlagSequential != 0 {
		return m.openSequential(idx, c)
	}
	create := c.Flags&FlagCreate != 0
	n := m.nodes[c.Path]
	created := false
	switch {
	case n != nil && m.hidden(&c, n):
		// As for a missing name, except that a create the caller may make
		// finds the name taken.
		if !create {
			return errResult(KindNotFound)
		}
		if k := m.checkCreate(c); k != KindNone {
			return errResult(k)
		}
		return errResult(KindExists)
	case n == nil:
		if !create {
			return errResult(KindNotFound)
		}
		if k := m.checkCreate(c); k != KindNone {
			return errResult(k)
		}
		parent := m.nodes[modelParent(c.Path)]
		n = &mNode{dir: c.Flags&FlagDirectory != 0, eph: c.Flags&FlagEphemeral != 0, contents: string(c.Contents),
			inst: idx, cgen: idx, agen: idx, ctime: c.Time, mtime: c.Time, acl: parent.acl, creator: c.Principal,
			sum: checksum(c.Contents), ttl: c.TTL, container: c.Flags&FlagContainer != 0, semLimit: c.SemLimit}
		if n.eph {
			n.owner = c.Session
		}
		m.nodes[c.Path] = n
		created = true
	case c.Flags&FlagRead != 0 && !m.allowed(c.Principal, c.Admin, n, permRead),
		c.Flags&FlagWrite != 0 && !m.allowed(c.Principal, c.Admin, n, permWrite):
		return errResult(KindPermission)
	case create && c.Flags&FlagExcl != 0:
		return errResult(KindExists)
	case create && (c.Flags&FlagDirectory != 0) != n.dir:
		return errResult(KindExists)
	case create && c.SemLimit != 0 && c.SemLimit != n.semLimit:
		return errResult(KindExists)
	case !create && c.Flags&FlagDirectory != 0 && !n.dir:
		return errResult(KindNotDir)
	}
	m.handles[idx] = &mHandle{session: c.Session, path: c.Path, inst: n.inst, flags: c.Flags, lockDelay: c.LockDelay}
	return mResult{Handle: idx, Created: created, Stat: m.stat(n)}
}

// openSequential: a create under the prefix plus the parent's counter in
// ten digits, skipping names that exist; the counter moves past the name
// made.
func (m *model) openSequential(idx uint64, c mCmd) mResult {
	base := c.Path[strings.LastIndexByte(c.Path, '/')+1:]
	switch {
	case c.Flags&FlagCreate == 0:
		return errResult(KindBadRequest)
	case len(c.Path)+10 > 1024 || len(base)+10 > 255:
		return errResult(KindBadRequest)
	}
	if k := m.checkCreate(c); k != KindNone {
		return errResult(k)
	}
	pp := modelParent(c.Path)
	if pp == m.root+"/"+ACLDirName {
		return errResult(KindBadRequest)
	}
	parent := m.nodes[pp]
	k := parent.seq
	for m.nodes[fmt.Sprintf("%s%010d", c.Path, k)] != nil {
		k++
	}
	if k != parent.seq {
		m.skipped++
	}
	name := fmt.Sprintf("%s%010d", c.Path, k)
	parent.seq = k + 1
	n := &mNode{dir: c.Flags&FlagDirectory != 0, eph: c.Flags&FlagEphemeral != 0, contents: string(c.Contents),
		inst: idx, cgen: idx, agen: idx, ctime: c.Time, mtime: c.Time, acl: parent.acl, creator: c.Principal,
		sum: checksum(c.Contents), ttl: c.TTL, container: c.Flags&FlagContainer != 0}
	if n.eph {
		n.owner = c.Session
	}
	m.nodes[name] = n
	m.handles[idx] = &mHandle{session: c.Session, path: name, inst: n.inst, flags: c.Flags, lockDelay: c.LockDelay}
	return mResult{Handle: idx, Created: true, Stat: m.stat(n), Name: name}
}

func (m *model) acquire(idx uint64, c mCmd) mResult {
	h, n, k := m.liveHandle(c)
	switch {
	case k != KindNone:
		return errResult(k)
	case c.Mode != LockExclusive && c.Mode != LockShared:
		return errResult(KindBadRequest)
	case h.flags&FlagWrite == 0 || !m.allowed(c.Principal, c.Admin, n, permWrite):
		return errResult(KindPermission)
	}
	if n.semLimit != 0 {
		return m.acquirePermit(idx, c, n)
	}
	for _, ho := range n.holders {
		if ho.Handle == c.Handle {
			if n.mode == c.Mode {
				return mResult{Granted: true, LockGen: n.lgen}
			}
			return errResult(KindLockHeld)
		}
	}
	for _, w := range n.waiters {
		if w.Handle == c.Handle {
			return errResult(KindLockHeld)
		}
	}
	delayed := n.delay > c.Time
	if !delayed && n.mode == LockFree && len(n.waiters) > 0 {
		// The lock-delay ran out before its hand-off entry: the queue
		// goes first.
		m.grantWaiters(idx, h.path, c.Time)
	}
	free := n.mode == LockFree && len(n.waiters) == 0
	shareable := n.mode == LockShared && c.Mode == LockShared && len(n.waiters) == 0
	if !delayed && (free || shareable) {
		m.grant(idx, n, Holder{Handle: c.Handle, Session: c.Session, Since: c.Time}, c.Mode)
		return mResult{Granted: true, LockGen: n.lgen}
	}
	if c.Wait {
		n.waiters = append(slices.Clone(n.waiters), Waiter{Handle: c.Handle, Session: c.Session, Seq: c.Seq, Mode: c.Mode, Since: c.Time})
		return mResult{Queued: true}
	}
	if delayed && n.mode == LockFree {
		return errResult(KindLockDelay)
	}
	return errResult(KindLockHeld)
}

func (m *model) grant(idx uint64, n *mNode, ho Holder, mode uint8) {
	if n.mode == LockFree {
		n.mode, n.lgen = mode, idx
	}
	n.holders = append(slices.Clone(n.holders), ho)
}

func removeHolder(n *mNode, handle uint64) bool {
	for i, ho := range n.holders {
		if ho.Handle == handle {
			n.holders = slices.Delete(slices.Clone(n.holders), i, i+1)
			return true
		}
	}
	return false
}

func (m *model) afterRelease(idx uint64, p string, now int64) {
	n := m.nodes[p]
	if len(n.holders) == 0 {
		n.mode = LockFree
	}
	m.grantWaiters(idx, p, now)
}

// grantWaiters hands the lock to the head of the queue: one exclusive
// waiter, or a run of shared ones, never before the lock-delay ends.
func (m *model) grantWaiters(idx uint64, p string, now int64) {
	n := m.nodes[p]
	if n.semLimit != 0 {
		m.grantPermits(idx, n, now)
		return
	}
	for len(n.waiters) > 0 && n.delay <= now {
		w := n.waiters[0]
		if n.mode != LockFree && !(n.mode == LockShared && w.Mode == LockShared) {
			return
		}
		n.waiters = slices.Clone(n.waiters[1:])
		m.grant(idx, n, Holder{Handle: w.Handle, Session: w.Session, WaitSeq: w.Seq, Since: now}, w.Mode)
		if w.Mode == LockExclusive {
			return
		}
	}
}

// closeHandle forgets a handle: its wait ends, its hold is released (with
// the lock-delay when its session failed and it was the last holder), and
// an ephemeral node no one has open goes.
func (m *model) closeHandle(idx, id uint64, failed bool, now int64) {
	h := m.handles[id]
	delete(m.handles, id)
	n := m.nodes[h.path]
	if n == nil || n.inst != h.inst {
		return
	}
	for i, w := range n.waiters {
		if w.Handle == id {
			n.waiters = slices.Delete(slices.Clone(n.waiters), i, i+1)
			break
		}
	}
	if n.semLimit != 0 && removeHolder(n, id) {
		if failed && h.lockDelay > 0 {
			// The failed holder's permit alone is held back.
			n.semDelays = append(slices.Clone(n.semDelays), now+h.lockDelay)
			m.delayedPermits++
			s := m.sessions[h.session]
			n.delayBy = &LockDelayCause{Session: h.session, Handle: id, Principal: s.principal,
				Host: s.host, PID: s.pid, Program: s.program, Time: now}
		}
		m.afterRelease(idx, h.path, now)
	} else if removeHolder(n, id) {
		if failed && h.lockDelay > 0 && len(n.holders) == 0 && now+h.lockDelay > n.delay {
			// The delay that ends last is the one whose cause reads name.
			n.delay = now + h.lockDelay
			s := m.sessions[h.session]
			n.delayBy = &LockDelayCause{Session: h.session, Handle: id, Principal: s.principal,
				Host: s.host, PID: s.pid, Program: s.program, Time: now}
		}
		m.afterRelease(idx, h.path, now)
	} else {
		m.grantWaiters(idx, h.path, now)
	}
	if n.eph && m.openHandles(h.path) == 0 && (!n.dir || m.children(h.path) == 0) {
		m.removeNode(h.path, now)
	}
}

func (m *model) removeNode(p string, now int64) {
	delete(m.nodes, p)
	pp := modelParent(p)
	parent := m.nodes[pp]
	if parent == nil {
		return
	}
	parent.mtime = now
	if m.children(pp) == 0 && (parent.container || parent.eph && m.openHandles(pp) == 0) {
		if parent.container {
			m.containersRemoved++
		}
		m.removeNode(pp, now)
	}
}

// ---------------------------------------------------------------------------
// Observation: the state both sides expose, in one comparable shape.

type obsNode struct {
	Path           string
	Dir, Eph       bool
	Owner          uint64
	Contents       string
	Inst, CGen     uint64
	LGen, AGen     uint64
	CTime, MTime   int64
	ACL            [3]string
	Creator        string
	Mode           uint8
	Holders        []Holder
	Waiters        []Waiter
	LockDelayUntil int64
	LockDelayBy    *LockDelayCause
	ChildSeq       uint64
	TTL            int64
	Container      bool
	SemLimit       uint32
	SemDelays      []int64
}

type obsSession struct {
	ID                uint64
	Client, Principal string
	Host, Program     string
	PID               int64
	Created           int64
	Ack               uint64
	Results           map[uint64]mResult
	Incarnation       uint64
}

type obsHandle struct {
	ID        uint64
	Session   uint64
	Path      string
	Inst      uint64
	Flags     uint32
	LockDelay int64
}

type observed struct {
	Epoch    uint64
	Nodes    []obsNode
	Sessions []obsSession
	Handles  []obsHandle
}

func (m *model) observe() observed {
	o := observed{Epoch: m.epoch}
	for _, p := range sortedStrings(m.nodes) {
		n := m.nodes[p]
		o.Nodes = append(o.Nodes, obsNode{Path: p, Dir: n.dir, Eph: n.eph, Owner: n.owner, Contents: n.contents,
			Inst: n.inst, CGen: n.cgen, LGen: n.lgen, AGen: n.agen, CTime: n.ctime, MTime: n.mtime, ACL: n.acl,
			Creator: n.creator, Mode: n.mode, Holders: slices.Clip(n.holders), Waiters: slices.Clip(n.waiters), LockDelayUntil: n.delay, LockDelayBy: n.delayBy,
			ChildSeq: n.seq, TTL: n.ttl, Container: n.container, SemLimit: n.semLimit, SemDelays: slices.Clip(n.semDelays)})
	}
	for _, id := range sortedKeys(m.sessions) {
		s := m.sessions[id]
		res := map[uint64]mResult{}
		for q, r := range s.results {
			res[q] = r
		}
		o.Sessions = append(o.Sessions, obsSession{ID: id, Client: s.client, Principal: s.principal, Created: s.created, Ack: s.ack, Results: res,
			Host: s.host, PID: s.pid, Program: s.program, Incarnation: s.incarnation})
	}
	for _, id := range sortedKeys(m.handles) {
		h := m.handles[id]
		o.Handles = append(o.Handles, obsHandle{ID: id, Session: h.session, Path: h.path, Inst: h.inst, Flags: h.flags, LockDelay: h.lockDelay})
	}
	return normalize(o)
}

// modelObserve reads an FSM's state through its snapshot encoding.
func modelObserve(t testing.TB, f *FSM) observed {
	img := fsmtImage(t, fsmtSnapshotBytes(t, f))
	o := observed{Epoch: img.Epoch}
	for _, n := range img.Nodes {
		o.Nodes = append(o.Nodes, obsNode{Path: n.Path, Dir: n.Dir, Eph: n.Ephemeral, Owner: n.Owner, Contents: string(n.Contents),
			Inst: n.Instance, CGen: n.ContentGen, LGen: n.LockGen, AGen: n.ACLGen, CTime: n.CTime, MTime: n.MTime,
			ACL: [3]string{n.ReadACL, n.WriteACL, n.ChangeACL}, Creator: n.Creator, Mode: n.LockMode,
			Holders: n.Holders, Waiters: n.Waiters, LockDelayUntil: n.LockDelayUntil, LockDelayBy: n.LockDelayBy,
			ChildSeq: n.ChildSeq, TTL: n.TTL, Container: n.Container, SemLimit: n.SemLimit, SemDelays: n.SemDelays})
		if !n.Dir && n.Checksum != checksum(n.Contents) {
			t.Fatalf("%s: checksum does not match contents", n.Path)
		}
	}
	byID := map[uint64]*obsSession{}
	for _, s := range img.Sessions {
		o.Sessions = append(o.Sessions, obsSession{ID: s.ID, Client: s.Client, Principal: s.Principal, Created: s.Created, Ack: s.AckSeq, Results: map[uint64]mResult{},
			Host: s.Host, PID: s.PID, Program: s.Program, Incarnation: s.Incarnation})
	}
	for i := range o.Sessions {
		byID[o.Sessions[i].ID] = &o.Sessions[i]
	}
	for _, r := range img.Results {
		s := byID[r.Session]
		if s == nil {
			t.Fatalf("snapshot keeps results of session %d, which does not exist", r.Session)
		}
		s.Results[r.Seq] = resultOf(r.Result)
	}
	for _, h := range img.Handles {
		o.Handles = append(o.Handles, obsHandle{ID: h.ID, Session: h.Session, Path: h.Path, Inst: h.Instance, Flags: h.Flags, LockDelay: h.LockDelay})
	}
	return normalize(o)
}

// normalize makes empty and nil slices alike.
func normalize(o observed) observed {
	for i := range o.Nodes {
		if len(o.Nodes[i].Holders) == 0 {
			o.Nodes[i].Holders = nil
		}
		if len(o.Nodes[i].Waiters) == 0 {
			o.Nodes[i].Waiters = nil
		}
		if len(o.Nodes[i].SemDelays) == 0 {
			o.Nodes[i].SemDelays = nil
		}
	}
	return o
}

// diffObserved names the first difference, for a readable failure.
func diffObserved(fsm, mod observed) string {
	if fsm.Epoch != mod.Epoch {
		return fmt.Sprintf("epoch: fsm %d, model %d", fsm.Epoch, mod.Epoch)
	}
	if len(fsm.Nodes) != len(mod.Nodes) || len(fsm.Sessions) != len(mod.Sessions) || len(fsm.Handles) != len(mod.Handles) {
		return fmt.Sprintf("fsm:\n%+v\nmodel:\n%+v", fsm, mod)
	}
	for i := range fsm.Nodes {
		if !reflect.DeepEqual(fsm.Nodes[i], mod.Nodes[i]) {
			return fmt.Sprintf("node:\nfsm   %+v\nmodel %+v", fsm.Nodes[i], mod.Nodes[i])
		}
	}
	for i := range fsm.Sessions {
		if !reflect.DeepEqual(fsm.Sessions[i], mod.Sessions[i]) {
			return fmt.Sprintf("session:\nfsm   %+v\nmodel %+v", fsm.Sessions[i], mod.Sessions[i])
		}
	}
	for i := range fsm.Handles {
		if fsm.Handles[i] != mod.Handles[i] {
			return fmt.Sprintf("handle:\nfsm   %+v\nmodel %+v", fsm.Handles[i], mod.Handles[i])
		}
	}
	return ""
}

// ---------------------------------------------------------------------------
// The driver.

// modelRun applies entries to the main FSM, its followers and the model.
type modelRun struct {
	rt        *rapid.T
	t         testing.TB
	f         *FSM
	followers []*FSM // restored from snapshots, applying the rest of the log
	m         *model
	log       []logEntry
	lastIndex uint64 // the last command index (batch.go) the model applied at
	now       int64
	seq       map[uint64]uint64  // session -> last request id issued
	last      map[uint64]Command // session -> last request, for retries
	issued    []uint64           // every handle id an open returned
	waits     map[uint64]uint64  // handle -> request id of its last blocking acquire
	inc       map[uint64]uint64  // session -> the incarnation its client speaks for
	trace     []string
	stats     map[string]int
	fifo      *fifoCheck // the FIFO property of lock queues, checked on the FSM (fifo_test.go)
}

func (r *modelRun) applyEntry(c Command) mResult {
	idx := uint64(len(r.log)) + 1
	if c.Time == 0 {
		c.Time = r.now
	}
	b, err := c.Encode()
	if err != nil {
		r.rt.Fatalf("encode %+v: %v", c, err)
	}
	// About one entry in four is a batch (group commit) of the command
	// and a Grant of a name that never exists, before or after it: the
	// Grant changes nothing, but it takes a command index, so from the
	// first batch on every id and generation the model expects is a
	// command index past the entry's Raft index.
	pos, data := -1, b // the command's place in the batch, -1: no batch
	filler := Command{Time: c.Time, Payload: &GrantArgs{Path: fsmtPath("never-created")}}
	if modelChance(r.rt, 4, "batched") {
		fb, err := filler.Encode()
		if err != nil {
			r.rt.Fatal(err)
		}
		pos = rapid.IntRange(0, 1).Draw(r.rt, "place in batch")
		cmds := [][]byte{b, fb}
		if pos == 1 {
			cmds = [][]byte{fb, b}
		}
		if data, err = EncodeBatch(cmds); err != nil {
			r.rt.Fatal(err)
		}
	}
	e := logEntry{Index: idx, Term: 1, Data: data}
	r.log = append(r.log, e)
	// Every node the entry changes is one the master invalidated before
	// proposing it (AffectedPaths, asked of the state before the apply):
	// a name left out would be served stale from some client's cache.
	affected := r.f.AffectedPaths(&c)
	seen := len(r.fifo.changes)
	got := resultOf(modelApplyAt(r.rt, r.f, &e, pos))
	// A sequential create's name is known only once applied; it was
	// missing, cached by no one but as an absence under its parent, which
	// is what AffectedPaths names.
	op, _ := c.Payload.(*OpenArgs)
	sequential := op != nil && op.Flags&(FlagSequential|FlagCreate) == FlagSequential|FlagCreate
	for _, ch := range r.fifo.changes[seen:] {
		if sequential && slices.Contains(affected, parentOf(ch.Path)) {
			continue
		}
		if ch.Path != "" && ch.Kind != ChangeSessionCreated && ch.Kind != ChangeSessionClosed && !slices.Contains(affected, ch.Path) {
			r.rt.Fatalf("entry %d %s %+v changed %s (%+v), which AffectedPaths %q left out", idx, c.Type, c.Payload, ch.Path, ch, affected)
		}
	}
	for i, fl := range r.followers {
		if fr := resultOf(modelApplyAt(r.rt, fl, &e, pos)); !reflect.DeepEqual(fr, got) {
			r.rt.Fatalf("entry %d %s: follower %d answered %+v, the main FSM %+v", idx, c.Type, i, fr, got)
		}
	}
	mc := flatCmd(c)
	next := func() uint64 { r.lastIndex = max(r.lastIndex+1, idx); return r.lastIndex }
	r.m.nextIndex = next
	if pos == 1 {
		r.m.apply(next(), flatCmd(filler))
	}
	want := r.m.apply(next(), mc)
	if pos == 0 {
		r.m.apply(next(), flatCmd(filler))
	}
	r.trace = append(r.trace, fmt.Sprintf("%d %s s=%d q=%d a=%d h=%d p=%s f=%#x m=%d w=%v ws=%d ld=%v ig=%v/%d x=%v t=+%dms pr=%s -> %+v",
		idx, c.Type, c.Session, c.Seq, c.Ack, mc.Handle, strings.TrimPrefix(mc.Path, fsmtRoot), mc.Flags, mc.Mode, mc.Wait, mc.WaitSeq,
		time.Duration(mc.LockDelay), mc.HasIfGen, mc.IfGen, mc.Expired, (c.Time-fsmtBase)/1e6, c.Principal, got.short()))
	if !reflect.DeepEqual(got, want) {
		r.rt.Fatalf("entry %d %s: the FSM answered\n  %+v\nthe model\n  %+v\nlog:\n%s", idx, c.Type, got, want, strings.Join(r.trace, "\n"))
	}
	if d := diffObserved(modelObserve(r.t, r.f), r.m.observe()); d != "" {
		r.rt.Fatalf("after entry %d %s the state differs: %s\nlog:\n%s", idx, c.Type, d, strings.Join(r.trace, "\n"))
	}
	fsmtCheckInvariants(r.t, r.f)
	if r.fifo != nil {
		if why := r.fifo.check(r.f); why != "" {
			r.rt.Fatalf("after entry %d %s FIFO is broken: %s\nlog:\n%s", idx, c.Type, why, strings.Join(r.trace, "\n"))
		}
	}
	name := c.Type.String()
	if want.Kind != KindNone {
		name += fmt.Sprintf("/err%d", want.Kind)
	}
	r.stats[name]++
	if want.Name != "" {
		r.stats["sequential"]++
	}
	return got
}

// modelChance is true about once in n draws. rapid favours small numbers
// and shrinks towards them, so the rare outcome is the largest: a
// shrunk failing sequence keeps only the rare turns it needs.
func modelChance(rt *rapid.T, n int, label string) bool {
	return rapid.IntRange(0, n-1).Draw(rt, label) == n-1
}

// modelApplyAt applies e and returns the result of its command at pos of
// its batch, or its own with pos -1.
func modelApplyAt(rt *rapid.T, f *FSM, e *logEntry, pos int) *Result {
	if pos < 0 {
		return modelApplyOne(rt, f, e)
	}
	rs, ok := applyLog(f, e).([]*Result)
	if !ok || len(rs) != 2 || rs[1-pos] == nil || rs[1-pos].Err != nil {
		rt.Fatalf("batch Apply returned %T %+v", rs, rs)
	}
	return rs[pos]
}

func modelApplyOne(rt *rapid.T, f *FSM, e *logEntry) *Result {
	r, ok := applyLog(f, e).(*Result)
	if !ok || r == nil {
		rt.Fatalf("Apply returned %T", r)
	}
	return r
}

// request applies c as session s's next request (Ack: every earlier one
// completed, as a sequential client sends).
func (r *modelRun) request(s uint64, c Command) mResult {
	r.seq[s]++
	c.Session, c.Seq, c.Ack, c.Incarnation = s, r.seq[s], r.seq[s]-1, r.inc[s]
	if c.Principal == "" {
		if ms := r.m.sessions[s]; ms != nil {
			c.Principal = ms.principal
		} else {
			c.Principal = "p1"
		}
	}
	r.last[s] = c
	res := r.applyEntry(c)
	if _, ok := c.Payload.(*OpenArgs); ok && res.Kind == KindNone && !slices.Contains(r.issued, res.Handle) {
		r.issued = append(r.issued, res.Handle)
	}
	if a, ok := c.Payload.(*AcquireArgs); ok && a.Wait {
		r.waits[a.Handle] = c.Seq
	}
	return res
}

// snapshotFollower restores the main FSM's snapshot into a fresh FSM that
// then follows the log.
func (r *modelRun) snapshotFollower() {
	f, err := fsmtRestore(r.t, fsmtCell, fsmtSnapshotBytes(r.t, r.f))
	if err != nil {
		r.rt.Fatalf("restore: %v", err)
	}
	modelSameHash(r.rt, "restored at entry "+fmt.Sprint(len(r.log)), r.f, f)
	r.followers = append(r.followers, f)
}

func modelSameHash(rt *rapid.T, what string, a, b *FSM) {
	ia, ha, err := a.StateHash()
	if err != nil {
		rt.Fatal(err)
	}
	ib, hb, err := b.StateHash()
	if err != nil {
		rt.Fatal(err)
	}
	if ia != ib || ha != hb {
		rt.Fatalf("%s: state hash at %d %x, the main FSM's at %d %x", what, ib, hb[:8], ia, ha[:8])
	}
}

// modelFlags sets rapid's flags for this test, unless given on the
// command line: the number of sequences (the make test or the make
// torture count); the seed from LOCKCELL_SAFETY_SEED when set (the
// seeded-bug suite passes one, so a catch can be replayed); and no fail
// file when a seeded bug is built in (its catches are expected, and
// would otherwise be left in testdata to replay on every later run).
func modelFlags(t *testing.T) {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := func(name, value string) {
		fl := flag.Lookup(name)
		if fl == nil || given[name] {
			return
		}
		old := fl.Value.String()
		if err := fl.Value.Set(value); err != nil {
			t.Fatalf("-%s=%s: %v", name, value, err)
		}
		t.Cleanup(func() { _ = fl.Value.Set(old) })
	}
	n := modelChecksDefault
	if os.Getenv("LOCKCELL_CHAOS_TORTURE") == "1" {
		n = modelChecksTorture
	}
	set("rapid.checks", fmt.Sprint(n))
	if seed := os.Getenv("LOCKCELL_SAFETY_SEED"); seed != "" {
		set("rapid.seed", seed)
	}
	if bugNoDedup || bugNoLockDelay || bugACLSkipSubOp {
		set("rapid.nofailfile", "true")
	}
}

func TestFSMMatchesModel(t *testing.T) {
	modelFlags(t)
	total := map[string]int{}
	sequences := 0
	rapid.Check(t, func(rt *rapid.T) {
		sequences++
		r := &modelRun{rt: rt, t: t, f: NewFSM(fsmtCell, fsmtLogger()), m: newModel(), now: fsmtBase,
			seq: map[uint64]uint64{}, last: map[uint64]Command{}, waits: map[uint64]uint64{}, inc: map[uint64]uint64{}, stats: total, fifo: newFIFOCheck()}
		r.f.SetObserver(r.fifo.observe)
		// Setup: the admin makes the ACL files and lets everyone create
		// at the root; what is created below inherits that.
		admin := r.applyEntry(Command{Client: "admin", Principal: "admin", Admin: true, Payload: &CreateSessionArgs{}}).Session
		asAdmin := func(c Command) mResult {
			c.Principal, c.Admin = "admin", true
			res := r.request(admin, c)
			if res.Kind != KindNone {
				rt.Fatalf("setup %s %+v: kind %d", c.Payload.CmdType(), c.Payload, res.Kind)
			}
			return res
		}
		asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName), Flags: fsmtRWC | FlagDirectory}})
		asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName + "/all"), Flags: fsmtRWC, Contents: []byte("*\n")}})
		asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName + "/p1only"), Flags: fsmtRWC, Contents: []byte("p1\n")}})
		rootH := asAdmin(Command{Payload: &OpenArgs{Path: fsmtRoot, Flags: fsmtRW | FlagDirectory}}).Handle
		asAdmin(Command{Payload: &SetACLArgs{Handle: rootH, ACL: &ACLNames{Write: "all", ChangeACL: "all"}}})
		r.issued = nil // the admin's handles are not the clients' to play with

		var sessions []uint64 // client sessions, live or not
		newSession := func() {
			p := rapid.SampledFrom(modelPrincipals).Draw(rt, "principal")
			id := CreateSessionArgs{Host: rapid.SampledFrom(modelHosts).Draw(rt, "host"),
				PID: rapid.SampledFrom([]int64{0, 4242, -1}).Draw(rt, "pid"), Program: rapid.SampledFrom(modelHosts).Draw(rt, "program")}
			res := r.applyEntry(Command{Client: "c", Principal: p, Payload: &id})
			if res.Kind != KindNone { // refused: a session that declares a fine one
				res = r.applyEntry(Command{Client: "c", Principal: p, Payload: &CreateSessionArgs{Host: "h1", PID: 1, Program: "prog"}})
			}
			sessions = append(sessions, res.Session)
		}
		newSession()
		// pickSession: mostly a live client session.
		liveSessions := func() []uint64 {
			var live []uint64
			for _, s := range sessions {
				if r.m.sessions[s] != nil {
					live = append(live, s)
				}
			}
			return live
		}
		pickSession := func() uint64 {
			if live := liveSessions(); len(live) > 0 && !modelChance(rt, 10, "dead session") {
				return rapid.SampledFrom(live).Draw(rt, "live session")
			}
			return rapid.SampledFrom(sessions).Draw(rt, "session")
		}
		// pickHandle: mostly a client's handle on a live node, sometimes
		// one that went invalid, rarely any number.
		liveHandles := func() []uint64 {
			var live []uint64
			for _, id := range sortedKeys(r.m.handles) {
				if h := r.m.handles[id]; h.session != admin && r.m.nodes[h.path] != nil && r.m.nodes[h.path].inst == h.inst {
					live = append(live, id)
				}
			}
			return live
		}
		pickHandle := func() uint64 {
			live := liveHandles()
			switch x := rapid.IntRange(0, 19).Draw(rt, "handle kind"); {
			case x < 16 && len(live) > 0:
				return rapid.SampledFrom(live).Draw(rt, "live handle")
			case x < 19 && len(r.issued) > 0:
				return rapid.SampledFrom(r.issued).Draw(rt, "issued handle")
			}
			return uint64(rapid.IntRange(0, len(r.log)+2).Draw(rt, "any handle"))
		}
		// ownerOf sends a handle's commands from its own session mostly.
		ownerOf := func(h uint64) uint64 {
			if mh := r.m.handles[h]; mh != nil && mh.session != admin && !modelChance(rt, 10, "foreign session") {
				return mh.session
			}
			return pickSession()
		}
		pickName := func() string {
			if rapid.Bool().Draw(rt, "top level") {
				return fsmtPath(rapid.SampledFrom(modelNames[:2]).Draw(rt, "name"))
			}
			return fsmtPath(rapid.SampledFrom(modelNames).Draw(rt, "name"))
		}
		delays := []int64{int64(2 * time.Second), int64(500 * time.Millisecond), 0, int64(5 * time.Second)}

		steps := rapid.IntRange(10, modelMaxSteps).Draw(rt, "steps")
		for range steps {
			r.now += int64(rapid.IntRange(0, 2500).Draw(rt, "ms passing")) * int64(time.Millisecond)
			if len(r.followers) < 2 && modelChance(rt, 30, "snapshot") {
				r.snapshotFollower()
			}
			if len(liveSessions()) == 0 {
				newSession()
			}
			op := rapid.SampledFrom(modelOps).Draw(rt, "op")
			if len(liveHandles()) == 0 && !modelChance(rt, 4, "no handle yet") {
				op = "open" // most operations need a handle
			}
			switch op {
			case "new session":
				newSession()
			case "close session":
				// The master's close: by expiry, for idleness (refused
				// while the session has a handle open), or the client's own.
				p := &CloseSessionArgs{Expired: rapid.Bool().Draw(rt, "expired")}
				p.Idle = !p.Expired && modelChance(rt, 3, "idle")
				r.applyEntry(Command{Session: pickSession(), Payload: p})
			case "open":
				flags := FlagRead
				if !modelChance(rt, 4, "read-only") {
					flags |= FlagWrite
				}
				var contents []byte
				if !modelChance(rt, 4, "no create") {
					flags |= FlagCreate
					flags |= rapid.SampledFrom([]uint32{0, 0, 0, FlagExcl}).Draw(rt, "excl")
					flags |= rapid.SampledFrom([]uint32{0, 0, FlagEphemeral}).Draw(rt, "ephemeral")
					if modelChance(rt, 3, "contents") {
						contents = []byte(rapid.SampledFrom([]string{"x", "yy"}).Draw(rt, "initial"))
					}
				}
				if modelChance(rt, 3, "directory") {
					flags |= FlagDirectory
					if !modelChance(rt, 6, "dir contents") {
						contents = nil
					}
				}
				name := pickName()
				// Sometimes into a container directory, so that its
				// last child's delete removes it (see "delete").
				var intoContainer []string
				for _, n := range modelNames {
					if parent := r.m.nodes[modelParent(fsmtPath(n))]; parent != nil && parent.container {
						intoContainer = append(intoContainer, fsmtPath(n))
					}
				}
				if len(intoContainer) > 0 && modelChance(rt, 3, "into a container") {
					name = rapid.SampledFrom(intoContainer).Draw(rt, "container child")
				}
				if modelChance(rt, 4, "sequential") {
					// Mostly with create, as the master insists.
					flags |= FlagSequential
					name = fsmtPath(rapid.SampledFrom(modelSeqPrefixes).Draw(rt, "prefix"))
					// Sometimes someone makes the name the counter is at by
					// hand first, which the create must skip: left to the
					// hand-made modelNames alone, a run of 300 sequences
					// did not always meet one.
					if parent := r.m.nodes[modelParent(name)]; parent != nil && modelChance(rt, 3, "next name taken") {
						r.request(pickSession(), Command{Payload: &OpenArgs{Path: fmt.Sprintf("%s%010d", name, parent.seq), Flags: FlagCreate}})
					}
				}
				// Mostly what the master lets through: a container
				// directory, a TTL on a file; sometimes not.
				var ttl int64
				dir, plain := flags&FlagDirectory != 0, flags&(FlagCreate|FlagEphemeral) == FlagCreate
				if dir && plain && rapid.Bool().Draw(rt, "container") || modelChance(rt, 16, "odd container") {
					flags |= FlagContainer
				}
				if !dir && plain && modelChance(rt, 3, "ttl") || modelChance(rt, 16, "odd ttl") {
					ttl = rapid.SampledFrom(modelTTLs).Draw(rt, "ttl")
				}
				// Some creates of plain files make semaphores of 1 to 3
				// permits (an odd one of too many, or on something else).
				var semLimit uint32
				if !dir && plain && ttl == 0 && flags&FlagSequential == 0 && modelChance(rt, 3, "semaphore") || modelChance(rt, 24, "odd semaphore") {
					semLimit = uint32(rapid.SampledFrom([]int{1, 2, 3, 1025}).Draw(rt, "permits"))
				}
				r.request(pickSession(), Command{Payload: &OpenArgs{Path: name, Flags: flags, Contents: contents,
					LockDelay: rapid.SampledFrom(delays).Draw(rt, "lock-delay"), TTL: ttl, SemLimit: semLimit}})
			case "close":
				h := pickHandle()
				r.request(ownerOf(h), Command{Payload: &CloseArgs{Handle: h}})
			case "set":
				h := pickHandle()
				p := &SetContentsArgs{Handle: h, Contents: []byte(rapid.SampledFrom([]string{"", "v1", "v22"}).Draw(rt, "contents"))}
				if rapid.Bool().Draw(rt, "cas") {
					p.HasIfGen = true
					p.IfGen = uint64(rapid.IntRange(0, len(r.log)).Draw(rt, "stale gen"))
					if mh := r.m.handles[h]; mh != nil && r.m.nodes[mh.path] != nil && rapid.Bool().Draw(rt, "current gen") {
						p.IfGen = r.m.nodes[mh.path].cgen
					}
				}
				r.request(ownerOf(h), Command{Payload: p})
			case "delete":
				h := pickHandle()
				// Sometimes the only child of a container, whose delete
				// takes the container with it: left to chance (with
				// "into a container" above), a run of 300 sequences met
				// 1 to 6 such removals, and none in about one run of 12.
				var lastChildren []uint64
				for _, id := range liveHandles() {
					if p := r.m.handles[id].path; p != r.m.root {
						if parent := r.m.nodes[modelParent(p)]; parent != nil && parent.container && r.m.children(modelParent(p)) == 1 {
							lastChildren = append(lastChildren, id)
						}
					}
				}
				if len(lastChildren) > 0 && modelChance(rt, 2, "a container's last child") {
					h = rapid.SampledFrom(lastChildren).Draw(rt, "last child")
				}
				r.request(ownerOf(h), Command{Payload: &DeleteArgs{Handle: h}})
			case "acquire":
				h := pickHandle()
				mode := rapid.SampledFrom([]uint8{LockExclusive, LockShared}).Draw(rt, "mode")
				if mh := r.m.handles[h]; mh != nil && r.m.nodes[mh.path] != nil && r.m.nodes[mh.path].semLimit != 0 &&
					!modelChance(rt, 8, "exclusive on a semaphore") {
					mode = LockShared // a semaphore's permits are taken shared
				}
				if modelChance(rt, 20, "bad mode") {
					mode = 3
				}
				r.request(ownerOf(h), Command{Payload: &AcquireArgs{Handle: h, Mode: mode, Wait: rapid.Bool().Draw(rt, "wait")}})
			case "release":
				h := pickHandle()
				r.request(ownerOf(h), Command{Payload: &ReleaseArgs{Handle: h}})
			case "cancel":
				h := pickHandle()
				ws := r.waits[h]
				if modelChance(rt, 5, "other wait") {
					ws = uint64(rapid.IntRange(0, 8).Draw(rt, "wait seq"))
				}
				r.request(ownerOf(h), Command{Payload: &CancelWaitArgs{Handle: h, WaitSeq: ws}})
			case "set acl":
				h := pickHandle()
				names := &ACLNames{}
				names.Read = rapid.SampledFrom(modelACLNames).Draw(rt, "read acl")
				names.Write = rapid.SampledFrom(modelACLNames).Draw(rt, "write acl")
				names.ChangeACL = rapid.SampledFrom(modelACLNames).Draw(rt, "change acl")
				p := &SetACLArgs{Handle: h, ACL: names}
				if rapid.Bool().Draw(rt, "acl cas") {
					p.HasIfGen = true
					p.IfGen = uint64(rapid.IntRange(0, len(r.log)).Draw(rt, "stale acl gen"))
					if mh := r.m.handles[h]; mh != nil && r.m.nodes[mh.path] != nil && rapid.Bool().Draw(rt, "current acl gen") {
						p.IfGen = r.m.nodes[mh.path].agen
					}
				}
				r.request(ownerOf(h), Command{Payload: p})
			case "break":
				// The admin breaks a lock (rarely, someone else tries).
				if modelChance(rt, 6, "non-admin break") {
					r.request(pickSession(), Command{Payload: &BreakLockArgs{Path: pickName(), Reason: "model"}})
				} else {
					r.request(admin, Command{Principal: "admin", Admin: true, Payload: &BreakLockArgs{Path: pickName(), Reason: "model"}})
				}
			case "expire ttl":
				// The master's deletion of a TTL file it saw due: mostly
				// of the instance and generation it has now, sometimes
				// of ones a write or a re-create replaced, or of a node
				// not yet due (a master whose clock runs ahead).
				p := &ExpireTTLArgs{Path: pickName()}
				var ttlNodes []string
				for _, name := range sortedStrings(r.m.nodes) {
					if r.m.nodes[name].ttl != 0 {
						ttlNodes = append(ttlNodes, name)
					}
				}
				if len(ttlNodes) > 0 && !modelChance(rt, 5, "expire any name") {
					p.Path = rapid.SampledFrom(ttlNodes).Draw(rt, "ttl node")
				}
				if n := r.m.nodes[p.Path]; n != nil {
					p.Instance, p.Gen = n.inst, n.cgen
					if modelChance(rt, 5, "stale expiry") {
						p.Gen = uint64(rapid.IntRange(0, len(r.log)).Draw(rt, "stale ttl gen"))
					}
				}
				r.applyEntry(Command{Payload: p})
			case "txn":
				r.request(pickSession(), Command{Payload: modelTxn(rt, r.m, pickName)})
			case "grant":
				// The master's hand-off once a lock-delay has passed.
				r.applyEntry(Command{Payload: &GrantArgs{Path: pickName()}})
			case "retry":
				// A retry: the session's last request again (it must get
				// the first answer and change nothing), or an earlier one
				// (already acknowledged: a duplicate).
				s := pickSession()
				// Sometimes a session resumed since its last request:
				// the process before the resume retries, and must be
				// refused. Left to chance, a run of 300 sequences met
				// 2 to 12 of them.
				var resumed []uint64
				for _, id := range sortedKeys(r.last) {
					if r.last[id].Incarnation != r.inc[id] {
						resumed = append(resumed, id)
					}
				}
				if len(resumed) > 0 && modelChance(rt, 2, "retry across a resume") {
					s = rapid.SampledFrom(resumed).Draw(rt, "resumed session")
				}
				c, ok := r.last[s]
				if !ok {
					continue
				}
				if c.Seq > 1 && modelChance(rt, 4, "older retry") {
					c.Seq = uint64(rapid.IntRange(1, int(c.Seq)-1).Draw(rt, "older seq"))
					c.Ack = c.Seq - 1
				}
				c.Time = 0
				r.stats["retry"]++
				if c.Incarnation != r.inc[s] {
					r.stats["stale incarnation"]++ // the process before a resume
				}
				r.applyEntry(c)
			case "epoch":
				r.applyEntry(Command{Payload: &EpochArgs{}})
			case "resume":
				// A new process takes the session over (rarely, another
				// principal tries); it goes on from the request id the
				// resume names, under the new incarnation, and the old
				// process's retries ("retry") are refused.
				s := pickSession()
				p := "p1"
				if ms := r.m.sessions[s]; ms != nil && !modelChance(rt, 6, "other principal") {
					p = ms.principal
				}
				res := r.applyEntry(Command{Session: s, Principal: p, Payload: &ResumeSessionArgs{}})
				if res.Kind == KindNone {
					r.inc[s], r.seq[s] = res.Incarnation, res.NextSeq-1
				}
			case "pause":
				// Time passes (a lock-delay may run out).
				r.now += int64(rapid.IntRange(0, 6000).Draw(rt, "long pause")) * int64(time.Millisecond)
			}
		}
		if len(r.log) > 0 && rapid.Bool().Draw(rt, "final snapshot") {
			r.snapshotFollower()
		}
		// The same log on a second FSM gives the same state; so does
		// every follower restored from a snapshot on the way.
		replay := NewFSM(fsmtCell, fsmtLogger())
		for i := range r.log {
			applyLog(replay, &r.log[i]) // a *Result, or a batch's []*Result
		}
		modelSameHash(rt, "the log replayed on a second FSM", r.f, replay)
		for i, fl := range r.followers {
			modelSameHash(rt, fmt.Sprintf("follower %d restored from a snapshot", i), r.f, fl)
		}
		restored, err := fsmtRestore(t, fsmtCell, fsmtSnapshotBytes(t, r.f))
		if err != nil {
			rt.Fatal(err)
		}
		modelSameHash(rt, "the final snapshot restored", r.f, restored)
		if d := diffObserved(modelObserve(t, restored), r.m.observe()); d != "" {
			rt.Fatalf("the restored FSM differs from the model: %s", d)
		}
		total["sequential skip"] += r.m.skipped
		for _, n := range r.m.nodes {
			if n.seq != 0 {
				total["directory with a counter"]++
				break
			}
		}
		total["container removed"] += r.m.containersRemoved
		total["semaphore permits granted"] += r.m.permits
		total["semaphore permits held back"] += r.m.delayedPermits
	})
	t.Logf("%d sequences; entries applied by type and outcome (errN: error kind N): %v", sequences, total)
	// The sequences must exercise what they claim to.
	for _, k := range []string{"Open", "Acquire", "CloseSession", "SetContents", "SetACL", "CancelWait", "Release", "Delete", "retry", "Grant", "BreakLock", "ResumeSession", "stale incarnation",
		"sequential", "sequential skip", "directory with a counter", "ExpireTTL", "OpenLifetime",
		"container removed", "OpenSemaphore", "semaphore permits granted"} {
		if total[k] == 0 && sequences >= 100 {
			t.Errorf("no %s succeeded in any sequence", k)
		}
	}
}
