package fsm

import (
	"maps"
	"testing"
)

// checkHandleCounts fails unless the running count of open handles by
// principal equals a recount of the sessions' handles, and View's figures
// say the same.
func (h *fsmtH) checkHandleCounts(f *FSM, what string, want map[string]int) {
	h.t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	recount := map[string]int{}
	for _, s := range f.sessions {
		if len(s.handles) > 0 {
			recount[s.Principal] += len(s.handles)
		}
	}
	if !maps.Equal(f.principalHandles, recount) || !maps.Equal(recount, want) {
		h.t.Fatalf("%s: running count %v, recount %v, want %v", what, f.principalHandles, recount, want)
	}
	total := 0
	for p, n := range want {
		if got := (View{f}).PrincipalHandles(p); got != n {
			h.t.Fatalf("%s: View.PrincipalHandles(%q) = %d, want %d", what, p, got, n)
		}
		total += n
	}
	if got := (View{f}).Handles(); got != total {
		h.t.Fatalf("%s: View.Handles() = %d, want %d", what, got, total)
	}
}

// The open handles of each principal are counted as they open and close,
// close with their session (ended or expired), and are recounted on
// restore: the master's per-principal handle cap reads the count.
func TestPrincipalHandlesFollowTheHandles(t *testing.T) {
	h := newFSMT(t)
	root, a1, a2, b := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("alice"), h.sessionOf("bob")
	h.pub(root, nil)
	h.checkHandleCounts(h.f, "after setup", map[string]int{"root": 3})
	var alice []uint64
	for _, s := range []uint64{a1, a1, a2} {
		r := h.aclDo(s, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("pub"), Flags: FlagRead}})
		wantOK(t, "alice opens", r)
		alice = append(alice, r.Handle)
	}
	wantOK(t, "bob opens", h.aclDo(b, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("pub/x"), Flags: fsmtRWC}}))
	refused := h.aclDo(b, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("acl/all"), Flags: FlagWrite}})
	if refused.Err == nil {
		t.Fatal("bob wrote the ACL file")
	}
	h.checkHandleCounts(h.f, "after opens (one refused)", map[string]int{"root": 3, "alice": 3, "bob": 1})

	f2, err := fsmtRestore(t, fsmtCell, h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	h.checkHandleCounts(f2, "restored", map[string]int{"root": 3, "alice": 3, "bob": 1})

	wantOK(t, "alice closes", h.aclDo(a1, "alice", Command{Payload: &CloseArgs{Handle: alice[0]}}))
	h.checkHandleCounts(h.f, "after a close", map[string]int{"root": 3, "alice": 2, "bob": 1})
	wantOK(t, "alice's second session ends", h.do(a2, Command{Payload: &CloseSessionArgs{}}))
	h.checkHandleCounts(h.f, "after a session's end", map[string]int{"root": 3, "alice": 1, "bob": 1})
	wantOK(t, "bob expires", h.raw(Command{Session: b, Payload: &CloseSessionArgs{Expired: true}}))
	h.checkHandleCounts(h.f, "after an expiry", map[string]int{"root": 3, "alice": 1})
}
