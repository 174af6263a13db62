package replica

import (
	"sort"

	"lockcell/acl"
)

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

// ReadDir lists every child of the directory the handle names, in name
// order, as the admin sees them (no child is left out). The master lists
// through ReadDirPage, which pages and hides what a caller may not see.
func (f *FSM) ReadDir(session, handle uint64) ([]DirEntry, error) {
	var out []DirEntry
	q := DirQuery{Limit: 1 << 16}
	for {
		p, err := f.ReadDirPage(session, handle, q)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Entries...)
		if !p.More {
			return out, nil
		}
		q.After = p.Entries[len(p.Entries)-1].Name
	}
}

// DirQuery selects one page of a directory's listing.
type DirQuery struct {
	// After: only children whose names sort strictly after it ("" lists
	// from the start). It need not name a child.
	After string
	// Limit bounds the page's entries (at least 1 is used).
	Limit int
	// MaxBytes, when positive, ends the page before the sum of
	// len(name)+EntryOverhead over its entries would exceed it; the first
	// entry is always taken, so a page with More is never empty.
	MaxBytes      int
	EntryOverhead int
	// Principal, when set and not Admin, is whose view the page is: a
	// child that principal may neither read nor write is left out, as
	// Open reports it absent.
	Principal string
	Admin     bool
}

// DirPage is one page of a listing: entries in name order, and whether
// further children (visible to the query's principal) follow the last.
type DirPage struct {
	Entries []DirEntry
	More    bool
}

// ReadDirPage returns the page q selects of the listing of the directory
// the handle names, read under one read lock: the page is the state at one
// applied index. Its cost is O(log n + scanned children): the names are
// kept sorted on the node (dirIndex), so a listing of n children in pages
// costs O(n + pages * log n) in all, not a sort per page. Hidden children are
// skipped after the cursor is placed, so they never end a page early and
// the cursor is always a name the caller was shown.
func (f *FSM) ReadDirPage(session, handle uint64, q DirQuery) (DirPage, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, n, err := f.liveHandle(&Command{Session: session, Handle: handle})
	if err != nil {
		return DirPage{}, err
	}
	if !n.Dir {
		return DirPage{}, errf(KindNotDir, "%s is a file", n.Path)
	}
	limit := max(q.Limit, 1)
	filter := q.Principal != "" && !q.Admin
	var page DirPage
	used := 0
	// Children mostly share their parent's ACL names, and the decision
	// depends on nothing else, so each distinct ACL is checked once a
	// page (and a run of children with the ACL of the one before costs a
	// comparison): a caller who may see none of a million children pays
	// no ACL check per child (~5 µs and 18 allocations each).
	var decided map[acl.NodeACL]bool
	var last acl.NodeACL
	lastVisible, haveLast := false, false
	visible := func(child *Node) bool {
		k := nodeACL(child)
		if haveLast && k == last {
			return lastVisible
		}
		v, ok := decided[k]
		if !ok {
			v = !f.hidden(child, q.Principal, q.Admin)
			if decided == nil {
				decided = map[acl.NodeACL]bool{}
			}
			if len(decided) < 1024 {
				decided[k] = v
			}
		}
		last, lastVisible, haveLast = k, v, true
		return v
	}
	for c, i := n.kids.after(q.After); c < len(n.kids.chunks); c, i = c+1, 0 {
		for _, k := range n.kids.chunks[c][i:] {
			if filter && !visible(k.node) {
				continue
			}
			size := len(k.name) + q.EntryOverhead
			if len(page.Entries) == limit || q.MaxBytes > 0 && len(page.Entries) > 0 && used+size > q.MaxBytes {
				page.More = true
				return page, nil
			}
			if page.Entries == nil {
				page.Entries = make([]DirEntry, 0, min(limit, n.kids.Len()))
			}
			page.Entries = append(page.Entries, DirEntry{Name: k.name, Dir: k.dir})
			used += size
		}
	}
	return page, nil
}

// ChildVisible reports whether the principal of session (admin: the cell's
// admin principal) may see a child whose ACL is a, that is read or write
// it: listings and child events name only such children. A missing
// session or a command of the master's own sees everything.
func (f *FSM) ChildVisible(session uint64, a acl.NodeACL, admin string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.sessions[session]
	if s == nil || s.Principal == "" {
		return true
	}
	pol := policyOf(s.Principal, s.Principal == admin)
	src := aclSource{f}
	return acl.Check(src, s.Principal, a, acl.Read, pol) == nil || acl.Check(src, s.Principal, a, acl.Write, pol) == nil
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
			f.addACLDependents(set, cmd.Path)
		}
	case CmdSetContents, CmdAcquire, CmdRelease, CmdCancelWait, CmdSetACL:
		if h := f.handles[cmd.Handle]; h != nil {
			set[h.Path] = true
			switch cmd.Type {
			case CmdSetContents:
				f.addACLDependents(set, h.Path)
			case CmdSetACL:
				// The parent's listing shows the node only to whom
				// its ACLs let read or write it.
				if parent := parentOf(h.Path); parent != "" {
					set[parent] = true
				}
			}
		}
	case CmdDelete, CmdClose:
		handlePath(cmd.Handle)
		if h := f.handles[cmd.Handle]; h != nil && cmd.Type == CmdDelete {
			f.addACLDependents(set, h.Path)
		}
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

// addACLDependents adds what creating, rewriting or deleting the file at
// path changes if it is an ACL file: every node whose read ACL names it
// (a cacher may lose the right to read it) and the parent of every node
// whose read or write ACL names it (the parent's listing shows a child
// only to whom may read or write it, so children appear and vanish).
func (f *FSM) addACLDependents(set map[string]bool, path string) {
	if !f.isACLFile(path) {
		return
	}
	for _, p := range f.namingACLLocked(path) {
		set[p] = true
	}
	name := path[len(f.aclDir())+1:]
	for p, n := range f.nodes {
		if n.ReadACL == name || n.WriteACL == name {
			if parent := parentOf(p); parent != "" {
				set[parent] = true
			}
		}
	}
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
