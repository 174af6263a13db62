package fsm

// BreakLockArgs: the admin frees the lock on Path from every holder.
// Reason is for operators and the freed holders: apply passes it on to
// the master in the change it reports, and stores it nowhere.
type BreakLockArgs struct {
	Path   string `msgpack:"p,omitempty"`
	Reason string `msgpack:"r,omitempty"`
}

// CmdType returns CmdBreakLock.
func (*BreakLockArgs) CmdType() CmdType { return CmdBreakLock }

func (*BreakLockArgs) payload() {}

// breakLock frees the lock on p.Path from every holder, for the admin
// only. The lock's generation becomes the command's index even when no
// waiter takes it, so every sequencer of the broken holding is stale at
// once (also one that names the lock as free afterwards). A running
// lock-delay ends: a break is deliberate, and the admin wants the lock
// usable. The next waiters get the lock in the same command, as after a
// release. Each holder is reported (ChangeLockBroken) so the master
// tells its session; breaking a free lock changes nothing and succeeds.
func (f *FSM) breakLock(index uint64, c *Command, p *BreakLockArgs) *Result {
	if !c.Admin {
		return &Result{Err: errf(KindPermission, "%s: only the cell's admin may break a lock", p.Path)}
	}
	n := f.nodes[p.Path]
	if n == nil {
		return &Result{Err: errf(KindNotFound, "%s: no such file", p.Path)}
	}
	broken := n.Holders
	if len(broken) == 0 && n.LockDelayUntil <= c.Time && len(n.SemDelays) == 0 {
		return &Result{LockGen: n.LockGen}
	}
	n.SemDelays = nil // a semaphore's held-back permits are freed as a lock's delay ends
	if n.LockDelayUntil > c.Time {
		n.LockDelayUntil = c.Time
	}
	if len(broken) == 0 {
		broken = nil // as a snapshot restores it
	}
	brokeGen := n.LockGen
	n.Holders = nil
	n.LockMode = LockFree
	if len(broken) > 0 {
		n.LockGen = index
	}
	for _, ho := range broken {
		f.note(Change{Kind: ChangeLockBroken, Path: n.Path, Handle: ho.Handle, Session: ho.Session, Seq: brokeGen, Reason: p.Reason})
	}
	f.afterRelease(index, n, c.Time)
	return &Result{LockGen: n.LockGen, Broken: broken}
}
