package replica

import "sort"

// HandleView is what a read needs to know about an open handle and its
// node, copied out under the FSM's read lock. Contents alias the stored
// slice, which is never mutated in place.
type HandleView struct {
	Handle   Handle
	Contents []byte
	Stat     Stat
}

// DirEntry is one child in a directory listing.
type DirEntry struct {
	Name string
	Dir  bool
}

// LookupHandle returns the handle and a copy of its node's state, or a
// KindHandleInvalid error when the handle is not open in session or its
// node instance is gone.
func (f *FSM) LookupHandle(session, handle uint64) (HandleView, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, n, err := f.liveHandle(&Command{Session: session, Handle: handle})
	if err != nil {
		return HandleView{}, err
	}
	return HandleView{Handle: *h, Contents: n.Contents, Stat: n.stat()}, nil
}

// ReadDir lists the children of the directory the handle names, in name
// order.
func (f *FSM) ReadDir(session, handle uint64) ([]DirEntry, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, n, err := f.liveHandle(&Command{Session: session, Handle: handle})
	if err != nil {
		return nil, err
	}
	if !n.Dir {
		return nil, errf(KindNotDir, "%s is a file", n.Path)
	}
	out := make([]DirEntry, 0, len(n.children))
	for name, dir := range n.children {
		out = append(out, DirEntry{Name: name, Dir: dir})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// WaitState says where a blocking Acquire (handle, wait seq) stands.
type WaitState uint8

// Where a blocking acquire stands.
const (
	WaitGone    WaitState = iota // neither queued nor holding by that wait
	WaitQueued                   // still in the queue
	WaitGranted                  // holds the lock (by that wait or otherwise)
)

// LockWait reports whether the handle holds the lock or still waits with
// request id seq, and the node's lock generation.
func (f *FSM) LockWait(session, handle, seq uint64) (WaitState, uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, n, err := f.liveHandle(&Command{Session: session, Handle: handle})
	if err != nil {
		return WaitGone, 0, err
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			return WaitGranted, n.LockGen, nil
		}
	}
	for _, w := range n.Waiters {
		if w.Handle == h.ID && w.Seq == seq {
			return WaitQueued, n.LockGen, nil
		}
	}
	return WaitGone, n.LockGen, nil
}

// SessionExists reports whether the session is live in the replicated state.
func (f *FSM) SessionExists(id uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.sessions[id] != nil
}

// SessionIDs lists every live session, in id order.
func (f *FSM) SessionIDs() []uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedKeys(f.sessions)
}

// LockDelays lists the nodes whose lock is free but under lock-delay with
// waiters queued, with the delay's end (Unix ns): a new master re-arms a
// hand-off for each.
func (f *FSM) LockDelays() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string]int64{}
	for p, n := range f.nodes {
		if n.LockMode == LockFree && len(n.Waiters) > 0 && n.LockDelayUntil > 0 {
			out[p] = n.LockDelayUntil
		}
	}
	return out
}

// Counts returns the epoch, the number of live sessions and of nodes, and
// the index of the last applied entry.
func (f *FSM) Counts() (epoch uint64, sessions, nodes int, applied uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.epoch, len(f.sessions), len(f.nodes), f.applied
}

// CellKey returns the cell's secret sequencer key (nil until the first
// master stored one).
func (f *FSM) CellKey() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cellKey
}

// FenceValid reports whether the lock fc names is held at fc's generation
// in fc's mode ("" reason) or why not.
func (f *FSM) FenceValid(fc *Fence) (bool, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := f.fenceReason(fc)
	return r == "", r
}

// HeldLock returns the lock the handle holds: its path, mode and
// generation; an error of KindNotHeld when it holds none.
func (f *FSM) HeldLock(session, handle uint64) (Fence, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, n, err := f.liveHandle(&Command{Session: session, Handle: handle})
	if err != nil {
		return Fence{}, err
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			return Fence{Path: n.Path, Mode: n.LockMode, Generation: n.LockGen}, nil
		}
	}
	return Fence{}, errf(KindNotHeld, "%s: this handle does not hold the lock", n.Path)
}

// AffectedPaths returns every name whose contents, stat, listing or
// existence applying cmd now could change: a superset, computed before the
// command is proposed, so the master can invalidate caches of those names
// first (SPEC 6). The answer is sorted and free of duplicates.
func (f *FSM) AffectedPaths(cmd *Command) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	set := map[string]bool{}
	addNode := func(p string) {
		// A node, the listing of its parent, and, where removing it could
		// empty an ephemeral parent, that parent's parent, and so on.
		set[p] = true
		for {
			parent := parentOf(p)
			if parent == "" {
				return
			}
			set[parent] = true
			n := f.nodes[parent]
			if n == nil || !n.Ephemeral {
				return
			}
			p = parent
		}
	}
	handlePath := func(id uint64) {
		if h := f.handles[id]; h != nil {
			addNode(h.Path)
		}
	}
	switch cmd.Type {
	case CmdOpen:
		if f.nodes[cmd.Path] == nil && cmd.Flags&FlagCreate != 0 {
			addNode(cmd.Path)
		}
	case CmdSetContents, CmdAcquire, CmdRelease, CmdCancelWait, CmdSetACL:
		if h := f.handles[cmd.Handle]; h != nil {
			set[h.Path] = true
			if cmd.Type == CmdSetContents {
				// Rewriting an ACL file can take away a cacher's right
				// to read every node that names it.
				for _, p := range f.namingACLLocked(h.Path) {
					set[p] = true
				}
			}
		}
	case CmdDelete, CmdClose:
		handlePath(cmd.Handle)
	case CmdGrant:
		set[cmd.Path] = true
	case CmdCloseSession:
		if s := f.sessions[cmd.Session]; s != nil {
			for id := range s.handles {
				handlePath(id)
			}
			for p, n := range f.nodes {
				if n.Ephemeral && n.Owner == s.ID {
					addNode(p)
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// HandlePath returns the name a live handle of session names.
func (f *FSM) HandlePath(session, handle uint64) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := f.handles[handle]
	if h == nil || h.Session != session {
		return "", false
	}
	return h.Path, true
}

// Watcher is a handle that asked for events on a name.
type Watcher struct {
	Session, Handle uint64
	Mask            uint32
}

// Watchers lists the handles open on name whose event mask shares a bit
// with mask, in handle order.
func (f *FSM) Watchers(name string, mask uint32) []Watcher {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Watcher
	n := f.nodes[name]
	for id, m := range f.watch[name] {
		if m&mask != 0 {
			// Handles on an earlier incarnation of the name hear nothing
			// of the new one.
			if h := f.handles[id]; h != nil && (n == nil || n.Instance == h.Instance) {
				out = append(out, Watcher{Session: h.Session, Handle: id, Mask: m})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handle < out[j].Handle })
	return out
}

// Exists reports whether a node of that name exists now.
func (f *FSM) Exists(name string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nodes[name] != nil
}

// SessionView describes a live session for operators.
type SessionView struct {
	ID        uint64
	Client    string
	Principal string
	Created   int64
	Handles   int
	Locks     []string // names whose lock the session holds, sorted
}

// Sessions lists every live session with its handle count and held locks.
func (f *FSM) Sessions() []SessionView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	locks := map[uint64][]string{}
	for p, n := range f.nodes {
		for _, ho := range n.Holders {
			locks[ho.Session] = append(locks[ho.Session], p)
		}
	}
	out := make([]SessionView, 0, len(f.sessions))
	for _, id := range sortedKeys(f.sessions) {
		s := f.sessions[id]
		l := locks[id]
		sort.Strings(l)
		out = append(out, SessionView{ID: id, Client: s.Client, Principal: s.Principal, Created: s.Created, Handles: len(s.handles), Locks: l})
	}
	return out
}
