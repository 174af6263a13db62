package replica

import "sort"

// Applying session commands: a session's end, cleanly or by expiry, with
// everything it held.

// createSession starts a session whose id is the entry's index.
func (f *FSM) createSession(index uint64, c *Command) *Result {
	f.sessions[index] = &Session{ID: index, Client: c.Client, Principal: c.Principal, Created: c.Time, handles: map[uint64]bool{}}
	f.principals[c.Principal]++
	f.note(Change{Kind: ChangeSessionCreated, Session: index})
	return &Result{Session: index}
}

// closeSession ends a session: its handles close (a failed session's
// locks go under lock-delay) and the ephemeral nodes it created go.
func (f *FSM) closeSession(index uint64, c *Command, p *CloseSessionArgs) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	for _, id := range sortedKeys(s.handles) {
		if h := f.handles[id]; h != nil {
			f.closeHandle(index, h, p.Expired, c.Time)
		}
	}
	// Ephemeral files die with their creating session even if others still
	// hold them open; deepest first so ephemeral directories empty out.
	var owned []*Node
	for _, n := range f.nodes {
		if n.Ephemeral && n.Owner == s.ID {
			owned = append(owned, n)
		}
	}
	sort.Slice(owned, func(i, j int) bool { return owned[i].Path > owned[j].Path })
	for _, n := range owned {
		if f.nodes[n.Path] == n && (!n.Dir || len(n.children) == 0) {
			f.removeNode(index, n, c.Time)
		}
	}
	delete(f.sessions, s.ID)
	if f.principals[s.Principal]--; f.principals[s.Principal] <= 0 {
		delete(f.principals, s.Principal)
	}
	f.note(Change{Kind: ChangeSessionClosed, Session: s.ID})
	return &Result{}
}
