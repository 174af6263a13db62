package fsm

import (
	"lockcell/acl"
)

// Applying handle and file commands: open (and create), contents, delete,
// close, and what a closed handle or a removed node takes with it.

// open opens a handle with the command's index as its id, creating the node
// (and taking its parent's ACL names) when the flags ask for it. A name
// the caller may not read answers as a missing one.
func (f *FSM) open(index uint64, c *Command, p *OpenArgs) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	if err := checkLifetime(p); err != nil {
		return &Result{Err: err}
	}
	if err := checkSemaphore(p); err != nil {
		return &Result{Err: err}
	}
	if p.TTL != 0 && f.isACLFile(p.Path) {
		// An expired ACL file would deny every node naming it.
		return &Result{Err: errf(KindBadRequest, "%s: ACL files take no TTL", p.Path)}
	}
	if p.Flags&FlagSequential != 0 {
		return f.openSequential(index, c, s, p)
	}
	n := f.nodes[p.Path]
	if n != nil && f.hiddenFrom(c, n) {
		// Answer as for a missing name, up to the one point where that
		// cannot be done: a create the caller may make cannot make a
		// taken name (see openHidden).
		return &Result{Err: f.openHidden(c, p)}
	}
	created := false
	if n == nil {
		if p.Flags&FlagCreate == 0 {
			return &Result{Err: errf(KindNotFound, "%s does not exist", p.Path)}
		}
		parent, err := f.checkCreate(c, p)
		if err != nil {
			return &Result{Err: err}
		}
		n = f.createNode(index, c, p, parent, p.Path)
		created = true
	} else if err := f.permitOpen(c, p, n); err != nil {
		// Not hidden (checked above): the caller may read or write n.
		return &Result{Err: err}
	} else if p.Flags&FlagCreate != 0 {
		if p.Flags&FlagExcl != 0 {
			return &Result{Err: errf(KindExists, "%s already exists", p.Path)}
		}
		if want := p.Flags&FlagDirectory != 0; want != n.Dir {
			return &Result{Err: errf(KindExists, "%s already exists as a %s", p.Path, kindName(n.Dir))}
		}
		if p.SemLimit != 0 && p.SemLimit != n.SemLimit {
			return &Result{Err: errf(KindExists, "%s already exists as %s, not a semaphore of %d permits", p.Path, semName(n.SemLimit), p.SemLimit)}
		}
	} else if p.Flags&FlagDirectory != 0 && !n.Dir {
		return &Result{Err: errf(KindNotDir, "%s is a file", p.Path)}
	}
	f.openHandle(index, c, s, p, n)
	return &Result{Handle: index, Created: created, Stat: n.stat()}
}

// createNode makes the node name (a missing name whose create passed
// checkCreate, below parent) as p asks, taking parent's ACL names.
func (f *FSM) createNode(index uint64, c *Command, p *OpenArgs, parent *Node, name string) *Node {
	dir := p.Flags&FlagDirectory != 0
	n := &Node{
		Path: name, Dir: dir, Ephemeral: p.Flags&FlagEphemeral != 0,
		Contents: p.Contents, Instance: index, ContentGen: index, ACLGen: index,
		Checksum: checksum(p.Contents), CTime: c.Time, MTime: c.Time,
		ReadACL: parent.ReadACL, WriteACL: parent.WriteACL, ChangeACL: parent.ChangeACL,
		Creator: c.Principal, TTL: p.TTL, Container: p.Flags&FlagContainer != 0, SemLimit: p.SemLimit,
	}
	f.ttls.track(n)
	if n.Ephemeral {
		n.Owner = c.Session
		f.ownEphemeral(n)
	}
	if dir {
		n.children = map[string]bool{}
	}
	f.nodes[name] = n
	f.usage.add(n)
	parent.children[baseOf(name)] = dir
	parent.addKid(baseOf(name), n)
	f.note(Change{Kind: ChangeNode, Path: name})
	f.note(Change{Kind: ChangeNode, Path: parent.Path})
	f.note(Change{Kind: ChangeChildAdded, Path: parent.Path, Child: baseOf(name), ChildACL: nodeACL(n)})
	return n
}

// openHandle opens the handle of id index in session s on n, which p
// opened (or created).
func (f *FSM) openHandle(index uint64, c *Command, s *Session, p *OpenArgs, n *Node) {
	h := &Handle{ID: index, Session: c.Session, Path: n.Path, Instance: n.Instance,
		Flags: p.Flags, LockDelay: p.LockDelay, EventMask: p.EventMask}
	f.handles[index] = h
	s.handles[index] = true
	f.principalHandles[s.Principal]++
	f.addWatch(h)
	n.openHandles++
}

// checkCreate makes the checks a create of the missing name p.Path must
// pass, and returns the parent directory. A parent the caller may not see
// answers as a missing one, so what lies below a hidden name reads as
// below a missing name. openHidden relies on every answer here depending
// on nothing but the parent and the command.
func (f *FSM) checkCreate(c *Command, p *OpenArgs) (*Node, *Error) {
	parentPath := parentOf(p.Path)
	parent := f.nodes[parentPath]
	if parent == nil || f.hiddenFrom(c, parent) {
		return nil, errf(KindNotFound, "%s: parent directory %s does not exist", p.Path, parentPath)
	}
	if !parent.Dir {
		return nil, errf(KindNotDir, "%s: parent %s is a file", p.Path, parentPath)
	}
	if err := f.permit(c, parent, acl.Write); err != nil {
		return nil, err
	}
	if err := f.checkACLContents(p.Path, p.Contents); err != nil {
		return nil, err
	}
	if p.Flags&FlagDirectory != 0 && len(p.Contents) > 0 {
		return nil, errf(KindBadRequest, "%s: a directory has no contents", p.Path)
	}
	if err := f.checkQuota(c, p.Quota, p.Path, c.Principal, 1, int64(len(p.Contents))); err != nil {
		return nil, err
	}
	return parent, nil
}

// setContents replaces a file's contents through a handle opened for
// writing, if the content generation matches when the command is
// conditional; the new generation is the command's index.
func (f *FSM) setContents(index uint64, c *Command, p *SetContentsArgs) *Result {
	h, n, err := f.liveHandle(c.Session, p.Handle)
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
	if p.HasIfGen && n.ContentGen != p.IfGen {
		return &Result{Err: errf(KindGenerationMismatch, "%s: content generation is %d, not %d", n.Path, n.ContentGen, p.IfGen)}
	}
	if err := f.checkACLContents(n.Path, p.Contents); err != nil {
		return &Result{Err: err}
	}
	grow := int64(len(p.Contents)) - int64(len(n.Contents))
	if err := f.checkQuota(c, p.Quota, p.Path, n.Creator, 0, grow); err != nil {
		return &Result{Err: err}
	}
	old := int64(len(n.Contents))
	n.Contents = p.Contents
	f.usage.resize(n, old)
	n.ContentGen = index
	n.Checksum = checksum(p.Contents)
	n.MTime = c.Time
	f.ttls.track(n) // a write restarts a TTL node's TTL
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.note(Change{Kind: ChangeContents, Path: n.Path})
	return &Result{Stat: n.stat()}
}

// delete removes the handle's node: a file or an empty directory, never
// the cell root.
func (f *FSM) delete(index uint64, c *Command, p *DeleteArgs) *Result {
	h, n, err := f.liveHandle(c.Session, p.Handle)
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

// closeOwnHandle closes a handle of the command's session on the client's request:
// a clean close, so no lock-delay.
func (f *FSM) closeOwnHandle(index uint64, c *Command, p *CloseArgs) *Result {
	h, err := f.ownHandle(c.Session, p.Handle)
	if err != nil {
		return &Result{Err: err}
	}
	f.closeHandle(index, h, false, c.Time)
	return &Result{}
}

// removeNode deletes n (a file or an empty directory): its waiters are told
// their wait ended, its handles go invalid (they name a dead instance), and
// an ephemeral parent left empty with no handle open goes too, as does a
// container parent left empty (ttl.go).
func (f *FSM) removeNode(index uint64, n *Node, now int64) {
	waiters := n.Waiters
	for _, w := range waiters {
		f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: w.Handle, Session: w.Session, Seq: w.Seq})
	}
	n.Waiters, n.Holders, n.SemDelays = nil, nil, nil
	delete(f.nodes, n.Path)
	for _, w := range waiters {
		// A multi-lock wait is granted on all its nodes or none: with
		// this one gone it leaves the others' queues too.
		f.dropGroup(index, w, n.Path, now)
	}
	f.disownEphemeral(n)
	if n.TTL != 0 {
		f.ttls.forget(n.Path)
	}
	f.usage.remove(n)
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.note(Change{Kind: ChangeDeleted, Path: n.Path, Seq: n.Instance, ChildACL: nodeACL(n)})
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
	if len(parent.children) == 0 && (parent.Container || parent.Ephemeral && parent.openHandles == 0) {
		f.removeNode(index, parent, now)
	}
}

// ownEphemeral and disownEphemeral keep f.ephemerals, the ephemeral nodes
// by owning session.
func (f *FSM) ownEphemeral(n *Node) {
	if !n.Ephemeral || n.Owner == 0 {
		return
	}
	owned := f.ephemerals[n.Owner]
	if owned == nil {
		owned = map[string]bool{}
		f.ephemerals[n.Owner] = owned
	}
	owned[n.Path] = true
}

func (f *FSM) disownEphemeral(n *Node) {
	if owned := f.ephemerals[n.Owner]; n.Ephemeral && owned != nil {
		delete(owned, n.Path)
		if len(owned) == 0 {
			delete(f.ephemerals, n.Owner)
		}
	}
}

// ownedEphemerals returns the ephemeral nodes session made that still
// exist.
func (f *FSM) ownedEphemerals(session uint64) []*Node {
	var out []*Node
	for p := range f.ephemerals[session] {
		if n := f.nodes[p]; n != nil && n.Ephemeral && n.Owner == session {
			out = append(out, n)
		}
	}
	return out
}

// closeHandle releases what the handle holds and forgets it. failed says
// the handle's session failed (expired): a lock it held then stays free of
// other holders for the handle's lock-delay.
func (f *FSM) closeHandle(index uint64, h *Handle, failed bool, now int64) {
	delete(f.handles, h.ID)
	f.dropWatch(h)
	if s := f.sessions[h.Session]; s != nil {
		delete(s.handles, h.ID)
		if f.principalHandles[s.Principal]--; f.principalHandles[s.Principal] <= 0 {
			delete(f.principalHandles, s.Principal)
		}
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
			f.dropGroup(index, w, n.Path, now)
			break
		}
	}
	if n.SemLimit != 0 && n.removeHolder(h.ID) {
		if failed && h.LockDelay > 0 && !bugNoLockDelay {
			// The failed holder's permit alone is held back.
			n.SemDelays = append(n.SemDelays, now+h.LockDelay)
			n.LockDelayBy = f.delayCause(h, now)
		}
		f.afterRelease(index, n, now)
	} else if n.removeHolder(h.ID) {
		if failed && h.LockDelay > 0 && len(n.Holders) == 0 && !bugNoLockDelay && now+h.LockDelay > n.LockDelayUntil {
			// A longer delay already running keeps its cause: it is the
			// one that ends last.
			n.LockDelayUntil = now + h.LockDelay
			n.LockDelayBy = f.delayCause(h, now)
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

// delayCause names h's session, about to be expired at now, as the cause
// of the lock-delay its handle imposes. The session's identity is copied:
// the session is gone by the time a read asks.
func (f *FSM) delayCause(h *Handle, now int64) *LockDelayCause {
	c := &LockDelayCause{Session: h.Session, Handle: h.ID, Time: now}
	if s := f.sessions[h.Session]; s != nil {
		c.Principal, c.Host, c.PID, c.Program = s.Principal, s.Host, s.PID, s.Program
	}
	return c
}
