package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
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

// The per-principal content quota counts the contents of the files each
// principal created, whoever writes them; the admin is exempt, and a
// delete, a shrinking write or the end of a session frees the creator's
// share.
func TestQuotaContentBytesPerPrincipal(t *testing.T) {
	h := newFSMT(t)
	root, alice, bob := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("bob")
	q := &Quota{ContentBytesPerPrincipal: 10}
	h.pub(root, q) // the admin's ACL file holds 10 bytes: exempt
	mk := func(s uint64, who, rel, contents string) *Result {
		return h.aclDo(s, who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC, Quota: q, Contents: []byte(contents)}})
	}
	write := func(s uint64, who string, handle uint64, contents string) *Result {
		return h.aclDo(s, who, Command{Payload: &SetContentsArgs{Handle: handle, Contents: []byte(contents), Quota: q}})
	}
	r := mk(alice, "alice", "pub/a1", "123456")
	aclWant(t, "alice's 6 bytes", r, KindNone)
	a1 := r.Handle
	wantQuota(t, "alice's 5 more", mk(alice, "alice", "pub/a2", "12345"), `principal "alice"`)
	if h.exists("pub/a2") {
		t.Fatal("a refused create left a node")
	}
	r = mk(alice, "alice", "pub/a2", "1234")
	aclWant(t, "alice's 4 more: her share is full", r, KindNone)
	a2 := r.Handle
	wantQuota(t, "alice grows a1", write(alice, "alice", a1, "1234567"), "limit of 10 per principal")
	if got := string(h.node("pub/a1").Contents); got != "123456" {
		t.Fatalf("a refused write changed the file: %q", got)
	}
	// bob is counted apart, and grows his own files while alice is full.
	r = mk(bob, "bob", "pub/b1", "1234567890")
	aclWant(t, "bob's 10 bytes", r, KindNone)
	// bob may write alice's file, but its bytes are hers: he cannot grow
	// it past her share (nor is his own share charged).
	bobOnA1 := h.aclDo(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("pub/a1"), Flags: fsmtRW}})
	aclWant(t, "bob opens alice's file", bobOnA1, KindNone)
	wantQuota(t, "bob grows alice's file", write(bob, "bob", bobOnA1.Handle, "1234567"), `principal "alice"`)
	aclWant(t, "bob shrinks alice's file", write(bob, "bob", bobOnA1.Handle, "12"), KindNone)
	if a, b := h.f.PrincipalContentBytes("alice"), h.f.PrincipalContentBytes("bob"); a != 6 || b != 10 {
		t.Fatalf("content by creator: alice %d, bob %d; want 6, 10", a, b)
	}
	aclWant(t, "alice grows a1 into what bob freed", write(alice, "alice", a1, "123456"), KindNone)
	// The admin is exempt: it grows alice's file past her share, and
	// makes files of its own.
	adminOnA2 := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/a2"), Flags: fsmtRW}})
	aclWant(t, "the admin grows alice's file", h.aclDo(root, "root", Command{Payload: &SetContentsArgs{Handle: adminOnA2.Handle, Contents: []byte("123456789012"), Quota: q}}), KindNone)
	aclWant(t, "the admin's own 20 bytes", mk(root, "root", "pub/r", strings.Repeat("r", 20)), KindNone)
	if a := h.f.PrincipalContentBytes("alice"); a != 18 {
		t.Fatalf("alice's files hold %d bytes, want 18", a)
	}
	wantQuota(t, "alice over her share by the admin's write", write(alice, "alice", a2, "1234567890123"), `principal "alice"`)
	// A delete frees her share; so does the end of her session, with her
	// ephemeral file.
	aclWant(t, "alice deletes a2", h.aclDo(alice, "alice", Command{Payload: &DeleteArgs{Handle: a2}}), KindNone)
	aclWant(t, "alice's ephemeral 4 bytes", h.aclDo(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("pub/ae"), Flags: fsmtRWC | FlagEphemeral, Quota: q, Contents: []byte("eeee")}}), KindNone)
	wantQuota(t, "alice full again", mk(alice, "alice", "pub/a3", "x"), `principal "alice"`)
	wantOK(t, "close alice's session", h.raw(Command{Session: alice, Payload: &CloseSessionArgs{}}))
	alice = h.sessionOf("alice")
	aclWant(t, "alice's room after her session ended", mk(alice, "alice", "pub/a3", "1234"), KindNone)
	h.checkUsage("after per-principal content changes")
}

// The last part of each cell-wide quota is the admin's: every other
// principal is refused at the quota less the reserve, the admin goes on
// up to the quota, and deletes and shrinking writes work for everyone.
func TestQuotaAdminReserve(t *testing.T) {
	h := newFSMT(t)
	root, alice := h.sessionOf("root"), h.sessionOf("alice")
	q := &Quota{Nodes: 8, NodesAdminReserve: 2, ContentBytes: 30, ContentBytesAdminReserve: 6}
	h.pub(root, q) // three nodes, 10 bytes
	mk := func(s uint64, who, rel, contents string) *Result {
		return h.aclDo(s, who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC, Quota: q, Contents: []byte(contents)}})
	}
	r := mk(alice, "alice", "pub/a1", "1234567890")
	aclWant(t, "alice's first", r, KindNone)
	a1 := r.Handle
	aclWant(t, "alice's second", mk(alice, "alice", "pub/a2", "1234"), KindNone)
	// 24 bytes: the others' part of 30 is full.
	wantQuota(t, "alice's one byte more", h.aclDo(alice, "alice", Command{Payload: &SetContentsArgs{Handle: a1, Contents: []byte("12345678901"), Quota: q}}),
		"limit of 30 less the 6 kept for the admin")
	aclWant(t, "alice's third node, empty", mk(alice, "alice", "pub/a3", ""), KindNone)
	// 6 nodes: the others' part of 8 is full.
	wantQuota(t, "alice's fourth node", mk(alice, "alice", "pub/a4", ""), "the limit is 8 of which the last 2 are kept for the admin")
	if h.exists("pub/a4") {
		t.Fatal("a refused create left a node")
	}
	// The admin writes a 2-byte ACL file and fills the rest.
	fix := mk(root, "root", "acl/fix", "x\n")
	aclWant(t, "the admin's ACL file", fix, KindNone)
	rr := mk(root, "root", "pub/r", "1234")
	aclWant(t, "the admin's last node and bytes", rr, KindNone)
	wantQuota(t, "the admin past the quota: nodes", mk(root, "root", "pub/r2", ""), "the limit is 8")
	wantQuota(t, "the admin past the quota: bytes", h.aclDo(root, "root", Command{Payload: &SetContentsArgs{Handle: rr.Handle, Contents: []byte("12345"), Quota: q}}),
		"limit of 30")
	if u := h.f.Usage(); u.Nodes != 8 || u.ContentBytes != 30 {
		t.Fatalf("usage %+v, want 8 nodes and 30 bytes", u)
	}
	// Shrinking and deleting work for everyone in a full cell.
	aclWant(t, "alice shrinks", h.aclDo(alice, "alice", Command{Payload: &SetContentsArgs{Handle: a1, Contents: []byte("1"), Quota: q}}), KindNone)
	aclWant(t, "alice deletes", h.aclDo(alice, "alice", Command{Payload: &DeleteArgs{Handle: a1}}), KindNone)
	// 7 nodes and 21 bytes: still in the admin's part, until the admin
	// deletes its own; then the freed room is the others' again.
	wantQuota(t, "alice in the admin's part", mk(alice, "alice", "pub/a5", ""), "kept for the admin")
	aclWant(t, "the admin deletes a file", h.aclDo(root, "root", Command{Payload: &DeleteArgs{Handle: rr.Handle}}), KindNone)
	aclWant(t, "the admin deletes its ACL file", h.aclDo(root, "root", Command{Payload: &DeleteArgs{Handle: fix.Handle}}), KindNone)
	aclWant(t, "alice after the admin's delete", mk(alice, "alice", "pub/a5", "12345"), KindNone)
	wantQuota(t, "alice into the reserve again", mk(alice, "alice", "pub/a6", ""), "kept for the admin")
	h.checkUsage("after the reserve")
}

// rapidQuotaPrincipals create and write in pub; root is the admin.
var rapidQuotaPrincipals = []string{"root", "alice", "bob"}

// TestQuotaDecisionsMatchRecount drives random creates (ephemeral ones
// too), growing and shrinking writes by the creator or another, deletes,
// closes and session ends by three principals under random quotas, and
// checks after every command that the running counts (cell-wide and per
// creator, nodes and bytes) equal a recount from the nodes, and that each
// quota decision is the one a recount made before the command gives:
// nothing passes a quota, nothing that fits is refused. A restored
// snapshot counts the same.
func TestQuotaDecisionsMatchRecount(t *testing.T) {
	refusals := 0
	var byReason [quotaReasons]uint64
	rapid.Check(t, func(rt *rapid.T) {
		h := newFSMT(t)
		sess := map[string]uint64{}
		for _, p := range rapidQuotaPrincipals {
			sess[p] = h.sessionOf(p)
		}
		h.pub(sess["root"], nil)
		q := &Quota{
			Nodes: rapid.Int64Range(0, 20).Draw(rt, "nodes"), NodesAdminReserve: rapid.Int64Range(0, 3).Draw(rt, "nodesReserve"),
			ContentBytes: rapid.Int64Range(0, 80).Draw(rt, "bytes"), ContentBytesAdminReserve: rapid.Int64Range(0, 8).Draw(rt, "bytesReserve"),
			NodesPerPrincipal: rapid.Int64Range(0, 5).Draw(rt, "nodesPer"), ContentBytesPerPrincipal: rapid.Int64Range(0, 20).Draw(rt, "bytesPer"),
		}
		names := []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"}
		// reference says whether adding nodes and grow bytes charged to
		// owner fits q for who, from a recount of the nodes.
		reference := func(who, owner string, nodes, grow int64) bool {
			h.f.mu.RLock()
			u, count := usageOf(h.f.nodes, h.f.Root()), h.f.nodeCount()
			h.f.mu.RUnlock()
			admin := who == "root"
			nodeLimit, byteLimit := q.Nodes, q.ContentBytes
			if !admin {
				nodeLimit -= q.NodesAdminReserve
				byteLimit -= q.ContentBytesAdminReserve
			}
			switch {
			case nodes > 0 && q.Nodes > 0 && count+nodes > nodeLimit,
				nodes > 0 && q.NodesPerPrincipal > 0 && !admin && u.byCreator[who].nodes+nodes > q.NodesPerPrincipal,
				grow > 0 && q.ContentBytes > 0 && u.bytes+grow > byteLimit,
				grow > 0 && q.ContentBytesPerPrincipal > 0 && !admin && u.byCreator[owner].bytes+grow > q.ContentBytesPerPrincipal:
				return false
			}
			return true
		}
		judge := func(what string, fits bool, r *Result) {
			switch {
			case r.Err != nil && r.Err.Kind == KindQuotaExceeded:
				refusals++
				if fits {
					rt.Fatalf("%s: refused (%s), but a recount says it fits %+v", what, r.Err.Msg, *q)
				}
			case r.Err == nil && !fits:
				rt.Fatalf("%s: succeeded, but a recount says it passes %+v", what, *q)
			}
		}
		contents := func() []byte { return []byte(strings.Repeat("x", rapid.IntRange(0, 12).Draw(rt, "len"))) }
		steps := rapid.IntRange(10, 80).Draw(rt, "steps")
		for i := range steps {
			who := rapid.SampledFrom(rapidQuotaPrincipals).Draw(rt, "who")
			rel := "pub/" + rapid.SampledFrom(names).Draw(rt, "name")
			var what string
			switch op := rapid.IntRange(0, 4).Draw(rt, "op"); op {
			case 0: // create (or open what exists, which makes nothing)
				flags := fsmtRWC
				if rapid.Bool().Draw(rt, "ephemeral") {
					flags |= FlagEphemeral
				}
				c := contents()
				what = fmt.Sprintf("%s creates %s with %d bytes", who, rel, len(c))
				nodes, grow := int64(1), int64(len(c))
				if h.exists(rel) {
					nodes, grow = 0, 0
				}
				judge(what, reference(who, who, nodes, grow), h.aclDo(sess[who], who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags, Quota: q, Contents: c}}))
			case 1: // write through a new handle
				if !h.exists(rel) {
					continue
				}
				r := h.aclDo(sess[who], who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRW}})
				if r.Err != nil {
					rt.Fatalf("%s opens %s: %v", who, rel, r.Err)
				}
				n := h.node(rel)
				c := contents()
				what = fmt.Sprintf("%s writes %d bytes into %s (%d bytes, %s's)", who, len(c), rel, len(n.Contents), n.Creator)
				fits := reference(who, n.Creator, 0, int64(len(c)-len(n.Contents)))
				judge(what, fits, h.aclDo(sess[who], who, Command{Payload: &SetContentsArgs{Handle: r.Handle, Contents: c, Quota: q, Path: fsmtPath(rel)}}))
			case 2: // delete
				if !h.exists(rel) {
					continue
				}
				r := h.aclDo(sess[who], who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRW}})
				if r.Err != nil {
					rt.Fatalf("%s opens %s: %v", who, rel, r.Err)
				}
				what = who + " deletes " + rel
				aclWant(t, what, h.aclDo(sess[who], who, Command{Payload: &DeleteArgs{Handle: r.Handle}}), KindNone)
			case 3: // close a handle: the last of an ephemeral file removes it
				h.f.mu.RLock()
				var open []uint64
				for id := range h.f.sessions[sess[who]].handles {
					open = append(open, id)
				}
				h.f.mu.RUnlock()
				if len(open) == 0 {
					continue
				}
				slices.Sort(open)
				id := rapid.SampledFrom(open).Draw(rt, "handle")
				what = fmt.Sprintf("%s closes handle %d", who, id)
				wantOK(t, what, h.closeH(sess[who], id))
			case 4: // the session ends: its ephemeral files go
				what = who + "'s session ends"
				wantOK(t, what, h.raw(Command{Session: sess[who], Payload: &CloseSessionArgs{Expired: rapid.Bool().Draw(rt, "expired")}}))
				sess[who] = h.sessionOf(who)
			}
			h.checkUsage(fmt.Sprintf("step %d: %s", i, what))
		}
		f2, err := fsmtRestore(t, fsmtCell, h.snapshot())
		if err != nil {
			rt.Fatal(err)
		}
		for r, n := range h.f.QuotaStats("").Refusals {
			byReason[r] += n
		}
		h2 := h.clone(f2)
		h2.checkUsage("restored")
		for _, p := range rapidQuotaPrincipals {
			if a, b := h.f.PrincipalContentBytes(p), f2.PrincipalContentBytes(p); a != b {
				rt.Fatalf("%s: %d bytes, restored %d", p, a, b)
			}
		}
	})
	t.Logf("%d refusals; by quota %v", refusals, byReason)
	for r, n := range byReason {
		if n == 0 {
			t.Errorf("no command met the %s quota: the workload tests too little", QuotaReason(r))
		}
	}
}
