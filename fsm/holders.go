package fsm

// Identity is what a session's client declared about itself at
// CreateSession (host, process id, program name), for operators. The
// cell checks only its size and form (checkIdentity), never its truth.
type Identity struct {
	Host    string
	PID     int64
	Program string
}

// LockHolderView is one holder of a lock as a read reports it: the
// session, the principal it authenticated as, the identity its client
// declared, and Since, when the lock was granted to it (Unix ns; 0 when
// it was granted before grants were timed).
type LockHolderView struct {
	Session   uint64
	Principal string
	Identity
	Since int64
}

// LockHolders returns up to limit holders of the lock on the node at
// path, in grant order, with their sessions' principals and identities;
// nil when the lock is free or there is no such node. It checks no
// permission: the caller has already decided, in the same View, that its
// session may read the node (the holders are part of its Stat).
func (v View) LockHolders(path string, limit int) []LockHolderView {
	n := v.f.nodes[path]
	if n == nil || len(n.Holders) == 0 || limit <= 0 {
		return nil
	}
	out := make([]LockHolderView, 0, min(len(n.Holders), limit))
	for _, ho := range n.Holders[:min(len(n.Holders), limit)] {
		hv := LockHolderView{Session: ho.Session, Since: ho.Since}
		if s := v.f.sessions[ho.Session]; s != nil {
			hv.Principal, hv.Identity = s.Principal, s.identity()
		}
		out = append(out, hv)
	}
	return out
}

// LockDelayBy returns what started the latest lock-delay on the node at
// path (a copy), with the delay's end; nil, 0 when none was ever imposed
// or there is no such node. Like LockHolders it checks no permission.
// The delay is running only while its end is in the future.
func (v View) LockDelayBy(path string) (*LockDelayCause, int64) {
	n := v.f.nodes[path]
	if n == nil || n.LockDelayBy == nil {
		return nil, 0
	}
	c := *n.LockDelayBy
	return &c, n.LockDelayUntil
}

func (s *Session) identity() Identity {
	return Identity{Host: s.Host, PID: s.PID, Program: s.Program}
}
