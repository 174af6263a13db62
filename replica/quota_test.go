package replica

import (
	"maps"
	"strings"
	"testing"
)

// Quotas are decided by apply, against the state the command meets: these
// tests drive the FSM as the log would and check what each quota lets
// through, that a refusal changes nothing, and that the counts stay equal
// to a recount of the nodes through every kind of change and a restore.

// checkUsage fails unless the running counts equal a recount of the nodes.
func (h *fsmtH) checkUsage(what string) {
	h.t.Helper()
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	want := usageOf(h.f.nodes, h.f.Root())
	if h.f.usage.bytes != want.bytes || !maps.Equal(h.f.usage.byCreator, want.byCreator) {
		h.t.Fatalf("%s: running counts %d bytes %v, a recount gives %d bytes %v", what,
			h.f.usage.bytes, h.f.usage.byCreator, want.bytes, want.byCreator)
	}
}

// pub has the admin (in session root) make a directory pub that alice and
// bob may write, under quota q: three nodes of the admin's.
func (h *fsmtH) pub(root uint64, q *Quota) {
	h.t.Helper()
	t := h.t.(*testing.T)
	aclWant(t, "acl dir", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory, Quota: q}}), KindNone)
	aclWant(t, "acl file", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/all"), Flags: fsmtRWC, Contents: []byte("alice\nbob\n"), Quota: q}}), KindNone)
	r := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub"), Flags: fsmtRWC | FlagDirectory, Quota: q}})
	aclWant(t, "pub", r, KindNone)
	aclWant(t, "open pub", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: r.Handle, ACL: &ACLNames{Read: "all", Write: "all"}}}), KindNone)
}

func (h *fsmtH) create(s uint64, rel string, flags uint32, q *Quota, contents string) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags | FlagCreate, Quota: q, Contents: []byte(contents)}})
}

func wantQuota(t *testing.T, what string, r *Result, mention string) {
	t.Helper()
	if r.Err == nil || r.Err.Kind != KindQuotaExceeded {
		t.Fatalf("%s: want a quota error, got %+v", what, r.Err)
	}
	if !strings.Contains(r.Err.Msg, mention) {
		t.Fatalf("%s: the message %q does not say %q", what, r.Err.Msg, mention)
	}
}

func TestQuotaNodes(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	q := &Quota{Nodes: 3}
	wantOK(t, "create dir", h.create(s, "d", fsmtRW|FlagDirectory, q, ""))
	wantOK(t, "create file", h.create(s, "d/x", fsmtRW, q, ""))
	eph := h.create(s, "d/e", fsmtRW|FlagEphemeral, q, "")
	wantOK(t, "create ephemeral", eph)
	if u := h.f.Usage(); u.Nodes != 3 {
		t.Fatalf("usage %+v, want 3 nodes (the root is not counted)", u)
	}
	wantQuota(t, "fourth node", h.create(s, "d/y", fsmtRW, q, ""), "limit is 3")
	if h.exists("d/y") {
		t.Fatal("a refused create left a node")
	}
	wantQuota(t, "fourth node, a directory", h.create(s, "z", fsmtRW|FlagDirectory, q, ""), "node quota")
	// Opening what exists, with the create flag or not, makes no node.
	wantOK(t, "open existing with create", h.create(s, "d/x", fsmtRW, q, ""))
	wantOK(t, "open existing", h.open(s, "d/x", fsmtRW))
	// An entry without a quota (written before quotas) is not capped.
	wantOK(t, "create without a quota", h.create(s, "free", fsmtRW, nil, ""))
	wantQuota(t, "over the quota now", h.create(s, "d/y", fsmtRW, q, ""), "holds 4 nodes")
	// Closing the ephemeral file's only handle removes it: room for one,
	// once the uncapped node is gone too.
	wantOK(t, "close ephemeral", h.closeH(s, eph.Handle))
	fh := h.mustOpen(s, "free", fsmtRW)
	wantOK(t, "delete", h.do(s, Command{Payload: &DeleteArgs{Handle: fh}}))
	wantOK(t, "create after deletes", h.create(s, "d/y", fsmtRW, q, ""))
	h.checkUsage("after creates and deletes")
	if u := h.f.Usage(); u.Nodes != 3 {
		t.Fatalf("usage %+v, want 3 nodes", u)
	}
}

func TestQuotaContentBytes(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	q := &Quota{ContentBytes: 10}
	r := h.create(s, "a", fsmtRW, q, "123456")
	wantOK(t, "create with 6 bytes", r)
	a := r.Handle
	wantQuota(t, "create with 5 more", h.create(s, "b", fsmtRW, q, "12345"), "limit of 10")
	if h.exists("b") {
		t.Fatal("a refused create left a node")
	}
	r = h.create(s, "b", fsmtRW, q, "1234")
	wantOK(t, "create with 4 more: exactly full", r)
	b := r.Handle
	before := h.stat(s, a)
	wantQuota(t, "grow a by one", h.do(s, Command{Payload: &SetContentsArgs{Handle: a, Contents: []byte("1234567"), Quota: q}}), "content quota")
	if got := string(h.node("a").Contents); got != "123456" || h.stat(s, a) != before {
		t.Fatalf("a refused write changed the file: %q %+v", got, h.stat(s, a))
	}
	wantOK(t, "rewrite a at the same size", h.do(s, Command{Payload: &SetContentsArgs{Handle: a, Contents: []byte("abcdef"), Quota: q}}))
	wantOK(t, "shrink a", h.do(s, Command{Payload: &SetContentsArgs{Handle: a, Contents: []byte("ab"), Quota: q}}))
	wantOK(t, "grow b into the freed bytes", h.do(s, Command{Payload: &SetContentsArgs{Handle: b, Contents: []byte("12345678"), Quota: q}}))
	if u := h.f.Usage(); u.ContentBytes != 10 {
		t.Fatalf("usage %+v, want 10 bytes", u)
	}
	wantOK(t, "delete b", h.do(s, Command{Payload: &DeleteArgs{Handle: b}}))
	if u := h.f.Usage(); u.ContentBytes != 2 {
		t.Fatalf("usage %+v after the delete, want 2 bytes", u)
	}
	// A quota lowered below what is held: nothing grows, shrinking still works.
	low := &Quota{ContentBytes: 1}
	wantQuota(t, "grow over a lowered quota", h.do(s, Command{Payload: &SetContentsArgs{Handle: a, Contents: []byte("abc"), Quota: low}}), "limit of 1")
	wantOK(t, "shrink under a lowered quota", h.do(s, Command{Payload: &SetContentsArgs{Handle: a, Contents: []byte("a"), Quota: low}}))
	wantOK(t, "empty file under a full quota", h.create(s, "c", fsmtRW, low, ""))
	h.checkUsage("after writes")
}

func TestQuotaNodesPerPrincipal(t *testing.T) {
	h := newFSMT(t)
	root, alice, bob := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("bob")
	q := &Quota{NodesPerPrincipal: 2}
	h.pub(root, q) // the admin's three nodes: the admin is exempt

	mk := func(s uint64, who, rel string) *Result {
		return h.aclDo(s, who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC, Quota: q}})
	}
	aclWant(t, "alice 1", mk(alice, "alice", "pub/a1"), KindNone)
	r := mk(alice, "alice", "pub/a2")
	aclWant(t, "alice 2", r, KindNone)
	a2 := r.Handle
	wantQuota(t, "alice 3", mk(alice, "alice", "pub/a3"), `principal "alice"`)
	if h.exists("pub/a3") {
		t.Fatal("a refused create left a node")
	}
	aclWant(t, "bob is counted apart", mk(bob, "bob", "pub/b1"), KindNone)
	// A node alice created and bob deletes frees alice's count.
	aclWant(t, "alice deletes a2", h.aclDo(alice, "alice", Command{Payload: &DeleteArgs{Handle: a2}}), KindNone)
	aclWant(t, "alice 3 after a delete", mk(alice, "alice", "pub/a3"), KindNone)
	if n := h.f.PrincipalNodes("alice"); n != 2 {
		t.Fatalf("alice has %d nodes, want 2", n)
	}
	if n := h.f.PrincipalNodes("root"); n != 3 {
		t.Fatalf("the admin has %d nodes, want 3 (counted, not capped)", n)
	}
	// Closing alice's session takes her ephemeral nodes and their count.
	aclWant(t, "alice's ephemeral", h.aclDo(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("pub/ae"), Flags: fsmtRWC | FlagEphemeral}}), KindNone)
	if n := h.f.PrincipalNodes("alice"); n != 3 {
		t.Fatalf("alice has %d nodes with an uncapped ephemeral one, want 3", n)
	}
	wantOK(t, "close alice's session", h.raw(Command{Session: alice, Payload: &CloseSessionArgs{}}))
	if n := h.f.PrincipalNodes("alice"); n != 2 {
		t.Fatalf("alice has %d nodes after her session closed, want 2", n)
	}
	h.checkUsage("after per-principal changes")
}

// The counts are derived from the nodes: a restored snapshot counts what
// the original did, and a quota decides the same on both.
func TestQuotaSurvivesRestore(t *testing.T) {
	h := newFSMT(t)
	root, s := h.sessionOf("root"), h.sessionOf("alice")
	h.pub(root, nil)
	q := &Quota{Nodes: 7, ContentBytes: 100, NodesPerPrincipal: 3}
	for _, rel := range []string{"a", "b", "c"} {
		wantOK(t, "create "+rel, h.aclDo(s, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("pub/" + rel), Flags: fsmtRWC, Quota: q, Contents: []byte(strings.Repeat(rel, 30))}}))
	}
	f2, err := fsmtRestore(t, fsmtCell, h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{Nodes: 6, ContentBytes: 90 + int64(len("alice\nbob\n"))}
	if got, orig := f2.Usage(), h.f.Usage(); got != orig || got != want {
		t.Fatalf("restored usage %+v, original %+v, want %+v", got, orig, want)
	}
	if f2.PrincipalNodes("alice") != 3 {
		t.Fatalf("restored: alice has %d nodes, want 3", f2.PrincipalNodes("alice"))
	}
	h2 := h.clone(f2)
	for _, d := range []*fsmtH{h, h2} {
		wantQuota(t, "alice's fourth", d.aclDo(s, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("pub/d"), Flags: fsmtRWC, Quota: q}}), `"alice"`)
		wantOK(t, "the admin's seventh node", d.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/r"), Flags: fsmtRWC, Quota: q}}))
		wantQuota(t, "the admin's eighth node", d.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/r2"), Flags: fsmtRWC, Quota: q}}), "limit is 7")
	}
	h2.checkUsage("restored")
}
