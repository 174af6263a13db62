package fsm

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"lockcell/audit"
)

// The state machine's entry point: the FSM, Apply, request
// de-duplication and the dispatch of each command type to its family
// (sessions.go, files.go, locks.go, acl.go, members.go).

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
	// lastIndex is the command index of the last command applied: the
	// Raft index of its entry, or past it once batches have run
	// (batch.go). Ids and generations are command indexes.
	lastIndex uint64
	// lastPermitGen is the generation of the latest semaphore permit
	// granted (semaphore.go), so a second permit granted by the same
	// command takes a fresh command index. Only compared within one
	// command, so it is neither snapshotted nor restored.
	lastPermitGen uint64
	cellKey       []byte
	observer      Observer
	// auditor receives the audit trail's records (audit.go), or is nil;
	// auditRecord is the one record being handed to it.
	auditor     Auditor
	auditRecord audit.Record
	// watch indexes handles that asked for events by name (watch.go).
	watch map[string]*watchSet
	// hist is the recent changes to nodes, for subtree watches
	// (history.go; derived, emptied on restore).
	hist history
	// usage counts what the quotas cap (quota.go; derived, rebuilt on
	// restore).
	usage usage
	// refusals counts quota refusals by reason (QuotaStats): not state,
	// so outside the hash and the snapshot.
	refusals [quotaReasons]atomic.Uint64
	// members is the member table (members.go).
	members memberTable

	// principalHandles counts open handles per principal of their
	// sessions (derived, as principals), for the master's handle caps.
	principalHandles map[string]int
	// ephemerals indexes the ephemeral nodes by the session that made
	// them (derived, rebuilt on restore), so that ending a session costs
	// the apply goroutine what the session owns, not a pass over every
	// node: a client making and dropping sessions must not make every
	// replica walk the namespace.
	ephemerals map[uint64]map[string]bool
	// ttls indexes the TTL nodes by deadline (ttl.go; derived, rebuilt
	// on restore).
	ttls ttlIndex
	// backupDir is where Backup writes its temporary files (nil: the
	// system's temporary directory).
	backupDir atomic.Pointer[string]

	changes []Change // scratch, used under mu by apply

	// aclParsed caches parsed ACL files by name. Readers fill it under
	// mu.RLock, so it has its own lock.
	aclMu     sync.Mutex
	aclParsed map[string]parsedACL
}

// NewFSM returns the state machine of an empty cell: just the root
// directory /ls/<cell>.
func NewFSM(cell string, logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.Default()
	}
	f := &FSM{log: logger, cell: cell, hist: newHistory()}
	f.reset()
	return f
}

// reset empties the state to a cell with just its root directory.
func (f *FSM) reset() {
	root := "/ls/" + f.cell
	f.epoch = 0
	f.nodes = map[string]*Node{root: {Path: root, Dir: true, children: map[string]bool{}}}
	f.sessions = map[uint64]*Session{}
	f.principals = map[string]int{}
	f.principalHandles = map[string]int{}
	f.ephemerals = map[uint64]map[string]bool{}
	f.ttls = ttlIndex{}
	f.usage = newUsage()
	f.handles = map[uint64]*Handle{}
	f.watch = map[string]*watchSet{}
}

// Root returns the name of the cell's root directory.
func (f *FSM) Root() string { return "/ls/" + f.cell }

// SetObserver installs the observer of applied changes (nil removes it).
func (f *FSM) SetObserver(o Observer) {
	f.mu.Lock()
	f.observer = o
	f.mu.Unlock()
}

// ApplyEntry applies one committed log entry: its index and the command
// bytes (EncodeCommand's or EncodeBatch's). It returns a
// *Result, or a []*Result for a batch (one per command, in order); state
// errors are values inside them, never panics, except for an entry this
// version cannot decode, where stopping beats diverging. Entries must come
// in log order, each once: the state after them is a function of their
// bytes alone, which is what keeps every replica's state the same.
func (f *FSM) ApplyEntry(index uint64, data []byte) any {
	cmd, err := DecodeCommand(data)
	if err != nil {
		panic(fmt.Sprintf("lockcell replica: cannot apply entry %d: %v", index, err))
	}
	f.mu.Lock()
	f.changes = f.changes[:0]
	f.hist.begin(index)
	var res any
	if b, ok := cmd.Payload.(*BatchArgs); ok {
		res = f.applyBatch(index, b) // each command's changes, in order
	} else {
		res = f.applyDedup(f.nextIndex(index), cmd)
	}
	f.applied = index
	obs := f.observer
	var changes []Change
	if obs != nil && len(f.changes) > 0 {
		changes = append([]Change(nil), f.changes...)
	}
	f.mu.Unlock()
	if changes != nil {
		obs(index, changes)
	}
	return res
}

// maxDedupPerSession bounds the request de-duplication table of one
// session. A well-behaved client acknowledges completed requests long
// before; past the bound the oldest results are forgotten (a retry of one
// then gets KindDuplicate rather than a second application).
const maxDedupPerSession = 4096

// applyDedup applies c once per request id: a retry of a request already
// applied gets the first result back, a request at or below the session's
// acknowledgement is refused as a duplicate, and a new result is kept
// (bounded per session) until the client acknowledges it. Commands with no
// request id (the master's own) always apply.
func (f *FSM) applyDedup(index uint64, c *Command) *Result {
	var subject auditSubject
	if f.auditor != nil {
		subject = f.auditSubjectOf(c)
	}
	r, fresh := f.applyOnce(index, c)
	if fresh && subject.op != "" {
		f.auditApplied(index, c, subject, r)
	}
	return r
}

// applyOnce is applyDedup without the audit record: fresh says the
// result is this application's own, not a retry's first result.
func (f *FSM) applyOnce(index uint64, c *Command) (r *Result, fresh bool) {
	if err := f.staleIncarnation(c); err != nil {
		// Not kept in the de-duplication table: the request id is the
		// old process's, and the new one may use it (resume.go).
		return &Result{Err: err}, true
	}
	if c.Session == 0 || c.Seq == 0 {
		if err := f.checkFence(c); err != nil {
			return &Result{Err: err}, true
		}
		return f.apply(index, c), true
	}
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}, true
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
		return &Result{Err: errf(KindDuplicate, "request %d of session %d already completed", c.Seq, c.Session)}, false
	}
	if r, ok := s.Results[c.Seq]; ok && !bugNoDedup {
		return r, false
	}
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
	return r, true
}

// apply dispatches c to the apply function of its command family. An
// unknown type panics: a replica that cannot apply an entry must stop
// rather than diverge from the others.
func (f *FSM) apply(index uint64, c *Command) *Result {
	switch p := c.Payload.(type) {
	case *EpochArgs:
		f.epoch++
		return &Result{Epoch: f.epoch}
	case *CreateSessionArgs:
		return f.createSession(index, c, p)
	case *CloseSessionArgs:
		return f.closeSession(index, c, p)
	case *OpenArgs:
		return f.open(index, c, p)
	case *CloseArgs:
		return f.closeOwnHandle(index, c, p)
	case *SetContentsArgs:
		return f.setContents(index, c, p)
	case *DeleteArgs:
		return f.delete(index, c, p)
	case *AcquireArgs:
		return f.acquire(index, c, p)
	case *ReleaseArgs:
		return f.release(index, c, p)
	case *CancelWaitArgs:
		return f.cancelWait(index, c, p)
	case *CellKeyArgs:
		return f.setCellKey(p)
	case *GrantArgs:
		return f.grantAfterDelay(index, c, p)
	case *SetACLArgs:
		return f.setACL(index, c, p)
	case *MembersSeedArgs, *MemberPutArgs, *MemberRemoveArgs, *ReadReplicaPutArgs:
		return f.applyMembers(p)
	case *BreakLockArgs:
		return f.breakLock(index, c, p)
	case *NoteArgs:
		return f.applyNote(c, p)
	case *ResumeSessionArgs:
		return f.resumeSession(index, c, p)
	case *ExpireTTLArgs:
		return f.expireTTL(index, c, p)
	case *TxnArgs:
		return f.txn(index, c, p)
	case *AcquireMultiArgs:
		return f.acquireMulti(index, c, p)
	case *ReleaseMultiArgs:
		return f.releaseMulti(index, c, p)
	}
	panic(fmt.Sprintf("lockcell replica: unknown command type %d (payload %T) at index %d", c.Type, c.Payload, index))
}

// setCellKey stores the cell's sequencer key. The first key applied wins,
// so a second master's proposal of its own key changes nothing.
func (f *FSM) setCellKey(p *CellKeyArgs) *Result {
	if len(f.cellKey) == 0 && len(p.Key) >= 16 {
		f.cellKey = append([]byte(nil), p.Key...)
	}
	return &Result{}
}

// note records an effect of the entry being applied for the observer.
func (f *FSM) note(c Change) {
	f.changes = append(f.changes, c)
	f.record(&c) // the change history (history.go), O(1)
}

// ownHandle finds the handle and checks it belongs to the session.
func (f *FSM) ownHandle(session, handle uint64) (*Handle, *Error) {
	h := f.handles[handle]
	if h == nil || h.Session != session {
		return nil, errf(KindHandleInvalid, "handle %d is not open in session %d", handle, session)
	}
	return h, nil
}

// liveHandle is ownHandle plus: the handle's node instance still exists.
func (f *FSM) liveHandle(session, handle uint64) (*Handle, *Node, *Error) {
	h, err := f.ownHandle(session, handle)
	if err != nil {
		return nil, nil, err
	}
	n := f.nodes[h.Path]
	if n == nil || n.Instance != h.Instance {
		return nil, nil, errf(KindHandleInvalid, "%s: the node this handle opened was deleted", h.Path)
	}
	return h, n, nil
}
