package fsm

import (
	"strings"
	"testing"
)

// A name the caller may neither read nor write must answer every call
// exactly as a missing name does: same kind, same message with the names
// swapped. The one answer that cannot match is a create that would succeed
// on the missing name, in a directory the caller may write: the name is
// taken, and it says so without telling what took it.

// hiddenFixture builds, as the admin:
//
//	acl/all   "*"           acl/ops  "ops"
//	pub/      write: all    (anyone may create in it; anyone may read)
//	pub/hd/   read, write: ops  (hidden from carol)
//	pub/hd/sub/                 (inherits ops: hidden)
//	pub/hf    read, write: ops  (hidden file), locked by ops
//	pub/v     write: all    (carol's visible file)
//	closed/                 default names, creator admin (carol reads, may not write)
//	closed/hf read, write: ops
type hiddenFixture struct {
	h                 *fsmtH
	admin, ops, carol uint64
	lockGen           uint64
}

func newHiddenFixture(t *testing.T) *hiddenFixture {
	h := newFSMT(t)
	x := &hiddenFixture{h: h, admin: h.sessionOf("root"), ops: h.sessionOf("ops"), carol: h.sessionOf("carol")}
	mk := func(rel string, flags uint32, contents string, names *ACLNames) uint64 {
		t.Helper()
		r := h.aclDo(x.admin, "root", Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC | flags, Contents: []byte(contents)}})
		aclWant(t, "admin creates "+rel, r, KindNone)
		if names != nil {
			aclWant(t, "admin names "+rel+"'s ACLs", h.aclDo(x.admin, "root", Command{Payload: &SetACLArgs{Handle: r.Handle, ACL: names}}), KindNone)
		}
		return r.Handle
	}
	mk("acl", FlagDirectory, "", nil)
	mk("acl/all", 0, "*\n", nil)
	mk("acl/ops", 0, "ops\n", nil)
	mk("pub", FlagDirectory, "", &ACLNames{Write: "all"})
	mk("pub/hd", FlagDirectory, "", &ACLNames{Read: "ops", Write: "ops"})
	mk("pub/hd/sub", FlagDirectory, "", nil)
	mk("pub/hf", 0, "", &ACLNames{Read: "ops", Write: "ops"})
	mk("pub/v", 0, "", nil)
	mk("closed", FlagDirectory, "", nil)
	mk("closed/hf", 0, "", &ACLNames{Read: "ops", Write: "ops"})
	r := h.aclDo(x.ops, "ops", Command{Payload: &OpenArgs{Path: fsmtPath("pub/hf"), Flags: fsmtRW}})
	aclWant(t, "ops opens pub/hf", r, KindNone)
	r = h.aclDo(x.ops, "ops", Command{Payload: &AcquireArgs{Handle: r.Handle, Mode: LockExclusive}})
	aclWant(t, "ops locks pub/hf", r, KindNone)
	x.lockGen = r.LockGen
	return x
}

// sameAnswer fails unless the two results carry errors of one kind whose
// messages are equal once the hidden name is written as the missing one.
func sameAnswer(t *testing.T, what string, hidden, missing *Result, hiddenName, missingName string) {
	t.Helper()
	if hidden.Err == nil || missing.Err == nil {
		t.Errorf("%s: hidden %+v, missing %+v: want the same error", what, hidden.Err, missing.Err)
		return
	}
	hm := strings.ReplaceAll(hidden.Err.Msg, hiddenName, missingName)
	if hidden.Err.Kind != missing.Err.Kind || hm != missing.Err.Msg {
		t.Errorf("%s: hidden name answers kind %d %q, missing name kind %d %q", what, hidden.Err.Kind, hidden.Err.Msg, missing.Err.Kind, missing.Err.Msg)
	}
}

func TestACLHiddenNamesAnswerAsMissing(t *testing.T) {
	x := newHiddenFixture(t)
	h := x.h
	carol := func(c Command) *Result { t.Helper(); return h.aclDo(x.carol, "carol", c) }
	open := func(rel string, flags uint32) *Result {
		t.Helper()
		return carol(Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags}})
	}
	flagSets := map[string]uint32{
		"read": FlagRead, "write": FlagWrite, "read-write": fsmtRW, "read-dir": FlagRead | FlagDirectory,
		"write-dir": FlagWrite | FlagDirectory, "create": fsmtRWC, "create-excl": fsmtRWC | FlagExcl,
		"create-dir": fsmtRWC | FlagDirectory, "create-excl-dir": fsmtRWC | FlagExcl | FlagDirectory,
		"create-ephemeral": fsmtRWC | FlagEphemeral, "create-excl-ephemeral": fsmtRWC | FlagExcl | FlagEphemeral,
	}
	// Below a hidden name: a hidden directory, a hidden file, a hidden
	// directory in a hidden directory, a missing name in a hidden
	// directory; each against the same path under a missing name.
	for _, tc := range []struct{ path, hidden, missing string }{
		{"/x", "pub/hd", "pub/md"},
		{"/x", "pub/hf", "pub/mf"},
		{"/sub/x", "pub/hd", "pub/md"},
		{"/nosuch/x", "pub/hd", "pub/md"},
		{"/y/x", "pub/hf", "pub/mf"},
		{"/x", "closed/hf", "closed/mf"},
	} {
		under := func(top string) string { return top + tc.path }
		for name, flags := range flagSets {
			sameAnswer(t, "carol "+name+" "+under(tc.hidden), open(under(tc.hidden), flags), open(under(tc.missing), flags),
				fsmtPath(tc.hidden), fsmtPath(tc.missing))
		}
	}
	// The hidden name itself, opened without create: not found.
	for _, tc := range []struct{ hidden, missing string }{{"pub/hd", "pub/md"}, {"pub/hf", "pub/mf"}, {"pub/hd/sub", "pub/md/sub"}, {"closed/hf", "closed/mf"}} {
		for name, flags := range flagSets {
			if flags&FlagCreate != 0 {
				continue
			}
			sameAnswer(t, "carol "+name+" "+tc.hidden, open(tc.hidden, flags), open(tc.missing, flags), fsmtPath(tc.hidden), fsmtPath(tc.missing))
		}
	}
	// A create of the hidden name itself where carol may not create (the
	// parent is not hers to write): exactly the missing name's answer.
	for name, flags := range flagSets {
		if flags&FlagCreate == 0 {
			continue
		}
		sameAnswer(t, "carol "+name+" closed/hf", open("closed/hf", flags), open("closed/mf", flags), fsmtPath("closed/hf"), fsmtPath("closed/mf"))
		sameAnswer(t, "carol "+name+" pub/hd/sub", open("pub/hd/sub", flags), open("pub/md/sub", flags), fsmtPath("pub/hd"), fsmtPath("pub/md"))
	}
	// Where carol may create (pub is everyone's to write), a taken name
	// cannot be created: "exists", the same for a hidden file and a
	// hidden directory, whatever the flags ask for.
	var exists string
	for _, rel := range []string{"pub/hf", "pub/hd"} {
		for name, flags := range flagSets {
			if flags&FlagCreate == 0 {
				continue
			}
			r := open(rel, flags)
			if r.Err == nil || r.Err.Kind != KindExists {
				t.Errorf("carol %s %s where she may create: %+v, want exists", name, rel, r.Err)
				continue
			}
			msg := strings.ReplaceAll(r.Err.Msg, fsmtPath(rel), "NAME")
			if exists == "" {
				exists = msg
			} else if msg != exists {
				t.Errorf("carol %s %s: %q; another taken hidden name answers %q", name, rel, msg, exists)
			}
		}
	}
	// Creates with bad arguments answer as for a missing name (bad
	// request), checked before the name is found taken.
	sameAnswer(t, "carol mkdir with contents over pub/hf",
		carol(Command{Payload: &OpenArgs{Path: fsmtPath("pub/hf"), Flags: fsmtRWC | FlagDirectory, Contents: []byte("x")}}),
		carol(Command{Payload: &OpenArgs{Path: fsmtPath("pub/mf"), Flags: fsmtRWC | FlagDirectory, Contents: []byte("x")}}),
		fsmtPath("pub/hf"), fsmtPath("pub/mf"))
	if h.exists("pub/hd/x") || h.exists("pub/mf") || h.exists("pub/md") {
		t.Fatal("a refused create made a node")
	}

	// A sequencer whose lock carol may not read is checked as one whose
	// lock file is gone: attached to her write of her own file, and asked
	// about directly.
	vh := carol(Command{Payload: &OpenArgs{Path: fsmtPath("pub/v"), Flags: fsmtRW}})
	aclWant(t, "carol opens pub/v", vh, KindNone)
	fence := func(rel string) *Result {
		return carol(Command{Fence: &Fence{Path: fsmtPath(rel), Mode: LockExclusive, Generation: x.lockGen}, Payload: &SetContentsArgs{Handle: vh.Handle, Contents: []byte("x")}})
	}
	sameAnswer(t, "carol's write fenced by pub/hf's lock", fence("pub/hf"), fence("pub/mf"), fsmtPath("pub/hf"), fsmtPath("pub/mf"))
	for _, gen := range []uint64{x.lockGen, x.lockGen + 1} {
		hok, hr := h.f.FenceValidFor(&Fence{Path: fsmtPath("pub/hf"), Mode: LockExclusive, Generation: gen}, "carol", false)
		mok, mr := h.f.FenceValidFor(&Fence{Path: fsmtPath("pub/mf"), Mode: LockExclusive, Generation: gen}, "carol", false)
		if hok || mok || strings.ReplaceAll(hr, fsmtPath("pub/hf"), fsmtPath("pub/mf")) != mr {
			t.Errorf("sequencer check at generation %d: hidden lock %v %q, missing lock %v %q", gen, hok, hr, mok, mr)
		}
	}
	// The lock's readers and the admin get the truth.
	if ok, r := h.f.FenceValidFor(&Fence{Path: fsmtPath("pub/hf"), Mode: LockExclusive, Generation: x.lockGen}, "ops", false); !ok {
		t.Errorf("ops's own sequencer: stale (%s)", r)
	}
	if ok, r := h.f.FenceValidFor(&Fence{Path: fsmtPath("pub/hf"), Mode: LockExclusive, Generation: x.lockGen}, "root", true); !ok {
		t.Errorf("the admin's check of ops's sequencer: stale (%s)", r)
	}
	if got := h.f.nodes[fsmtPath("pub/v")].Contents; len(got) != 0 {
		t.Fatalf("a write fenced by a hidden lock went through: %q", got)
	}
}

// Deleting a directory that is not empty says so without counting its
// children: the count would reveal children the caller may not see.
func TestACLDeleteNotEmptyCountsNothing(t *testing.T) {
	x := newHiddenFixture(t)
	h := x.h
	one := h.aclDo(x.admin, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/one"), Flags: fsmtRWC | FlagDirectory}})
	aclWant(t, "mkdir pub/one", one, KindNone)
	h.aclDo(x.admin, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/one/a"), Flags: fsmtRWC}})
	r1 := h.aclDo(x.admin, "root", Command{Payload: &DeleteArgs{Handle: one.Handle}})
	dh := h.aclDo(x.admin, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/hd"), Flags: fsmtRW | FlagDirectory}})
	aclWant(t, "open pub/hd", dh, KindNone)
	h.aclDo(x.admin, "root", Command{Payload: &OpenArgs{Path: fsmtPath("pub/hd/y"), Flags: fsmtRWC}})
	r2 := h.aclDo(x.admin, "root", Command{Payload: &DeleteArgs{Handle: dh.Handle}})
	sameAnswer(t, "delete of a non-empty directory", r1, r2, fsmtPath("pub/one"), fsmtPath("pub/hd"))
	if r1.Err == nil || r1.Err.Kind != KindNotEmpty {
		t.Fatalf("delete of a non-empty directory: %+v", r1.Err)
	}
}
