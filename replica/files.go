package replica

import (
	"lockcell/acl"
)

// Applying handle and file commands: open (and create), contents, delete,
// close, and what a closed handle or a removed node takes with it.

// open opens a handle with the entry's index as its id, creating the node
// (and taking its parent's ACL names) when the flags ask for it. A name
// the caller may not read answers as a missing one.
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

// setContents replaces a file's contents through a handle opened for
// writing, if the content generation matches when the command is
// conditional; the new generation is the entry's index.
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

// delete removes the handle's node: a file or an empty directory, never
// the cell root.
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

// closeOwnHandle closes a handle of the command's session on the client's request:
// a clean close, so no lock-delay.
func (f *FSM) closeOwnHandle(index uint64, c *Command) *Result {
	h, err := f.ownHandle(c)
	if err != nil {
		return &Result{Err: err}
	}
	f.closeHandle(index, h, false, c.Time)
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
