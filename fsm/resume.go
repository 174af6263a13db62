package fsm

// Resuming a session: a new process that holds the session's secret (the
// master checks it; no secret is in the replicated state) takes the
// session over. The session's incarnation becomes the command's index, so
// from then on only requests of the new process apply (staleIncarnation);
// every lock the session holds gets the command's index as its new lock
// generation, so sequencers the old process holds stop being valid; and
// the session's blocking acquires still queued are withdrawn: the old
// process was waiting in them, and the new one queues afresh.

// ResumeSessionArgs: the envelope's Session is resumed by its own
// Principal. The master has checked the caller's secret before proposing.
type ResumeSessionArgs struct{}

// CmdType returns CmdResumeSession.
func (*ResumeSessionArgs) CmdType() CmdType { return CmdResumeSession }

func (*ResumeSessionArgs) payload() {}

// staleIncarnation refuses a client request (one with a Principal) of a
// live session whose incarnation is not the session's current one: its
// process was replaced by a ResumeSession. The master's own commands
// (expiry, hand-offs) carry no principal and always apply; a
// ResumeSession carries no incarnation of its own.
func (f *FSM) staleIncarnation(c *Command) *Error {
	if _, resume := c.Payload.(*ResumeSessionArgs); resume || c.Principal == "" || c.Session == 0 {
		return nil
	}
	if s := f.sessions[c.Session]; s != nil && s.Incarnation != c.Incarnation {
		return errf(KindSessionExpired, "%s: session %d was resumed by another process (incarnation %d, the call's %d)",
			SessionMovedMsg, c.Session, s.Incarnation, c.Incarnation)
	}
	return nil
}

// SessionMovedMsg opens the error message of a request refused by
// staleIncarnation. It equals wire.SessionMovedMsg, which clients match
// (master.TestSessionMovedMessage), and it never changes: messages of
// results are replicated state.
const SessionMovedMsg = "session moved"

// resumeSession gives the session a new incarnation (this command's
// index), a new lock generation on every lock it holds, and withdraws its
// queued waits. The result carries the incarnation and the first request
// id the new process may use: past every id the session has a result or
// an acknowledgement for, so none of its requests is taken for a retry of
// the old process's.
func (f *FSM) resumeSession(index uint64, c *Command, _ *ResumeSessionArgs) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	if s.Principal != c.Principal {
		return &Result{Err: errf(KindPermission, "session %d belongs to another principal", c.Session)}
	}
	s.Incarnation = index
	bumped := map[string]bool{}
	for _, id := range sortedKeys(s.handles) {
		h := f.handles[id]
		if h == nil {
			continue
		}
		n := f.nodes[h.Path]
		if n == nil || n.Instance != h.Instance {
			continue
		}
		for i, w := range n.Waiters {
			if w.Handle == h.ID {
				n.Waiters = append(n.Waiters[:i:i], n.Waiters[i+1:]...)
				f.note(Change{Kind: ChangeWaitEnded, Path: n.Path, Handle: h.ID, Session: h.Session, Seq: w.Seq})
				f.dropGroup(index, w, n.Path, c.Time)
				// The departed waiter may have headed the queue.
				f.grantWaiters(index, n, c.Time)
				f.note(Change{Kind: ChangeNode, Path: n.Path})
				break
			}
		}
		for i, ho := range n.Holders {
			if ho.Handle == h.ID && n.SemLimit != 0 {
				// A permit's generation is its own: only this holder's
				// sequencer goes stale.
				n.Holders[i].Gen = f.permitGen(index)
				n.LockGen = n.Holders[i].Gen
				f.note(Change{Kind: ChangeNode, Path: n.Path})
				continue
			}
			if ho.Handle == h.ID && !bumped[n.Path] {
				// A shared lock's other holders share the generation:
				// their sequencers go stale too, and GetSequencer gives
				// them the new one.
				bumped[n.Path] = true
				n.LockGen = index
				f.note(Change{Kind: ChangeNode, Path: n.Path})
			}
		}
	}
	next := s.AckSeq
	for q := range s.Results {
		next = max(next, q)
	}
	f.note(Change{Kind: ChangeSessionResumed, Session: s.ID, Seq: index})
	return &Result{Session: s.ID, Incarnation: index, NextSeq: next + 1}
}

// ResumedHandle is one open handle of a session, as a resume lists it:
// the handle and, when it holds its node's lock, the mode and generation.
type ResumedHandle struct {
	Handle   Handle
	LockMode uint8
	LockGen  uint64
}

// SessionResumeInfo returns a live session's principal and incarnation,
// and false when there is no such session.
func (v View) SessionResumeInfo(id uint64) (principal string, incarnation uint64, ok bool) {
	s := v.f.sessions[id]
	if s == nil {
		return "", 0, false
	}
	return s.Principal, s.Incarnation, true
}

// SessionOpenHandles returns up to limit of the session's open handles
// whose node instance still exists, in id order, and whether there were
// more.
func (v View) SessionOpenHandles(id uint64, limit int) (out []ResumedHandle, more bool) {
	f := v.f
	s := f.sessions[id]
	if s == nil {
		return nil, false
	}
	for _, hid := range sortedKeys(s.handles) {
		h := f.handles[hid]
		if h == nil {
			continue
		}
		n := f.nodes[h.Path]
		if n == nil || n.Instance != h.Instance {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		r := ResumedHandle{Handle: *h}
		for _, ho := range n.Holders {
			if ho.Handle == h.ID {
				r.LockMode, r.LockGen = n.LockMode, holderGen(n, ho)
			}
		}
		out = append(out, r)
	}
	return out, false
}
