package fsm

import (
	"slices"
	"testing"
)

// What a Close invalidates: its node (a lock or wait of the handle ends),
// the parent's listing only when the close may delete the node (an
// ephemeral one), and nothing when the handle's node is gone or was
// replaced; and always every name the close's applied changes name.
func TestCloseAffectsOnlyWhatItCanChange(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	closes := func(what string, hd uint64, want ...string) {
		t.Helper()
		c := Command{Payload: &CloseArgs{Handle: hd}}
		got := h.f.AffectedPaths(&c)
		var wantPaths []string
		for _, w := range want {
			wantPaths = append(wantPaths, fsmtPath(w))
		}
		slices.Sort(wantPaths)
		if !slices.Equal(got, wantPaths) {
			t.Fatalf("%s: AffectedPaths %q, want %q", what, got, wantPaths)
		}
		if r := h.do(s, c); r.Err != nil {
			t.Fatalf("%s: %v", what, r.Err)
		}
		for _, ch := range h.changes {
			if !slices.Contains(got, ch.Path) {
				t.Fatalf("%s: applied change %+v names %s, which AffectedPaths left out", what, ch, ch.Path)
			}
		}
	}

	plain := h.mustOpen(s, "d/plain", fsmtRWC)
	closes("a plain file's handle, neither holding nor waiting", plain)

	// A handle that neither holds nor waits, on a file others wait for:
	// the close grants what the queue allows (here, nothing changes
	// hands, but the affected set cannot know that without applying).
	queued := h.mustOpen(s, "d/queued", fsmtRWC)
	if r := h.do(s, Command{Payload: &AcquireArgs{Handle: queued, Mode: LockExclusive}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	s2 := h.session()
	waiter := h.mustOpen(s2, "d/queued", fsmtRWC)
	if r := h.do(s2, Command{Payload: &AcquireArgs{Handle: waiter, Mode: LockExclusive, Wait: true}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	bystander := h.mustOpen(s, "d/queued", fsmtRWC)
	closes("a bystander's handle on a file with waiters", bystander, "d/queued")
	closes("a holder's handle with a waiter queued", queued, "d/queued")

	locked := h.mustOpen(s, "d/locked", fsmtRWC)
	if r := h.do(s, Command{Payload: &AcquireArgs{Handle: locked, Mode: LockExclusive}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	closes("a lock holder's handle", locked, "d/locked")

	eph := h.mustOpen(s, "d/eph", fsmtRWC|FlagEphemeral)
	closes("an ephemeral file's last handle", eph, "d", "d/eph")

	gone := h.mustOpen(s, "d/gone", fsmtRWC)
	del := h.mustOpen(s, "d/gone", FlagRead|FlagWrite)
	if r := h.do(s, Command{Payload: &DeleteArgs{Handle: del}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	closes("a handle whose file was deleted", gone)

	old := h.mustOpen(s, "d/again", fsmtRWC)
	del = h.mustOpen(s, "d/again", FlagRead|FlagWrite)
	if r := h.do(s, Command{Payload: &DeleteArgs{Handle: del}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.mustOpen(s, "d/again", fsmtRWC)
	closes("a handle of a file deleted and created again", old)
}
