package replica

// LockHolderView is one holder of a lock as a read reports it: the
// session and the principal it authenticated as.
type LockHolderView struct {
	Session   uint64
	Principal string
}

// LockHolders returns up to limit holders of the lock on the node at
// path, in grant order, with their sessions' principals; nil when the lock
// is free or there is no such node. It checks no permission: the caller
// has already decided, in the same View, that its session may read the
// node (the holders are part of its Stat).
func (v View) LockHolders(path string, limit int) []LockHolderView {
	n := v.f.nodes[path]
	if n == nil || len(n.Holders) == 0 || limit <= 0 {
		return nil
	}
	out := make([]LockHolderView, 0, min(len(n.Holders), limit))
	for _, ho := range n.Holders[:min(len(n.Holders), limit)] {
		hv := LockHolderView{Session: ho.Session}
		if s := v.f.sessions[ho.Session]; s != nil {
			hv.Principal = s.Principal
		}
		out = append(out, hv)
	}
	return out
}
