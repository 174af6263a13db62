package fsm

// SessionIdentity returns the identity the client of a live session
// declared at CreateSession (empty fields when it declared none), and
// false when there is no such session. Like LockHolders it checks no
// permission: the caller decides who may see the session.
func (v View) SessionIdentity(id uint64) (Identity, bool) {
	s := v.f.sessions[id]
	if s == nil {
		return Identity{}, false
	}
	return s.identity(), true
}
