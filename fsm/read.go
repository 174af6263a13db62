package fsm

import (
	"slices"
	"sort"

	"lockcell/acl"
)

// View is the replicated state as one Read sees it: the state at one
// applied index. Its accessors take no lock; the read lock is Read's, held
// for the whole function given to it, so several accessors called in one
// Read agree with each other. A View is valid only inside that function:
// keeping it, or using it from another goroutine, is a data race.
type View struct{ f *FSM }

// Read runs fn with a view of the state under one read lock and returns
// fn's error. fn must not block (it holds off every apply) and must not
// call the FSM's own locking methods (a writer waiting between two read
// locks would deadlock it).
func (f *FSM) Read(fn func(View) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fn(View{f})
}

// ReadWith is Read for a function that is handed its state, arg, rather
// than capturing it. A closure called through an interface (the master's
// State) escapes to the heap with everything it captures, an allocation
// or more on every read; a function literal that captures nothing, given
// a pointer the caller already holds on the heap, costs none.
func (f *FSM) ReadWith(arg any, fn func(v View, arg any) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fn(View{f}, arg)
}

// LookupHandle returns the handle and a copy of its node's state, or a
// KindHandleInvalid error when the handle is not open in session or its
// node instance is gone.
func (v View) LookupHandle(session, handle uint64) (HandleView, error) {
	f := v.f
	h, n, err := f.liveHandle(session, handle)
	if err != nil {
		return HandleView{}, err
	}
	return HandleView{Handle: *h, Contents: n.Contents, Stat: n.stat()}, nil
}

// ReadDirPage returns the page q selects of the listing of the directory
// the handle names, read under one read lock: the page is the state at one
// applied index. Its cost is O(log n + scanned children): the names are
// kept sorted on the node (dirIndex), so a listing of n children in pages
// costs O(n + pages * log n) in all, not a sort per page. Hidden children are
// skipped after the cursor is placed, so they never end a page early and
// the cursor is always a name the caller was shown.
func (v View) ReadDirPage(session, handle uint64, q DirQuery) (DirPage, error) {
	f := v.f
	_, n, err := f.liveHandle(session, handle)
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
func (v View) ChildVisible(session uint64, a acl.NodeACL, admin string) bool {
	f := v.f
	s := f.sessions[session]
	if s == nil || s.Principal == "" {
		return true
	}
	pol := policyOf(s.Principal, s.Principal == admin)
	src := aclSource{f}
	return acl.Check(src, s.Principal, a, acl.Read, pol) == nil || acl.Check(src, s.Principal, a, acl.Write, pol) == nil
}

// LockWait reports whether the handle holds the lock or still waits with
// request id seq, and the node's lock generation.
func (v View) LockWait(session, handle, seq uint64) (WaitState, uint64, error) {
	f := v.f
	h, n, err := f.liveHandle(session, handle)
	if err != nil {
		return WaitGone, 0, err
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			return WaitGranted, holderGen(n, ho), nil
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
func (v View) SessionExists(id uint64) bool {
	f := v.f
	return f.sessions[id] != nil
}

// SessionIDs lists every live session, in id order.
func (v View) SessionIDs() []uint64 {
	f := v.f
	return sortedKeys(f.sessions)
}

// LockDelays lists the nodes whose lock is free but under lock-delay with
// waiters queued, with the delay's end (Unix ns): a new master re-arms a
// hand-off for each.
func (v View) LockDelays() map[string]int64 {
	f := v.f
	out := map[string]int64{}
	for p, n := range f.nodes {
		if n.LockMode == LockFree && len(n.Waiters) > 0 && n.LockDelayUntil > 0 {
			out[p] = n.LockDelayUntil
		}
		if n.SemLimit != 0 && len(n.Waiters) > 0 && len(n.SemDelays) > 0 {
			out[p] = slices.Min(n.SemDelays) // a passed end is re-armed at once and its Grant prunes it
		}
	}
	return out
}

// Counts returns the epoch, the number of live sessions and of nodes, and
// the index of the last applied entry.
func (v View) Counts() (epoch uint64, sessions, nodes int, applied uint64) {
	f := v.f
	return f.epoch, len(f.sessions), len(f.nodes), f.applied
}

// CellKey returns the cell's secret sequencer key (nil until the first
// master stored one).
func (v View) CellKey() []byte {
	f := v.f
	return f.cellKey
}

// FenceValid reports whether the lock fc names is held at fc's generation
// in fc's mode ("" reason) or why not. A LockPermit fence is valid while a
// holder of the semaphore holds that generation (permitfence.go).
func (v View) FenceValid(fc *Fence) (bool, string) {
	f := v.f
	r := readFenceReason(fc, f.nodes[fc.Path])
	return r == "", r
}

// HeldLock returns the lock the handle holds as its sequencer names it:
// its path, mode (LockPermit for a semaphore's holder) and generation; an
// error of KindNotHeld when it holds none. Its Replicated form is what a
// command may carry.
func (v View) HeldLock(session, handle uint64) (Fence, error) {
	f := v.f
	h, n, err := f.liveHandle(session, handle)
	if err != nil {
		return Fence{}, err
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			return Fence{Path: n.Path, Mode: sequencerMode(n, n.LockMode), Generation: holderGen(n, ho)}, nil
		}
	}
	return Fence{}, errf(KindNotHeld, "%s: this handle does not hold the lock", n.Path)
}

// AffectedPaths returns every name whose contents, stat, listing or
// existence applying cmd now could change: a superset, computed before the
// command is proposed, so the master can invalidate caches of those names
// first. The answer is sorted and free of duplicates.
func (v View) AffectedPaths(cmd *Command) []string { return v.AppendAffectedPaths(nil, cmd) }

// AppendAffectedPaths is AffectedPaths appending to dst (sorted after
// dst's own elements), so that a caller that reuses its slice allocates
// nothing for the names.
func (v View) AppendAffectedPaths(dst []string, cmd *Command) []string {
	f := v.f
	set := map[string]bool{}
	addNode := func(p string) {
		// A node, the listing of its parent, and, where removing it could
		// empty an ephemeral or container parent, that parent's parent,
		// and so on.
		set[p] = true
		for {
			parent := parentOf(p)
			if parent == "" {
				return
			}
			set[parent] = true
			n := f.nodes[parent]
			if n == nil || !n.Ephemeral && !n.Container {
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
	switch p := cmd.Payload.(type) {
	case *OpenArgs:
		if p.Flags&(FlagSequential|FlagCreate) == FlagSequential|FlagCreate {
			// The name it makes is known only once applied, and was
			// missing (no one caches it but as an absence, which is
			// cached under the parent): the parent's listing changes.
			// It never makes an ACL file (openSequential).
			if parent := parentOf(p.Path); parent != "" {
				set[parent] = true
			}
		} else if f.nodes[p.Path] == nil && p.Flags&FlagCreate != 0 {
			addNode(p.Path)
			f.addACLDependents(set, p.Path)
		}
	case *SetContentsArgs, *AcquireArgs, *ReleaseArgs, *CancelWaitArgs, *SetACLArgs:
		if h := f.handles[cmd.HandleOf()]; h != nil {
			set[h.Path] = true
			switch p.(type) {
			case *SetContentsArgs:
				f.addACLDependents(set, h.Path)
			case *SetACLArgs:
				// The parent's listing shows the node only to whom
				// its ACLs let read or write it.
				if parent := parentOf(h.Path); parent != "" {
					set[parent] = true
				}
			}
		}
	case *DeleteArgs:
		handlePath(p.Handle)
		if h := f.handles[p.Handle]; h != nil {
			f.addACLDependents(set, h.Path)
		}
	case *CloseArgs:
		if h := f.handles[p.Handle]; h != nil {
			f.addCloseAffects(set, h, addNode)
		}
	case *ExpireTTLArgs:
		// Deleted as by a Delete (ttl.go), when it applies.
		if n := f.nodes[p.Path]; n != nil && n.Instance == p.Instance {
			addNode(p.Path)
			f.addACLDependents(set, p.Path)
		}
	case *GrantArgs:
		set[p.Path] = true
	case *AcquireMultiArgs:
		for _, id := range p.Handles {
			if h := f.handles[id]; h != nil {
				set[h.Path] = true
			}
		}
	case *ReleaseMultiArgs:
		for _, id := range p.Handles {
			if h := f.handles[id]; h != nil {
				set[h.Path] = true
			}
		}
	case *TxnArgs:
		f.txnAffectedPaths(set, p, addNode)
	case *BreakLockArgs:
		set[p.Path] = true
	case *ResumeSessionArgs:
		// Its held locks take a new generation and its waits leave
		// their queues: each node's stat changes.
		if s := f.sessions[cmd.Session]; s != nil {
			for id := range s.handles {
				if h := f.handles[id]; h != nil {
					set[h.Path] = true
				}
			}
		}
	case *CloseSessionArgs:
		if s := f.sessions[cmd.Session]; s != nil {
			for id := range s.handles {
				if h := f.handles[id]; h != nil {
					f.addCloseAffects(set, h, addNode)
				}
			}
			for _, n := range f.ownedEphemerals(s.ID) {
				addNode(n.Path)
			}
		}
	}
	switch p := cmd.Payload.(type) {
	case *CancelWaitArgs:
		// A group's cancel leaves, or releases, every lock of the group.
		if h := f.handles[p.Handle]; h != nil {
			if s := f.sessions[h.Session]; s != nil {
				for id := range s.handles {
					if o := f.handles[id]; o != nil {
						set[o.Path] = true
					}
				}
			}
		}
	}
	switch cmd.Payload.(type) {
	case *AcquireArgs, *ReleaseArgs, *CancelWaitArgs, *CloseArgs, *DeleteArgs, *GrantArgs, *BreakLockArgs,
		*ExpireTTLArgs, *CloseSessionArgs, *ResumeSessionArgs, *AcquireMultiArgs, *ReleaseMultiArgs, *TxnArgs:
		f.addGroupPaths(set)
	}
	out := slices.Grow(dst, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out[len(dst):])
	return out
}

// addCloseAffects adds to set what closing handle h can change as a
// cache holds it (closeHandle): its node's stat when the handle holds the
// lock or a permit, or the node has waiters (a close grants what the
// queue then allows, whoever's handle it is), and the parent's listing
// too when the node is ephemeral (its last close deletes it). A close of
// any other handle changes nothing a client caches (the count of open
// handles is in no stat), and neither does a close of a handle whose node
// is gone or replaced by a new instance. Invalidating the node (and its
// parent) on every close made each client's close, or session end, drop
// every other client's cached copy of a popular file, and made a
// client's own background close of an idle handle drop the absence it
// had just cached in the parent.
func (f *FSM) addCloseAffects(set map[string]bool, h *Handle, addNode func(string)) {
	n := f.nodes[h.Path]
	switch {
	case n == nil || n.Instance != h.Instance:
	case n.Ephemeral:
		addNode(h.Path)
	case len(n.Waiters) > 0 || slices.ContainsFunc(n.Holders, func(ho Holder) bool { return ho.Handle == h.ID }):
		set[h.Path] = true
	}
}

// addGroupPaths adds to set the nodes of every multi-lock group waiting
// on a node in it, twice over: a command that changes a node's lock can
// drop such a group from all its queues or grant it on all its locks
// (semaphore.go), and a group dropped from a queue can let the next
// group there be granted on its own locks. Nothing further follows from
// a grant, so two rounds cover every node that can change. Without
// groups it adds nothing.
func (f *FSM) addGroupPaths(set map[string]bool) {
	for range 2 {
		var more []string
		for p := range set {
			n := f.nodes[p]
			if n == nil {
				continue
			}
			for _, w := range n.Waiters {
				for _, id := range w.Group {
					if h := f.handles[id]; h != nil && !set[h.Path] {
						more = append(more, h.Path)
					}
				}
			}
		}
		if len(more) == 0 {
			return
		}
		for _, p := range more {
			set[p] = true
		}
	}
}

// HandlePath returns the name a live handle of session names.
func (v View) HandlePath(session, handle uint64) (string, bool) {
	f := v.f
	h := f.handles[handle]
	if h == nil || h.Session != session {
		return "", false
	}
	return h.Path, true
}

// Exists reports whether a node of that name exists now.
func (v View) Exists(name string) bool {
	f := v.f
	return f.nodes[name] != nil
}

// Sessions lists every live session with its handle count and held locks.
func (v View) Sessions() []SessionView {
	f := v.f
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

// Allowed reports whether principal (admin: it is the cell's admin) holds
// p on the node at path, with the permission error a denied caller gets.
// It is for calls on a handle, whose caller already knows the node exists;
// Open instead reports a node the caller may neither read nor write as
// absent (permitOpen), so ACLs do not leak which names exist.
func (v View) Allowed(path, principal string, admin bool, p acl.Perm) *Error {
	f := v.f
	n := f.nodes[path]
	if n == nil {
		return errf(KindNotFound, "%s does not exist", path)
	}
	return f.check(principal, admin, n, p)
}

// FenceValidFor is FenceValid as principal (admin: it is the cell's
// admin) may know it: a lock the principal may not read answers as a lock
// whose node is gone.
func (v View) FenceValidFor(fc *Fence, principal string, admin bool) (bool, string) {
	f := v.f
	r := readFenceReason(fc, f.fenceNode(fc, principal, admin))
	return r == "", r
}

// SessionPrincipal returns the principal that created a live session.
func (v View) SessionPrincipal(session uint64) (string, bool) {
	f := v.f
	s := f.sessions[session]
	if s == nil {
		return "", false
	}
	return s.Principal, true
}

// PrincipalSessions counts the live sessions of principal.
func (v View) PrincipalSessions(principal string) int {
	f := v.f
	return f.principals[principal]
}

// PrincipalHandles counts the open handles of principal's sessions.
func (v View) PrincipalHandles(principal string) int {
	return v.f.principalHandles[principal]
}

// Handles counts the open handles in the cell.
func (v View) Handles() int { return len(v.f.handles) }

// SessionHandles counts the open handles of a session.
func (v View) SessionHandles(session uint64) int {
	f := v.f
	if s := f.sessions[session]; s != nil {
		return len(s.handles)
	}
	return 0
}

// CanRead reports whether the principal of session may read the node at
// path now (admin names the cell's admin principal). A missing node or
// session reads as allowed: there is nothing left to protect, and a
// handle-invalid event must still reach the handle's owner.
func (v View) CanRead(session uint64, path, admin string) bool {
	f := v.f
	s, n := f.sessions[session], f.nodes[path]
	if s == nil || n == nil || s.Principal == "" {
		return true
	}
	return f.check(s.Principal, s.Principal == admin, n, acl.Read) == nil
}

// MemberTable returns the member table in id order and the cell's configured
// size. Both are empty until the first master of this version seeds them
// (see master's membership), and in a cell restored from a backup until
// its first master seeds them from its own bootstrap peers: a backup's
// table names another cell's machines, so restore does not carry it.
func (v View) MemberTable() (members []MemberAddrs, configuredSize int) {
	f := v.f
	return f.members.sorted(), f.members.size
}
