package fsm

import (
	"sort"
	"unicode/utf8"
)

// Applying session commands: a session's end, cleanly or by expiry, with
// everything it held.

// MaxIdentityLen bounds each of the host and program a client declares
// at CreateSession, so a session's replicated state and every Stat that
// names it stay small.
const MaxIdentityLen = 256

// checkIdentity refuses a declared identity a Stat could not show as it
// is: a host or program over MaxIdentityLen bytes, not UTF-8, or with a
// control character (it would garble a terminal), or a negative pid.
func checkIdentity(p *CreateSessionArgs) *Error {
	for _, v := range [...]struct{ what, s string }{{"host", p.Host}, {"program", p.Program}} {
		if len(v.s) > MaxIdentityLen {
			return errf(KindBadRequest, "declared %s of %d bytes: at most %d", v.what, len(v.s), MaxIdentityLen)
		}
		if !utf8.ValidString(v.s) {
			return errf(KindBadRequest, "declared %s is not UTF-8", v.what)
		}
		for _, r := range v.s {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				return errf(KindBadRequest, "declared %s has control character %U", v.what, r)
			}
		}
	}
	if p.PID < 0 {
		return errf(KindBadRequest, "declared pid %d is negative", p.PID)
	}
	return nil
}

// createSession starts a session whose id is the command's index, with the
// identity its client declared.
func (f *FSM) createSession(index uint64, c *Command, p *CreateSessionArgs) *Result {
	if err := checkIdentity(p); err != nil {
		return &Result{Err: err}
	}
	f.sessions[index] = &Session{ID: index, Client: c.Client, Principal: c.Principal, Created: c.Time,
		Host: p.Host, PID: p.PID, Program: p.Program, handles: map[uint64]bool{}}
	f.principals[c.Principal]++
	f.note(Change{Kind: ChangeSessionCreated, Session: index})
	return &Result{Session: index}
}

// closeSession ends a session: its handles close (a failed session's
// locks go under lock-delay) and the ephemeral nodes it created go. An
// idle close (CloseSessionArgs.Idle) applies only to a session with no
// open handle, so it ends nothing but the session.
func (f *FSM) closeSession(index uint64, c *Command, p *CloseSessionArgs) *Result {
	s := f.sessions[c.Session]
	if s == nil {
		return &Result{Err: errf(KindSessionExpired, "session %d does not exist or has expired", c.Session)}
	}
	if p.Idle && len(s.handles) > 0 {
		// The master saw the session idle, but a handle was opened
		// before this entry: the session is in use, and stays.
		return &Result{Err: errf(KindCanceled, "idle close of session %d withdrawn: it has %d open handles", s.ID, len(s.handles))}
	}
	for _, id := range sortedKeys(s.handles) {
		if h := f.handles[id]; h != nil {
			f.closeHandle(index, h, p.Expired, c.Time)
		}
	}
	// Ephemeral files die with their creating session even if others still
	// hold them open; deepest first so ephemeral directories empty out.
	owned := f.ownedEphemerals(s.ID)
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
