package fsm

import (
	"slices"
	"strings"
	"testing"
)

// txn applies a transaction as session s's next request.
func (h *fsmtH) txn(s uint64, checks []TxnCheck, ops ...TxnOp) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &TxnArgs{Checks: checks, Ops: ops}})
}

func txnPath(k uint8, rel string, contents string) TxnOp {
	op := TxnOp{Kind: k, Path: fsmtPath(rel)}
	if contents != "" {
		op.Contents = []byte(contents)
	}
	return op
}

// A transaction applies all its operations at one generation, or, when a
// check fails or an operation cannot apply, none of them: the state (its
// hash) is what it was, and the result names the check or operation.
// Watchers hear what the single operations tell; a retry of the same
// request gets the first outcome; the outcome is kept in a version-6
// snapshot.
func TestTxnAllOrNothing(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "x", fsmtRWC)
	wantOK(t, "set x", h.set(s, fh, "1"))
	h.mustOpen(s, "gone", fsmtRWC)
	h.mustOpen(s, "e", fsmtRWC|FlagDirectory)
	gen := h.node("x").ContentGen
	if v := fsmtImage(t, h.snapshot()).Version; v >= snapshotV6 {
		t.Fatalf("a state without transactions snapshots as version %d", v)
	}

	_, before, _ := h.f.StateHash()
	fail := func(what string, r *Result, k Kind, check, op int) {
		t.Helper()
		wantKind(t, what, r, k)
		if r.Txn == nil || r.Txn.Check != check || r.Txn.Op != op || r.Txn.Gen != 0 {
			t.Fatalf("%s: outcome %+v, want check %d op %d", what, r.Txn, check, op)
		}
		if _, after, _ := h.f.StateHash(); after != before {
			// The de-dup table holds the new result: compare nodes.
			for _, rel := range []string{"x", "gone"} {
				if !h.exists(rel) {
					t.Fatalf("%s: %s was deleted by a failed transaction", what, rel)
				}
			}
			if h.exists("y") || h.exists("d") || string(h.node("x").Contents) != "1" {
				t.Fatalf("%s: a failed transaction changed the namespace", what)
			}
		}
	}
	ops := []TxnOp{txnPath(TxnOpCreateDir, "d", ""), txnPath(TxnOpCreate, "d/y", "new"),
		txnPath(TxnOpSet, "x", "2"), txnPath(TxnOpDelete, "gone", "")}
	r := h.txn(s, []TxnCheck{{Kind: TxnCheckExists, Path: fsmtPath("x")}, {Kind: TxnCheckGeneration, Path: fsmtPath("x"), Gen: gen + 1}}, ops...)
	fail("stale generation", r, KindGenerationMismatch, 2, 0)
	if !strings.Contains(r.Err.Msg, "check 1 ("+fsmtPath("x")+")") {
		t.Fatalf("message %q does not name check 1 and its path", r.Err.Msg)
	}
	fail("missing check", h.txn(s, []TxnCheck{{Kind: TxnCheckMissing, Path: fsmtPath("gone")}}, ops...), KindExists, 1, 0)
	fail("not held", h.txn(s, []TxnCheck{{Kind: TxnCheckHeld, Path: fsmtPath("x")}}, ops...), KindNotHeld, 1, 0)
	// The last operation cannot apply: the earlier ones do not either.
	bad := append(append([]TxnOp(nil), ops...), txnPath(TxnOpSet, "nothere", "z"))
	fail("missing file to set", h.txn(s, nil, bad...), KindNotFound, 0, 5)
	// A directory emptied by an earlier operation of the transaction may
	// go; one filled by an earlier operation may not.
	fail("fill then delete", h.txn(s, nil, txnPath(TxnOpCreate, "e/y", ""), txnPath(TxnOpDelete, "e", "")), KindNotEmpty, 0, 2)
	wantKind(t, "two operations on one name", h.txn(s, nil, txnPath(TxnOpSet, "x", "a"), txnPath(TxnOpSet, "x", "b")), KindBadRequest)
	fail("delete a parent then create in it", h.txn(s, nil, txnPath(TxnOpDelete, "gone", ""), txnPath(TxnOpCreate, "gone/y", "")), KindNotFound, 0, 2)

	// A good one, retried.
	h.seq[s]++
	c := Command{Session: s, Seq: h.seq[s], Ack: h.seq[s] - 1, Payload: &TxnArgs{
		Checks: []TxnCheck{{Kind: TxnCheckGeneration, Path: fsmtPath("x"), Gen: gen}, {Kind: TxnCheckMissing, Path: fsmtPath("d")}},
		Ops:    ops}}
	first := h.raw(c)
	wantOK(t, "transaction", first)
	if first.Txn == nil || first.Txn.Gen != h.idx {
		t.Fatalf("outcome %+v, want generation %d", first.Txn, h.idx)
	}
	if h.changes == nil || len(h.changesOf(ChangeContents)) != 1 || len(h.changesOf(ChangeChildAdded)) != 2 || len(h.changesOf(ChangeDeleted)) != 1 {
		t.Fatalf("changes %+v: want one contents, two child-added, one deleted", h.changes)
	}
	for _, rel := range []string{"x", "d", "d/y"} {
		if g := h.node(rel).ContentGen; g != first.Txn.Gen {
			t.Fatalf("%s: generation %d, want %d", rel, g, first.Txn.Gen)
		}
	}
	if h.exists("gone") || string(h.node("d/y").Contents) != "new" || string(h.node("x").Contents) != "2" {
		t.Fatal("the transaction's operations did not all apply")
	}
	again := h.raw(c)
	if again.Err != nil || again.Txn == nil || *again.Txn != *first.Txn {
		t.Fatalf("retry answered %+v, want the first outcome %+v", again, first.Txn)
	}
	// The outcome is kept in the snapshot, which is now version 6.
	snap := h.snapshot()
	if v := fsmtImage(t, snap).Version; v != snapshotV6 {
		t.Fatalf("snapshot version %d, want %d", v, snapshotV6)
	}
	f2, err := fsmtRestore(t, fsmtCell, snap)
	if err != nil {
		t.Fatal(err)
	}
	h2 := h.clone(f2)
	if r := h2.raw(c); r.Txn == nil || *r.Txn != *first.Txn {
		t.Fatalf("retry after restore answered %+v", r)
	}
}

// A transaction that would pass a quota is refused whole, and net changes
// count: a delete makes room for a create in the same transaction.
func TestTxnQuotaIsWhole(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "a", fsmtRWC)
	q := &Quota{Nodes: 2}
	do := func(ops ...TxnOp) *Result {
		return h.do(s, Command{Payload: &TxnArgs{Ops: ops, Quota: q}})
	}
	r := do(txnPath(TxnOpCreate, "b", ""), txnPath(TxnOpCreate, "c", ""))
	wantKind(t, "two creates past the node quota", r, KindQuotaExceeded)
	if h.exists("b") || h.exists("c") {
		t.Fatal("a refused transaction created a node")
	}
	wantOK(t, "delete and two creates", do(txnPath(TxnOpDelete, "a", ""), txnPath(TxnOpCreate, "b", ""), txnPath(TxnOpCreate, "c", "")))
}

// A check of a name the caller may neither read nor write answers as for
// a missing name, word for word (but the name); an operation on it as the
// single calls do.
func TestTxnHiddenNamesReadAsMissing(t *testing.T) {
	h := newFSMT(t)
	root, bob := h.sessionOf("root"), h.sessionOf("bob")
	aclWant(t, "acl dir", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}}), KindNone)
	aclWant(t, "acl file", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/admins"), Flags: fsmtRWC, Contents: []byte("root\n")}}), KindNone)
	r := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("secret"), Flags: fsmtRWC}})
	aclWant(t, "secret", r, KindNone)
	aclWant(t, "hide secret", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: r.Handle, ACL: &ACLNames{Read: "admins", Write: "admins"}}}), KindNone)

	msg := func(c TxnCheck) (Kind, string) {
		r := h.aclDo(bob, "bob", Command{Payload: &TxnArgs{Checks: []TxnCheck{c}}})
		if r.Err == nil {
			return KindNone, ""
		}
		return r.Err.Kind, strings.ReplaceAll(r.Err.Msg, c.Path, "NAME")
	}
	for _, k := range []uint8{TxnCheckExists, TxnCheckGeneration, TxnCheckHeld} {
		hk, hm := msg(TxnCheck{Kind: k, Path: fsmtPath("secret"), Gen: 5})
		mk, mm := msg(TxnCheck{Kind: k, Path: fsmtPath("nothere"), Gen: 5})
		if hk != mk || hm != mm || hk != KindNotFound {
			t.Fatalf("check kind %d: hidden answers %d %q, missing %d %q", k, hk, hm, mk, mm)
		}
	}
	if k, m := msg(TxnCheck{Kind: TxnCheckMissing, Path: fsmtPath("secret")}); k != KindNone {
		t.Fatalf("check-missing of a hidden name: %d %q", k, m)
	}
	// Writing a hidden file fails as writing a missing one.
	r = h.aclDo(bob, "bob", Command{Payload: &TxnArgs{Ops: []TxnOp{txnPath(TxnOpSet, "secret", "x")}}})
	aclWant(t, "bob sets the hidden file", r, KindNotFound)
	if string(h.node("secret").Contents) != "" {
		t.Fatal("bob wrote a hidden file")
	}
}

// The master invalidates what View.AffectedPaths names before it
// proposes a transaction: every name an applied change of it names is
// among them, for creates in a directory the same transaction makes, a
// set, a delete that empties an ephemeral directory away, and a write of
// an ACL file (whose dependents' listings change).
func TestTxnAffectedPathsCoverItsChanges(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "x", fsmtRWC)
	// An ephemeral directory no handle holds open, with one child: a
	// delete of the child removes it too.
	e := h.mustOpen(s, "e", fsmtRWC|FlagDirectory|FlagEphemeral)
	eh := h.mustOpen(s, "e/only", fsmtRWC)
	h.closeH(s, eh)
	h.closeH(s, e)
	h.mustOpen(s, ACLDirName, fsmtRWC|FlagDirectory)
	h.mustOpen(s, ACLDirName+"/team", fsmtRWC)
	named := h.mustOpen(s, "named", fsmtRWC|FlagDirectory)
	wantOK(t, "name team", h.do(s, Command{Payload: &SetACLArgs{Handle: named, ACL: &ACLNames{Read: "team"}}}))
	h.mustOpen(s, "named/kid", fsmtRWC)
	// The plan knows the delete takes e with it: a create in e after it
	// cannot apply, so neither does the delete.
	r := h.txn(s, nil, txnPath(TxnOpDelete, "e/only", ""), txnPath(TxnOpCreate, "e/z", ""))
	wantKind(t, "create in an ephemeral directory an earlier delete removes", r, KindNotFound)
	if r.Txn == nil || r.Txn.Op != 2 || !h.exists("e/only") {
		t.Fatalf("outcome %+v; e/only exists: %v", r.Txn, h.exists("e/only"))
	}

	for _, ops := range [][]TxnOp{
		{txnPath(TxnOpCreateDir, "d", ""), txnPath(TxnOpCreate, "d/y", "y"), txnPath(TxnOpSet, "x", "2")},
		{txnPath(TxnOpDelete, "e/only", ""), txnPath(TxnOpDelete, "d/y", "")},
		{txnPath(TxnOpSet, ACLDirName+"/team", "p\n")},
	} {
		c := Command{Payload: &TxnArgs{Ops: ops}}
		got := h.f.AffectedPaths(&c)
		r := h.do(s, c)
		wantOK(t, "transaction", r)
		if len(h.changes) == 0 {
			t.Fatal("no changes reported")
		}
		if ops[0].Path == fsmtPath("e/only") && h.exists("e") {
			t.Fatal("deleting the last child of an ephemeral directory no one holds left it")
		}
		for _, ch := range h.changes {
			if ch.Path != "" && !slices.Contains(got, ch.Path) {
				t.Fatalf("%+v: applied change %+v names %s, which AffectedPaths (%q) left out", ops, ch, ch.Path, got)
			}
		}
	}
	if !slices.Contains(h.f.AffectedPaths(&Command{Payload: &TxnArgs{Ops: []TxnOp{txnPath(TxnOpSet, ACLDirName+"/team", "q\n")}}}), fsmtRoot) {
		t.Fatal("a write of an ACL file does not invalidate the listing holding a node that names it")
	}
}

// BenchmarkTxnApply: applying one transaction of the largest shape, 64
// checks and 64 operations (a set of 64 files, each checked at its
// generation), which the state machine holds its lock for.
func BenchmarkTxnApply(b *testing.B) {
	h := newFSMT(b)
	s := h.session()
	var names []string
	for i := range MaxTxnOps {
		rel := "f" + strings.Repeat("x", i%8) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		h.mustOpen(s, rel, fsmtRWC)
		names = append(names, fsmtPath(rel))
	}
	b.ResetTimer()
	for range b.N {
		p := &TxnArgs{}
		for _, n := range names {
			p.Checks = append(p.Checks, TxnCheck{Kind: TxnCheckGeneration, Path: n, Gen: h.f.nodes[n].ContentGen})
			p.Ops = append(p.Ops, TxnOp{Kind: TxnOpSet, Path: n, Contents: []byte("v")})
		}
		if r := h.do(s, Command{Payload: p}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

// A transaction is one audit record, op txn, under its first operation's
// name, with its outcome.
func TestTxnAuditRecord(t *testing.T) {
	h := newFSMT(t)
	a := &recordingAuditor{}
	h.f.SetAuditor(a)
	s := h.raw(Command{Client: "w", Principal: "ops", Admin: true, Payload: &CreateSessionArgs{}}).Session
	do := func(p *TxnArgs) { h.do(s, Command{Principal: "ops", Admin: true, Payload: p}) }
	do(&TxnArgs{Ops: []TxnOp{txnPath(TxnOpCreateDir, "q", ""), txnPath(TxnOpCreate, "q/a", "x")}})
	do(&TxnArgs{Checks: []TxnCheck{{Kind: TxnCheckMissing, Path: fsmtPath("q")}}, Ops: []TxnOp{txnPath(TxnOpDelete, "q/a", "")}})
	if got, want := a.ops(), "create_session::ok txn:/q:ok txn:/q/a:exists"; got != want {
		t.Fatalf("records\n%s\nwant\n%s", got, want)
	}
}

// A delete that empties a container removes it, as a single Delete does
// (removeNode), and the plan of a transaction knows it: a later create in
// the container fails the whole transaction before anything applies,
// rather than half of it applying.
func TestTxnKnowsAContainerGoesWithItsLastChild(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	wantOK(t, "make container", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("c"), Flags: fsmtRWC | FlagDirectory | FlagContainer}}))
	h.mustOpen(s, "c/a", fsmtRWC)
	r := h.txn(s, nil, txnPath(TxnOpDelete, "c/a", ""), txnPath(TxnOpCreate, "c/b", "x"))
	wantKind(t, "create in a container its last child's delete removes", r, KindNotFound)
	if r.Txn == nil || r.Txn.Op != 2 {
		t.Fatalf("outcome %+v, want operation 2 named", r.Txn)
	}
	if !h.exists("c") || !h.exists("c/a") || h.exists("c/b") {
		t.Fatal("a failed transaction changed the namespace")
	}
	// Delete and create in one step keeps the container alive: it has a
	// child all along.
	wantOK(t, "replace the child", h.txn(s, nil, txnPath(TxnOpCreate, "c/b", "x"), txnPath(TxnOpDelete, "c/a", "")))
	if !h.exists("c") || !h.exists("c/b") || h.exists("c/a") {
		t.Fatal("the container or its new child is gone")
	}
}
