package fsm

// HolderHandles returns the holders of the lock on the node at path in
// grant order, with the handle each holds it through, and the lock's
// generation; nothing when the node is missing or its lock free. The
// master asks these handles to let go when someone requests the lock's
// release: a request names a handle, not only a session, because one
// session may hold the lock through one handle and wait on another.
func (v View) HolderHandles(path string) ([]Holder, uint64) {
	n := v.f.nodes[path]
	if n == nil || len(n.Holders) == 0 {
		return nil, 0
	}
	return append([]Holder(nil), n.Holders...), n.LockGen
}
