package fsm

import (
	"fmt"

	"lockcell/acl"
)

// Applying lock commands: acquire (immediate or queued), release,
// hand-off to waiters, cancelled waits, lock-delay, and the sequencer
// check a fenced command makes.

// acquire grants the lock at once when it is free (or shared and asked
// for shared) with nobody queued and no lock-delay running; otherwise a
// blocking acquire queues in FIFO order and a try fails with why.
func (f *FSM) acquire(index uint64, c *Command, p *AcquireArgs) *Result {
	h, n, err := f.liveHandle(c.Session, p.Handle)
	if err != nil {
		return &Result{Err: err}
	}
	if p.Mode != LockExclusive && p.Mode != LockShared {
		return &Result{Err: errf(KindBadRequest, "unknown lock mode %d", p.Mode)}
	}
	if h.Flags&FlagWrite == 0 {
		return &Result{Err: errf(KindPermission, "%s: taking a lock needs a handle opened for writing", n.Path)}
	}
	if err := f.permit(c, n, acl.Write); err != nil {
		return &Result{Err: err}
	}
	if n.SemLimit != 0 {
		return f.acquirePermit(index, c, p, h, n)
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			if n.LockMode == p.Mode {
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
	shareable := n.LockMode == LockShared && p.Mode == LockShared && len(n.Waiters) == 0
	if !delayed && (free || shareable) {
		f.grant(index, n, h.ID, h.Session, 0, p.Mode, c.Time)
		return &Result{Granted: true, LockGen: n.LockGen}
	}
	if len(n.Holders) > 0 {
		f.note(Change{Kind: ChangeLockConflict, Path: n.Path, Handle: h.ID, Session: h.Session})
	}
	if p.Wait {
		n.Waiters = append(n.Waiters, Waiter{Handle: h.ID, Session: h.Session, Seq: c.Seq, Mode: p.Mode, Since: c.Time})
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

// release drops the handle's hold on its lock and hands the lock on.
func (f *FSM) release(index uint64, c *Command, p *ReleaseArgs) *Result {
	h, n, err := f.liveHandle(c.Session, p.Handle)
	if err != nil {
		return &Result{Err: err}
	}
	if !n.removeHolder(h.ID) {
		return &Result{Err: errf(KindNotHeld, "%s: this handle does not hold the lock", n.Path)}
	}
	f.afterRelease(index, n, c.Time)
	return &Result{}
}

// grantAfterDelay re-runs the hand-off of a lock once its lock-delay has
// passed (the master proposes it when the delay's timer fires); before
// then, or with no waiters, it changes nothing.
func (f *FSM) grantAfterDelay(index uint64, c *Command, p *GrantArgs) *Result {
	if n := f.nodes[p.Path]; n != nil {
		f.grantWaiters(index, n, c.Time)
	}
	return &Result{}
}

// grant makes the handle a holder since now, the entry's Time; the first
// holder of a free lock sets its mode and a new lock generation, the
// command's index.
func (f *FSM) grant(index uint64, n *Node, handle, session, waitSeq uint64, mode uint8, now int64) {
	if n.LockMode == LockFree {
		n.LockGen = index
		n.LockMode = mode
	}
	n.Holders = append(n.Holders, Holder{Handle: handle, Session: session, WaitSeq: waitSeq, Since: now})
	f.note(Change{Kind: ChangeLockGranted, Path: n.Path, Handle: handle, Session: session, Seq: waitSeq})
	f.note(Change{Kind: ChangeNode, Path: n.Path})
}

// removeHolder drops the handle from the holders; false if it held none.
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
// in the same command, to the next waiter (or run of shared waiters).
func (f *FSM) afterRelease(index uint64, n *Node, now int64) {
	if len(n.Holders) == 0 {
		n.LockMode = LockFree
	}
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.grantWaiters(index, n, now)
}

// grantWaiters hands a free lock to the head of the queue, or to the run
// of shared waiters at its head (also when the lock is held shared), unless
// a lock-delay is running, which it reports instead.
func (f *FSM) grantWaiters(index uint64, n *Node, now int64) {
	if n.SemLimit != 0 {
		f.grantPermits(index, n, now)
		return
	}
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
		if w.Group != nil {
			// A multi-lock: granted here only with all its locks at once
			// (semaphore.go); until then it keeps its place.
			f.grantGroup(index, w, now)
			return
		}
		n.Waiters = n.Waiters[1:]
		f.grant(index, n, w.Handle, w.Session, w.Seq, w.Mode, now)
		if w.Mode == LockExclusive {
			return
		}
	}
}

// cancelWait withdraws the blocking acquire WaitSeq: still queued, it
// leaves the queue; already granted (the client gave up before it heard),
// the grant is undone. Anything else is a no-op, so a cancel is safe to
// repeat.
func (f *FSM) cancelWait(index uint64, c *Command, p *CancelWaitArgs) *Result {
	h, n, err := f.liveHandle(c.Session, p.Handle)
	if err != nil {
		return &Result{Err: err}
	}
	for i, w := range n.Waiters {
		if w.Handle == h.ID && w.Seq == p.WaitSeq {
			n.Waiters = append(n.Waiters[:i:i], n.Waiters[i+1:]...)
			f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: h.ID, Session: h.Session, Seq: p.WaitSeq})
			f.dropGroup(index, w, n.Path, c.Time)
			// A queue head leaving may unblock shared waiters behind it.
			f.grantWaiters(index, n, c.Time)
			return &Result{}
		}
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID && ho.WaitSeq == p.WaitSeq && p.WaitSeq != 0 {
			n.removeHolder(h.ID)
			f.afterRelease(index, n, c.Time)
			// A multi-lock granted by this wait is undone on every lock
			// (its holders share the request id; a single lock's is its
			// own, so for one nothing else matches).
			if s := f.sessions[h.Session]; s != nil {
				f.cancelGroup(index, h.Session, p.WaitSeq, sortedKeys(s.handles), c.Time)
			}
			return &Result{}
		}
	}
	return &Result{}
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

// fenceReasonOf is "" when the lock fc names, whose node is n (nil: there
// is none), is held at fc's generation in fc's mode, else why not.
func fenceReasonOf(fc *Fence, n *Node) string {
	switch {
	case n == nil:
		return fmt.Sprintf("%s no longer exists", fc.Path)
	case len(n.Holders) == 0:
		return fmt.Sprintf("%s is no longer locked", fc.Path)
	case n.SemLimit != 0:
		for _, ho := range n.Holders {
			if ho.Gen == fc.Generation && fc.Mode == LockShared {
				return ""
			}
		}
		return fmt.Sprintf("%s: no permit of the semaphore is held at generation %d", fc.Path, fc.Generation)
	case n.LockGen != fc.Generation:
		return fmt.Sprintf("%s is locked at generation %d, not %d", fc.Path, n.LockGen, fc.Generation)
	case n.LockMode != fc.Mode:
		return fmt.Sprintf("%s is locked %s, not %s", fc.Path, modeName(n.LockMode), modeName(fc.Mode))
	}
	return ""
}
