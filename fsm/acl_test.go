package fsm

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"lockcell/acl"
)

// ACL decisions in the state machine: each client command carries its
// principal, and the entry that changes a node is the one that checks the
// permission, so a revocation binds the very next entry.

// aclDo applies c as principal who's request in session s.
func (h *fsmtH) aclDo(s uint64, who string, c Command) *Result {
	h.t.Helper()
	c.Principal = who
	c.Admin = who == "root" || who == "admin"
	return h.do(s, c)
}

func (h *fsmtH) sessionOf(who string) uint64 {
	h.t.Helper()
	r := h.raw(Command{Client: "test", Principal: who, Admin: who == "root", Payload: &CreateSessionArgs{}})
	if r.Err != nil {
		h.t.Fatal(r.Err)
	}
	return r.Session
}

func aclWant(t *testing.T, what string, r *Result, k Kind) {
	t.Helper()
	switch {
	case k == KindNone && r.Err != nil:
		t.Fatalf("%s: want success, got %v", what, r.Err)
	case k != KindNone && (r.Err == nil || r.Err.Kind != k):
		t.Fatalf("%s: want error kind %d, got %+v", what, k, r.Err)
	}
}

func TestACLDefaultOwnerAndInheritance(t *testing.T) {
	h := newFSMT(t)
	root, alice, bob := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("bob")

	// The root has no owner: under the default rule only the admin writes it.
	aclWant(t, "alice creates at the root", h.aclDo(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("a"), Flags: fsmtRWC}}), KindPermission)
	r := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("home"), Flags: fsmtRWC | FlagDirectory}})
	aclWant(t, "admin creates /home", r, KindNone)
	rootH := r.Handle
	// Give alice a directory of her own: admin creates it, then names ACLs.
	aclWant(t, "admin writes ACL file", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}}), KindNone)
	r = h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/alice"), Flags: fsmtRWC, Contents: []byte("alice\n")}})
	aclWant(t, "admin creates acl/alice", r, KindNone)
	aclAlice := r.Handle
	aclWant(t, "admin names alice's ACL on /home", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: rootH, ACL: &ACLNames{Write: "alice", ChangeACL: "alice"}}}), KindNone)

	// alice creates under /home (write granted by the file); the child
	// inherits the names and records alice as creator.
	r = h.aclDo(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/f"), Flags: fsmtRWC}})
	aclWant(t, "alice creates home/f", r, KindNone)
	aliceF := r.Handle
	n := h.node("home/f")
	if n.WriteACL != "alice" || n.ChangeACL != "alice" || n.ReadACL != "" || n.Creator != "alice" {
		t.Fatalf("home/f inherited %q/%q/%q creator %q", n.ReadACL, n.WriteACL, n.ChangeACL, n.Creator)
	}
	// bob may read (no read ACL named: any principal) but not write or lock.
	r = h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/f"), Flags: FlagRead}})
	aclWant(t, "bob opens home/f for reading", r, KindNone)
	aclWant(t, "bob opens home/f for writing", h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/f"), Flags: fsmtRW}}), KindPermission)
	if err := h.f.Allowed(fsmtPath("home/f"), "bob", false, acl.Read); err != nil {
		t.Fatalf("bob may not read home/f: %v", err)
	}
	if err := h.f.Allowed(fsmtPath("home/f"), "bob", false, acl.Write); err == nil || err.Kind != KindPermission {
		t.Fatalf("bob write check: %v", err)
	}

	// Revocation by rewriting the ACL file binds the next entry: alice's
	// open handle can no longer write once the file no longer lists her.
	aclWant(t, "alice writes", h.aclDo(alice, "alice", Command{Payload: &SetContentsArgs{Handle: aliceF, Contents: []byte("1")}}), KindNone)
	aclWant(t, "admin revokes alice", h.aclDo(root, "root", Command{Payload: &SetContentsArgs{Handle: aclAlice, Contents: []byte("carol\n")}}), KindNone)
	aclWant(t, "alice writes after revocation", h.aclDo(alice, "alice", Command{Payload: &SetContentsArgs{Handle: aliceF, Contents: []byte("2")}}), KindPermission)
	aclWant(t, "alice locks after revocation", h.aclDo(alice, "alice", Command{Payload: &AcquireArgs{Handle: aliceF, Mode: LockExclusive}}), KindPermission)
	aclWant(t, "alice deletes after revocation", h.aclDo(alice, "alice", Command{Payload: &DeleteArgs{Handle: aliceF}}), KindPermission)
	if got := string(h.node("home/f").Contents); got != "1" {
		t.Fatalf("contents after a denied write: %q", got)
	}
	// Releasing and closing are never denied: a revoked holder can let go.
	aclWant(t, "alice closes", h.aclDo(alice, "alice", Command{Payload: &CloseArgs{Handle: aliceF}}), KindNone)
}

func TestACLFilesFailClosedAndMustParse(t *testing.T) {
	h := newFSMT(t)
	root, bob := h.sessionOf("root"), h.sessionOf("bob")
	h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}})
	r := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/ops"), Flags: fsmtRWC, Contents: []byte("bob\n")}})
	aclWant(t, "create acl/ops", r, KindNone)
	opsH := r.Handle
	aclWant(t, "an ACL file that does not parse", h.aclDo(root, "root", Command{Payload: &SetContentsArgs{Handle: opsH, Contents: []byte("bad name\n")}}), KindBadRequest)
	aclWant(t, "create an unparsable ACL file", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/x"), Flags: fsmtRWC, Contents: []byte("a b")}}), KindBadRequest)

	r = h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: fsmtRWC}})
	secretH := r.Handle
	// A read ACL naming a missing file denies everyone but the admin.
	aclWant(t, "name a missing read ACL", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: secretH, ACL: &ACLNames{Read: "nobody-file", Write: "ops"}}}), KindNone)
	if err := h.f.Allowed(fsmtPath("secret"), "bob", false, acl.Read); err == nil {
		t.Fatal("a missing read ACL file granted bob read")
	}
	// bob may write but not read: open for reading says permission
	// denied, opening for writing works.
	aclWant(t, "bob opens secret for reading", h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: FlagRead}}), KindPermission)
	aclWant(t, "bob opens secret for writing", h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: FlagWrite}}), KindNone)
	// carol may neither read nor write: the node looks absent, with the
	// very error a missing node gets.
	carol := h.sessionOf("carol")
	absent := h.aclDo(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("nothing"), Flags: FlagRead}})
	hidden := h.aclDo(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: FlagRead}})
	if absent.Err == nil || hidden.Err == nil || absent.Err.Kind != hidden.Err.Kind || absent.Err.Kind != KindNotFound {
		t.Fatalf("absent %v vs forbidden %v: want the same not-found error", absent.Err, hidden.Err)
	}
	// SetACL needs change-ACL: bob lacks it (no change-ACL file named and
	// he is not the owner).
	bobW := h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: FlagWrite}}).Handle
	aclWant(t, "bob sets ACLs", h.aclDo(bob, "bob", Command{Payload: &SetACLArgs{Handle: bobW, ACL: &ACLNames{}}}), KindPermission)
	aclWant(t, "a bad ACL name", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: secretH, ACL: &ACLNames{Read: "a/b"}}}), KindBadRequest)

	// Rewriting acl/ops invalidates caches of every node whose read ACL it is.
	aclWant(t, "read ACL ops", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: secretH, ACL: &ACLNames{Read: "ops"}}}), KindNone)
	got := h.f.AffectedPaths(&Command{Payload: &SetContentsArgs{Handle: opsH}})
	if !slices.Contains(got, fsmtPath("secret")) || !slices.Contains(got, fsmtPath("acl/ops")) {
		t.Fatalf("a write of acl/ops affects %v", got)
	}
	if !h.f.CanRead(bob, fsmtPath("secret"), "root") || h.f.CanRead(carol, fsmtPath("secret"), "root") {
		t.Fatal("CanRead disagrees with acl/ops")
	}
	// The snapshot carries creators and names: a restored FSM decides alike.
	g, err := fsmtRestore(t, fsmtCell, fsmtSnapshotBytes(t, h.f))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Allowed(fsmtPath("secret"), "carol", false, acl.Read); err == nil || !errors.Is(err, &Error{Kind: KindPermission}) {
		t.Fatalf("restored FSM lets carol read: %v", err)
	}
	if err := g.Allowed(fsmtPath("secret"), "bob", false, acl.Read); err != nil {
		t.Fatalf("restored FSM denies bob: %v", err)
	}
	if got, want := g.PrincipalSessions("bob"), h.f.PrincipalSessions("bob"); got != want || want != 1 {
		t.Fatalf("bob's sessions: %d after restore, %d before (want 1)", got, want)
	}
}

func TestStateHashFollowsState(t *testing.T) {
	a, b := newFSMT(t), newFSMT(t)
	for _, h := range []*fsmtH{a, b} {
		s := h.session()
		h.set(s, h.mustOpen(s, "f", fsmtRWC), "x")
	}
	ia, ha, err := a.f.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	ib, hb, _ := b.f.StateHash()
	if ia != ib || ha != hb {
		t.Fatalf("same log, different hashes: %d %x vs %d %x", ia, ha, ib, hb)
	}
	s := b.session()
	b.set(s, b.mustOpen(s, "g", fsmtRWC), "y")
	if _, hb2, _ := b.f.StateHash(); hb2 == ha {
		t.Fatal("the hash did not change with the state")
	}
}

// Permission reads run concurrently under the FSM's read lock while the
// parsed-ACL cache fills (go test -race catches a cache written under it).
func TestACLChecksConcurrentWithCacheFill(t *testing.T) {
	h := newFSMT(t)
	root := h.sessionOf("root")
	h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}})
	fh := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/r"), Flags: fsmtRWC, Contents: []byte("bob\n")}}).Handle
	nh := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("n"), Flags: fsmtRWC}}).Handle
	h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: nh, ACL: &ACLNames{Read: "r"}}})
	for round := range 3 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.f.Allowed(fsmtPath("n"), "bob", false, acl.Read)
				h.f.CanRead(root, fsmtPath("n"), "root")
			}()
		}
		wg.Wait()
		// A rewrite must not be hidden by the cached parse.
		body := "bob\n"
		if round%2 == 0 {
			body = "carol\n"
		}
		h.aclDo(root, "root", Command{Payload: &SetContentsArgs{Handle: fh, Contents: []byte(body)}})
		if got := h.f.Allowed(fsmtPath("n"), "bob", false, acl.Read) == nil; got != (body == "bob\n") {
			t.Fatalf("round %d: bob may read = %v after the file became %q", round, got, body)
		}
	}
}
