package fsm

import (
	"fmt"
	"slices"

	"lockcell/acl"
)

// Counting semaphores and multi-locks.
//
// A semaphore is a file created with a permit count (OpenArgs.SemLimit,
// command CmdOpenSemaphore; Node.SemLimit). Its lock is taken in shared
// mode and has up to SemLimit holders at once; blocking acquires queue
// in the node's FIFO like a lock's and are granted in arrival order, a
// later one never before an earlier (no barging: while anyone queues, a
// new acquire queues behind). Each holder gets a generation of its own
// (Holder.Gen: the command index of its grant, or the next command index
// when one entry grants several permits), so its sequencer stays valid
// exactly while that holder holds its permit. A holder whose session
// fails leaves its permit unavailable for its handle's lock-delay
// (Node.SemDelays); a clean release frees it at once. The master arms a
// Grant for the earliest delay's end while anyone queues, as for a lock.
//
// A multi-lock (CmdAcquireMulti) takes the exclusive locks of several
// handles of one session, each on a different plain file, in one entry:
// all of them, or, with Wait, a place in every one of their queues, in
// that same entry; the group's waiter is granted in the entry that finds
// it at the head of every queue with every lock free, on all of them at
// once. A group never holds a part of its locks, so two groups asking
// for {A,B} and {B,A} cannot each hold one and wait for the other.
//
// Why no deadlock and no starvation: every queue is in the order the
// waits entered the log, one total order over all waits. The earliest
// wait in the cell is at the head of each of its queues, so it waits
// only for holders, who release (or expire); a later arrival cannot take
// a lock the earliest needs, because a free lock with a queue is granted
// only to its queue's head (its place reserves it). So the earliest wait
// is granted, then the next earliest, and so on.

// MaxSemLimit caps a semaphore's permits: each holder is a Holder in the
// node, in every snapshot and every read of its holders.
const MaxSemLimit = 1024

// MaxMultiLock caps the handles one multi-lock names: its group is
// copied into the queue of each of their nodes.
const MaxMultiLock = 32

// AcquireMultiArgs: the handles (of the envelope's session, on distinct
// plain files) take their nodes' locks exclusively all at once, or, with
// Wait, queue for all of them as one group.
type AcquireMultiArgs struct {
	Handles []uint64 `msgpack:"hs,omitempty"`
	Wait    bool     `msgpack:"w,omitempty"`
}

// ReleaseMultiArgs: the handles let go of their nodes' locks in one
// entry; a handle that holds none is passed over.
type ReleaseMultiArgs struct {
	Handles []uint64 `msgpack:"hs,omitempty"`
}

// CmdType returns CmdAcquireMulti.
func (*AcquireMultiArgs) CmdType() CmdType { return CmdAcquireMulti }

// CmdType returns CmdReleaseMulti.
func (*ReleaseMultiArgs) CmdType() CmdType { return CmdReleaseMulti }

func (*AcquireMultiArgs) payload() {}
func (*ReleaseMultiArgs) payload() {}

func semName(limit uint32) string {
	if limit == 0 {
		return "a plain lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", limit)
}

// checkSemaphore refuses an Open whose permit count cannot be honoured: a
// semaphore is a plain file made by a create.
func checkSemaphore(p *OpenArgs) *Error {
	switch {
	case p.SemLimit == 0:
		return nil
	case p.SemLimit > MaxSemLimit:
		return errf(KindBadRequest, "%s: a semaphore of %d permits is over the cap of %d", p.Path, p.SemLimit, MaxSemLimit)
	case p.Flags&FlagCreate == 0:
		return errf(KindBadRequest, "%s: a semaphore open needs the create flag", p.Path)
	case p.Flags&(FlagDirectory|FlagSequential|FlagContainer) != 0 || p.TTL != 0:
		return errf(KindBadRequest, "%s: only a plain file (no directory, sequential name or TTL) can be a semaphore", p.Path)
	}
	return nil
}

// liveSemDelays drops n's permit delays that ended by now and returns how
// many still run, with the earliest end among them.
func (n *Node) liveSemDelays(now int64) (int, int64) {
	n.SemDelays = slices.DeleteFunc(n.SemDelays, func(end int64) bool { return end <= now })
	if len(n.SemDelays) == 0 {
		n.SemDelays = nil
		return 0, 0
	}
	return len(n.SemDelays), slices.Min(n.SemDelays)
}

// freePermits is how many permits of semaphore n may be granted at now.
func (n *Node) freePermits(now int64) int {
	delayed, _ := n.liveSemDelays(now)
	return max(int(n.SemLimit)-len(n.Holders)-delayed, 0)
}

// acquirePermit is acquire on a semaphore: a permit at once when one is
// free and nobody queues, else a place in the queue or why not.
func (f *FSM) acquirePermit(index uint64, c *Command, p *AcquireArgs, h *Handle, n *Node) *Result {
	if p.Mode != LockShared {
		return &Result{Err: errf(KindBadRequest, "%s is a semaphore: its permits are taken in shared mode", n.Path)}
	}
	for _, ho := range n.Holders {
		if ho.Handle == h.ID {
			return &Result{Granted: true, LockGen: ho.Gen}
		}
	}
	for _, w := range n.Waiters {
		if w.Handle == h.ID {
			return &Result{Err: errf(KindLockHeld, "%s: this handle is already waiting for a permit", n.Path)}
		}
	}
	f.grantWaiters(index, n, c.Time) // a delay that ran out with a queue: the queue goes first
	if len(n.Waiters) == 0 && n.freePermits(c.Time) > 0 {
		gen := f.grantPermit(index, n, h.ID, h.Session, 0, c.Time)
		return &Result{Granted: true, LockGen: gen}
	}
	delayed, until := n.liveSemDelays(c.Time)
	if len(n.Holders) > 0 {
		f.note(Change{Kind: ChangeLockConflict, Path: n.Path, Handle: h.ID, Session: h.Session})
	}
	if p.Wait {
		n.Waiters = append(n.Waiters, Waiter{Handle: h.ID, Session: h.Session, Seq: c.Seq, Mode: LockShared, Since: c.Time})
		if delayed > 0 {
			f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: until})
		}
		return &Result{Queued: true}
	}
	if delayed > 0 && len(n.Holders)+delayed >= int(n.SemLimit) && len(n.Waiters) == 0 {
		return &Result{Err: errf(KindLockDelay, "%s: %d permit(s) under lock-delay, the first for %.1fs", n.Path, delayed, float64(until-c.Time)/1e9)}
	}
	return &Result{Err: errf(KindLockHeld, "%s: all %d permits held (%d holder(s), %d delayed), %d waiting", n.Path, n.SemLimit, len(n.Holders), delayed, len(n.Waiters))}
}

// grantPermit makes the handle a holder of semaphore n with a generation
// of its own, which it returns: the command's index for its first grant,
// a fresh command index for each further one in the same entry.
func (f *FSM) grantPermit(index uint64, n *Node, handle, session, waitSeq uint64, now int64) uint64 {
	gen := f.permitGen(index)
	n.LockGen, n.LockMode = gen, LockShared
	n.Holders = append(n.Holders, Holder{Handle: handle, Session: session, WaitSeq: waitSeq, Since: now, Gen: gen})
	f.note(Change{Kind: ChangeLockGranted, Path: n.Path, Handle: handle, Session: session, Seq: waitSeq})
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	return gen
}

// grantPermits hands semaphore n's free permits to the head of its queue,
// in order, and reports the earliest delay's end when delayed permits
// keep a waiter waiting.
func (f *FSM) grantPermits(index uint64, n *Node, now int64) {
	for len(n.Waiters) > 0 && n.freePermits(now) > 0 {
		w := n.Waiters[0]
		n.Waiters = n.Waiters[1:]
		f.grantPermit(index, n, w.Handle, w.Session, w.Seq, now)
	}
	if len(n.Waiters) == 0 {
		n.Waiters = nil
		return
	}
	if delayed, until := n.liveSemDelays(now); delayed > 0 {
		f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: until})
	}
}

// permitGen returns a generation for a permit granted by the command of
// index: the index itself the first time, a fresh command index after.
func (f *FSM) permitGen(index uint64) uint64 {
	gen := index
	if gen <= f.lastPermitGen {
		gen = f.nextIndex(index)
	}
	f.lastPermitGen = gen
	return gen
}

// holderGen is the generation a holder's sequencer names: its own on a
// semaphore, the lock's on a plain lock.
func holderGen(n *Node, ho Holder) uint64 {
	if n.SemLimit != 0 {
		return ho.Gen
	}
	return n.LockGen
}

// groupHandles checks a multi-lock's handles (sorted, distinct, of the
// session, live, open for writing, each on its own plain file that the
// caller may write) and returns their nodes in handle order.
func (f *FSM) groupHandles(c *Command, ids []uint64) ([]*Handle, []*Node, *Error) {
	if len(ids) == 0 {
		return nil, nil, errf(KindBadRequest, "a multi-lock names no handle")
	}
	if len(ids) > MaxMultiLock {
		return nil, nil, errf(KindBadRequest, "a multi-lock of %d handles is over the cap of %d", len(ids), MaxMultiLock)
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		return nil, nil, errf(KindBadRequest, "a multi-lock's handles must be sorted and distinct")
	}
	hs, ns := make([]*Handle, len(ids)), make([]*Node, len(ids))
	paths := map[string]bool{}
	for i, id := range ids {
		h, n, err := f.liveHandle(c.Session, id)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case h.Flags&FlagWrite == 0:
			return nil, nil, errf(KindPermission, "%s: taking a lock needs a handle opened for writing", n.Path)
		case n.SemLimit != 0:
			return nil, nil, errf(KindBadRequest, "%s is a semaphore: a multi-lock takes plain locks", n.Path)
		case paths[n.Path]:
			return nil, nil, errf(KindBadRequest, "%s: a multi-lock names each lock once", n.Path)
		}
		if err := f.permit(c, n, acl.Write); err != nil {
			return nil, nil, err
		}
		paths[n.Path] = true
		hs[i], ns[i] = h, n
	}
	return hs, ns, nil
}

// acquireMulti applies CmdAcquireMulti (see the top of this file).
func (f *FSM) acquireMulti(index uint64, c *Command, p *AcquireMultiArgs) *Result {
	hs, ns, err := f.groupHandles(c, p.Handles)
	if err != nil {
		return &Result{Err: err}
	}
	held := 0
	for i, n := range ns {
		for _, ho := range n.Holders {
			if ho.Handle == hs[i].ID {
				held++
			}
		}
		for _, w := range n.Waiters {
			if w.Handle == hs[i].ID {
				return &Result{Err: errf(KindLockHeld, "%s: this handle is already waiting for the lock", n.Path)}
			}
		}
	}
	if held == len(ns) && ns[0].LockMode == LockExclusive {
		// A retried grant: every lock is still this group's.
		return &Result{Granted: true, LockGen: ns[0].LockGen}
	}
	if held > 0 {
		return &Result{Err: errf(KindLockHeld, "a handle of the multi-lock already holds its lock")}
	}
	var blocked *Node
	for _, n := range ns {
		if n.LockMode == LockFree && len(n.Waiters) > 0 && n.LockDelayUntil <= c.Time {
			f.grantWaiters(index, n, c.Time) // a hand-off not yet applied goes first
		}
		if blocked == nil && (n.LockMode != LockFree || len(n.Waiters) > 0 || n.LockDelayUntil > c.Time) {
			blocked = n
		}
	}
	if blocked == nil {
		for i, n := range ns {
			f.grant(index, n, hs[i].ID, hs[i].Session, 0, LockExclusive, c.Time)
		}
		return &Result{Granted: true, LockGen: index}
	}
	for i, n := range ns {
		if len(n.Holders) > 0 {
			f.note(Change{Kind: ChangeLockConflict, Path: n.Path, Handle: hs[i].ID, Session: hs[i].Session})
		}
	}
	if p.Wait {
		group := slices.Clone(p.Handles)
		for i, n := range ns {
			n.Waiters = append(n.Waiters, Waiter{Handle: hs[i].ID, Session: hs[i].Session, Seq: c.Seq, Mode: LockExclusive,
				Since: c.Time, Group: group})
			if n.LockMode == LockFree && n.LockDelayUntil > c.Time {
				f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: n.LockDelayUntil})
			}
		}
		return &Result{Queued: true}
	}
	if blocked.LockMode == LockFree && blocked.LockDelayUntil > c.Time && len(blocked.Waiters) == 0 {
		return &Result{Err: errf(KindLockDelay, "%s: lock is free but under lock-delay for %.1fs", blocked.Path, float64(blocked.LockDelayUntil-c.Time)/1e9)}
	}
	return &Result{Err: errf(KindLockHeld, "%s: held in %s mode by %d holder(s), %d waiting", blocked.Path, modeName(blocked.LockMode), len(blocked.Holders), len(blocked.Waiters))}
}

// groupNodes resolves a group's handles to their nodes; ok is false when
// a handle or its node is gone.
func (f *FSM) groupNodes(group []uint64) ([]*Node, bool) {
	ns := make([]*Node, 0, len(group))
	for _, id := range group {
		h := f.handles[id]
		if h == nil {
			return nil, false
		}
		n := f.nodes[h.Path]
		if n == nil || n.Instance != h.Instance {
			return nil, false
		}
		ns = append(ns, n)
	}
	return ns, true
}

// grantGroup grants multi-lock wait w (the head of some queue) if it
// heads every one of its queues with every lock free and under no
// lock-delay; it reports whether it did. Otherwise it changes nothing:
// the group keeps its places, so later arrivals cannot take the locks it
// waits for.
func (f *FSM) grantGroup(index uint64, w Waiter, now int64) bool {
	ns, ok := f.groupNodes(w.Group)
	if !ok {
		return false
	}
	for _, n := range ns {
		if len(n.Waiters) == 0 || n.Waiters[0].Session != w.Session || n.Waiters[0].Seq != w.Seq ||
			n.Waiters[0].Group == nil || n.LockMode != LockFree || n.LockDelayUntil > now {
			if n.LockMode == LockFree && n.LockDelayUntil > now {
				f.note(Change{Kind: ChangeLockDelay, Path: n.Path, Time: n.LockDelayUntil})
			}
			return false
		}
	}
	for _, n := range ns {
		head := n.Waiters[0]
		n.Waiters = n.Waiters[1:]
		if len(n.Waiters) == 0 {
			n.Waiters = nil
		}
		f.grant(index, n, head.Handle, head.Session, head.Seq, LockExclusive, now)
	}
	return true
}

// dropGroup takes multi-lock wait w, which has just left the queue of the
// node at path, out of its other nodes' queues too (and hands those on),
// so a group never waits in some queues only. A single-lock wait is left
// alone.
func (f *FSM) dropGroup(index uint64, w Waiter, path string, now int64) {
	if w.Group == nil {
		return
	}
	for _, id := range w.Group {
		h := f.handles[id]
		if h == nil || h.Path == path {
			continue
		}
		n := f.nodes[h.Path]
		if n == nil || n.Instance != h.Instance {
			continue
		}
		for i, o := range n.Waiters {
			if o.Handle == id && o.Seq == w.Seq {
				n.Waiters = append(n.Waiters[:i:i], n.Waiters[i+1:]...)
				if len(n.Waiters) == 0 {
					n.Waiters = nil
				}
				f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: id, Session: o.Session, Seq: o.Seq})
				f.note(Change{Kind: ChangeNode, Path: n.Path})
				f.grantWaiters(index, n, now)
				break
			}
		}
	}
}

// cancelGroup undoes a granted multi-lock of request id seq: every
// handle of the group that holds its lock from that wait lets it go.
func (f *FSM) cancelGroup(index uint64, session, seq uint64, group []uint64, now int64) {
	for _, id := range group {
		h := f.handles[id]
		if h == nil || h.Session != session {
			continue
		}
		n := f.nodes[h.Path]
		if n == nil || n.Instance != h.Instance {
			continue
		}
		for _, ho := range n.Holders {
			if ho.Handle == id && ho.WaitSeq == seq {
				n.removeHolder(id)
				f.afterRelease(index, n, now)
				break
			}
		}
	}
}

// releaseMulti applies CmdReleaseMulti: each handle (of the session, live)
// lets go of its lock, in handle order, in one entry. A handle that holds
// nothing is passed over; if none held anything it answers KindNotHeld.
func (f *FSM) releaseMulti(index uint64, c *Command, p *ReleaseMultiArgs) *Result {
	if len(p.Handles) == 0 || len(p.Handles) > MaxMultiLock {
		return &Result{Err: errf(KindBadRequest, "a multi-release names 1 to %d handles, not %d", MaxMultiLock, len(p.Handles))}
	}
	type one struct {
		h *Handle
		n *Node
	}
	var all []one
	for _, id := range p.Handles {
		h, n, err := f.liveHandle(c.Session, id)
		if err != nil {
			return &Result{Err: err}
		}
		all = append(all, one{h, n})
	}
	released := 0
	for _, o := range all {
		if o.n.removeHolder(o.h.ID) {
			released++
			f.afterRelease(index, o.n, c.Time)
		}
	}
	if released == 0 {
		return &Result{Err: errf(KindNotHeld, "no handle of the multi-release holds its lock")}
	}
	return &Result{}
}
