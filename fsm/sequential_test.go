package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// seqOpen applies a sequential create of prefix (below the root) as session
// s's next request.
func (h *fsmtH) seqOpen(s uint64, prefix string, flags uint32) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(prefix), Flags: flags | FlagCreate | FlagSequential}})
}

// wantSeqName checks a sequential create made name (below the root), opened
// its handle on it and reported it.
func wantSeqName(t *testing.T, h *fsmtH, r *Result, name string) {
	t.Helper()
	wantOK(t, "sequential create of "+name, r)
	if r.Name != fsmtPath(name) || !r.Created {
		t.Fatalf("made %q (created %v), want %q", r.Name, r.Created, fsmtPath(name))
	}
	if got := h.f.handles[r.Handle]; got == nil || got.Path != r.Name || got.Instance != r.Stat.Instance {
		t.Fatalf("handle %+v does not name %s", got, r.Name)
	}
	if !h.exists(name) {
		t.Fatalf("%s does not exist", name)
	}
}

// A sequential create appends the directory's counter in ten digits; the
// counter grows per directory, never hands a number out twice (not after
// its node is deleted, not across a snapshot), skips names made by hand,
// and a retried request gets its first name back without making another.
func TestSequentialNamesCountPerDirectoryAndSkipTaken(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "other", fsmtRWC|FlagDirectory)

	r0 := h.seqOpen(s, "q/job-", fsmtRW)
	wantSeqName(t, h, r0, "q/job-0000000000")
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000001")
	// The counter is the directory's, not the prefix's.
	wantSeqName(t, h, h.seqOpen(s, "q/lock-", fsmtRW|FlagEphemeral), "q/lock-0000000002")
	wantSeqName(t, h, h.seqOpen(s, "other/job-", fsmtRW), "other/job-0000000000")
	// A directory, and a prefix ending in '/' (digits alone).
	wantSeqName(t, h, h.seqOpen(s, "q/d-", fsmtRW|FlagDirectory), "q/d-0000000003")
	if !h.node("q/d-0000000003").Dir {
		t.Fatal("q/d-0000000003 is not a directory")
	}
	wantSeqName(t, h, h.seqOpen(s, "q/", fsmtRW), "q/0000000004")
	// Initial contents come with the create.
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential, Contents: []byte("payload")}})
	wantSeqName(t, h, r, "q/job-0000000005")
	if c := string(h.node("q/job-0000000005").Contents); c != "payload" {
		t.Fatalf("contents %q", c)
	}

	// Deleting the newest child does not give its number back.
	wantOK(t, "delete", h.do(s, Command{Payload: &DeleteArgs{Handle: r.Handle}}))
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000006")

	// Names made by hand where the counter goes are skipped, in order.
	h.mustOpen(s, "q/job-0000000007", fsmtRWC)
	h.mustOpen(s, "q/job-0000000008", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "q/job-0000000010", fsmtRWC)
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000009")
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000011")
	if got := h.node("q").ChildSeq; got != 12 {
		t.Fatalf("q's counter is %d, want 12", got)
	}

	// A retry of the same request answers with the first name and makes
	// nothing.
	h.seq[s]++
	c := Command{Session: s, Seq: h.seq[s], Ack: h.seq[s] - 1, Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential}}
	first := h.raw(c)
	again := h.raw(c)
	if first.Name != fsmtPath("q/job-0000000012") || again.Name != first.Name || again.Handle != first.Handle {
		t.Fatalf("first %q (handle %d), retry %q (handle %d)", first.Name, first.Handle, again.Name, again.Handle)
	}
	if got := h.node("q").ChildSeq; got != 13 {
		t.Fatalf("after a retry q's counter is %d, want 13", got)
	}

	// The counter is in the snapshot: a restored replica goes on from it.
	snap := h.snapshot()
	if img := fsmtImage(t, snap); img.Version != snapshotV5 {
		t.Fatalf("a state with counters snapshots as version %d, want %d", img.Version, snapshotV5)
	}
	f, err := fsmtRestore(t, fsmtCell, snap)
	if err != nil {
		t.Fatal(err)
	}
	h2 := h.clone(f)
	wantSeqName(t, h2, h2.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000013")
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000013")
	if _, a, _ := h.f.StateHash(); true {
		if _, b, _ := f.StateHash(); a != b {
			t.Fatal("the restored replica and the original differ after the same create")
		}
	}
	fsmtCheckInvariants(t, h.f)

	// A directory deleted and made again starts its count afresh.
	hd := h.mustOpen(s, "gone", fsmtRWC|FlagDirectory)
	wantSeqName(t, h, h.seqOpen(s, "gone/x-", fsmtRW), "gone/x-0000000000")
	h.closeH(s, h.seqOpen(s, "gone/x-", fsmtRW).Handle)
	for _, n := range []string{"gone/x-0000000000", "gone/x-0000000001"} {
		wantOK(t, "delete "+n, h.do(s, Command{Payload: &DeleteArgs{Handle: h.mustOpen(s, n, fsmtRW)}}))
	}
	wantOK(t, "delete gone", h.do(s, Command{Payload: &DeleteArgs{Handle: hd}}))
	h.mustOpen(s, "gone", fsmtRWC|FlagDirectory)
	wantSeqName(t, h, h.seqOpen(s, "gone/x-", fsmtRW), "gone/x-0000000000")
}

// Bad sequential creates fail with a typed error and change nothing: no
// create flag, a prefix that leaves no room for the number, an ACL file,
// a missing or file parent, and a directory past its last number.
func TestSequentialRefusals(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "f", fsmtRWC)
	h.mustOpen(s, ACLDirName, fsmtRWC|FlagDirectory)

	wantKind(t, "no create", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRW | FlagSequential}}), KindBadRequest)
	long := strings.Repeat("x", SeqMaxComponentLen-SeqDigits+1)
	wantKind(t, "component too long", h.seqOpen(s, "q/"+long, fsmtRW), KindBadRequest)
	wantOK(t, "component at the limit", h.seqOpen(s, "q/"+long[1:], fsmtRW))
	wantKind(t, "ACL file", h.seqOpen(s, ACLDirName+"/a-", fsmtRW), KindBadRequest)
	wantKind(t, "missing parent", h.seqOpen(s, "nope/job-", fsmtRW), KindNotFound)
	wantKind(t, "file parent", h.seqOpen(s, "f/job-", fsmtRW), KindNotDir)
	wantKind(t, "directory with contents", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("q/d-"),
		Flags: fsmtRWC | FlagSequential | FlagDirectory, Contents: []byte("x")}}), KindBadRequest)
	if got := h.node("q").ChildSeq; got != 1 {
		t.Fatalf("refused creates moved the counter to %d", got)
	}

	// A directory at its last number hands it out, then refuses; the
	// names made so far keep their order.
	img := fsmtImage(t, h.snapshot())
	for _, n := range img.Nodes {
		if n.Path == fsmtPath("q") {
			n.ChildSeq = MaxChildSeq
		}
	}
	b, err := msgpack.Marshal(&img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatal(err)
	}
	h = h.clone(f)
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-9999999999")
	wantKind(t, "past the last number", h.seqOpen(s, "q/job-", fsmtRW), KindBadRequest)

	// A snapshot claiming a counter on a file, or past the last number,
	// is refused.
	for what, set := range map[string]func(n *Node){
		"counter on a file": func(n *Node) {
			if n.Path == fsmtPath("f") {
				n.ChildSeq = 3
			}
		},
		"counter past the last": func(n *Node) {
			if n.Path == fsmtPath("q") {
				n.ChildSeq = MaxChildSeq + 2
			}
		},
	} {
		img := fsmtImage(t, h.snapshot())
		for _, n := range img.Nodes {
			set(n)
		}
		b, err := msgpack.Marshal(&img)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fsmtRestore(t, fsmtCell, b); err == nil {
			t.Errorf("%s: restored", what)
		}
	}
}

// A sequential create needs write on the parent like any create; a
// principal that may not see the parent is told it does not exist; the
// quota on nodes caps it.
func TestSequentialACLAndQuota(t *testing.T) {
	h := newFSMT(t)
	root, alice, bob := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("bob")
	aclWant(t, "admin makes q", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("q"), Flags: fsmtRWC | FlagDirectory}}), KindNone)
	aclWant(t, "admin makes acl", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName), Flags: fsmtRWC | FlagDirectory}}), KindNone)
	aclWant(t, "admin makes acl/alice", h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName + "/alice"),
		Flags: fsmtRWC, Contents: []byte("alice\n")}}), KindNone)
	qh := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("q"), Flags: fsmtRW | FlagDirectory}}).Handle
	aclWant(t, "q writable by alice", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: qh, ACL: &ACLNames{Write: "alice"}}}), KindNone)

	seq := Command{Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential}}
	r := h.aclDo(alice, "alice", seq)
	aclWant(t, "alice, a writer of q", r, KindNone)
	if r.Name != fsmtPath("q/job-0000000000") || h.node("q/job-0000000000").Creator != "alice" {
		t.Fatalf("made %q", r.Name)
	}
	aclWant(t, "bob, a reader of q", h.aclDo(bob, "bob", seq), KindPermission)
	// Hidden parent: bob may neither read nor write it.
	aclWant(t, "q hidden from bob", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: qh, ACL: &ACLNames{Read: "alice", Write: "alice"}}}), KindNone)
	aclWant(t, "bob, q hidden", h.aclDo(bob, "bob", seq), KindNotFound)
	if got := h.node("q").ChildSeq; got != 1 {
		t.Fatalf("refused creates moved the counter to %d", got)
	}

	// The quota counts a sequential create as one node.
	nodes := int64(len(h.f.nodes)) - 1 // the root is not counted
	q := &Quota{Nodes: nodes}
	quoted := Command{Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential, Quota: q}}
	aclWant(t, "alice at the node quota", h.aclDo(alice, "alice", quoted), KindQuotaExceeded)
	q.Nodes = nodes + 1
	aclWant(t, "alice under the node quota", h.aclDo(alice, "alice", quoted), KindNone)
}

// A snapshot of the version before (4), with no counters, restores with
// every counter at 0; a state whose counters are all 0 is still written
// as the older version, so a replica of the version before can install
// it during a rolling upgrade; one with a counter is written as
// version 5, which the version before refuses rather than forget it.
func TestSequentialSnapshotVersions(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "q/job-0000000000", fsmtRWC) // by hand: no counter
	old := h.snapshot()
	img := fsmtImage(t, old)
	if img.Version != snapshotV3 {
		t.Fatalf("a state without counters or resumes snapshots as version %d, want %d", img.Version, snapshotV3)
	}
	if strings.Contains(string(old), "\xa2sq") {
		t.Fatal("a state without counters carries the counter's key")
	}
	for _, v := range []uint8{2, 3, 4} {
		img := fsmtImage(t, old)
		img.Version = v
		b, err := msgpack.Marshal(&img)
		if err != nil {
			t.Fatal(err)
		}
		f, err := fsmtRestore(t, fsmtCell, b)
		if err != nil {
			t.Fatalf("restore of a version-%d snapshot: %v", v, err)
		}
		h2 := h.clone(f)
		// Counter 0, and the hand-made name at 0 is skipped.
		wantSeqName(t, h2, h2.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000001")
		if got := fsmtImage(t, h2.snapshot()).Version; got != snapshotV5 {
			t.Fatalf("after a sequential create the snapshot is version %d, want %d", got, snapshotV5)
		}
	}
	// A backup is written at the same version as the snapshot.
	h.seqOpen(s, "q/job-", fsmtRW)
	bk, err := h.f.Backup(1, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadBackup(bytes.NewReader(backupBytes(t, bk)))
	if err != nil {
		t.Fatal(err)
	}
	if got.img.Version != snapshotV5 || !bytes.Equal(got.Snapshot, h.snapshot()) {
		t.Fatalf("a backup with a counter is version %d, or not the snapshot's bytes", got.img.Version)
	}
}

// The master invalidates the parent's listing before a sequential create
// (the name it makes is not known until it is applied), even when a node
// is named like the prefix.
func TestSequentialAffectedPaths(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "q/job-", fsmtRWC)
	var got []string
	_ = h.f.Read(func(v View) error {
		got = v.AffectedPaths(&Command{Session: s, Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential}})
		return nil
	})
	if len(got) != 1 || got[0] != fsmtPath("q") {
		t.Fatalf("affected %v, want [%s]", got, fsmtPath("q"))
	}
}

// A sequential open is a command type of its own, so a replica of a
// version without sequential names stops at it (an unknown type) instead
// of creating the prefix; an entry whose type and flags disagree is
// malformed in both log versions; an Open without the flag encodes as it
// always did.
func TestSequentialOpenHasItsOwnCommandType(t *testing.T) {
	seq := &Command{Session: 1, Seq: 1, Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential}}
	b, err := seq.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if seq.Type != CmdOpenSequential {
		t.Fatalf("a sequential open encodes as type %s", seq.Type)
	}
	c, err := DecodeCommand(b)
	if err != nil || c.Type != CmdOpenSequential || c.Payload.(*OpenArgs).Flags&FlagSequential == 0 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	plain := &Command{Session: 1, Seq: 1, Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC}}
	if _, err := plain.Encode(); err != nil || plain.Type != CmdOpen {
		t.Fatalf("a plain open encodes as type %s (%v)", plain.Type, err)
	}
	mismatch := func(v byte, parts ...any) []byte {
		b, err := msgpack.Marshal(parts)
		if err != nil {
			t.Fatal(err)
		}
		if v == commandV1 {
			b, err = msgpack.Marshal(parts[0])
			if err != nil {
				t.Fatal(err)
			}
		}
		return append([]byte{v}, b...)
	}
	for name, b := range map[string][]byte{
		"v2 Open with the flag": mismatch(commandVersion, map[string]any{"t": CmdOpen},
			map[string]any{"p": fsmtPath("q/job-"), "f": fsmtRWC | FlagSequential}),
		"v2 OpenSequential without it": mismatch(commandVersion, map[string]any{"t": CmdOpenSequential},
			map[string]any{"p": fsmtPath("q/job-"), "f": fsmtRWC}),
		"v1 Open with the flag": mismatch(commandV1, map[string]any{"t": CmdOpen, "tm": 1, "p": fsmtPath("q/job-"),
			"f": fsmtRWC | FlagSequential}),
	} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("%s: %v, want ErrMalformedCommand", name, err)
		}
	}
}

// The audit trail records a sequential create under the name it made (a
// refused one under its prefix), so an operator can find who made an item.
func TestSequentialAuditNamesTheNodeMade(t *testing.T) {
	h := newFSMT(t)
	a := &recordingAuditor{}
	h.f.SetAuditor(a)
	s := h.raw(Command{Client: "w", Principal: "ops", Admin: true, Payload: &CreateSessionArgs{}}).Session
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("q"), Flags: fsmtRWC | FlagDirectory}})
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential}})
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("nope/job-"), Flags: fsmtRWC | FlagSequential}})
	if got, want := a.ops(), "create_session::ok create:/q:ok create:/q/job-0000000000:ok create:/nope/job-:not_found"; got != want {
		t.Fatalf("records\n%s\nwant\n%s", got, want)
	}
}

// A snapshot of version 5 written once and committed
// (testdata/snapshot-v5.bin, with -write-sequential-snapshot): directories
// with counters, a counter moved past a hand-made name, a deleted
// sequential child, an ephemeral sequential directory, and a session
// whose de-duplication table holds a sequential open's result with its
// name. And the bytes of one sequential open entry (command type 21). The
// files, not the code that wrote them, are the record: any change to how
// either encodes fails here.
const (
	seqSnapshotV5 = "testdata/snapshot-v5.bin"
	// seqOpenEntryV2 is Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6,
	// Principal: "p", Payload: &OpenArgs{Path: "/ls/c/q/job-", Flags:
	// Read|Write|Create|Sequential, Contents: "x"}}.Encode().
	seqOpenEntryV2 = "029286a174cc15a2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000007a161cf0000000000000006a27072a17083a170ac2f6c732f632f712f6a6f622da166ce00000047a163c40178"
)

var writeSeqSnapshot = flag.Bool("write-sequential-snapshot", false, "write "+seqSnapshotV5+" (TestWriteSequentialSnapshot)")

// seqGoldenState builds the state seqSnapshotV5 holds.
func seqGoldenState(t *testing.T) (*fsmtH, uint64) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "other", fsmtRWC|FlagDirectory)
	first := h.seqOpen(s, "q/job-", fsmtRW).Handle                        // job-0000000000
	h.mustOpen(s, "q/job-0000000001", fsmtRWC)                            // by hand
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000002") // skips it
	wantSeqName(t, h, h.seqOpen(s, "q/d-", fsmtRW|FlagDirectory|FlagEphemeral), "q/d-0000000003")
	wantOK(t, "delete job-0", h.do(s, Command{Payload: &DeleteArgs{Handle: first}}))
	wantSeqName(t, h, h.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000004") // its result stays in the table
	return h, s
}

func TestWriteSequentialSnapshot(t *testing.T) {
	if !*writeSeqSnapshot {
		t.Skip("writes the golden version-5 snapshot only with -write-sequential-snapshot")
	}
	h, _ := seqGoldenState(t)
	if err := os.WriteFile(seqSnapshotV5, h.snapshot(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6, Principal: "p",
		Payload: &OpenArgs{Path: "/ls/c/q/job-", Flags: fsmtRWC | FlagSequential, Contents: []byte("x")}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seqOpenEntryV2 = %q", hex.EncodeToString(b))
}

// The committed version-5 snapshot restores, with its counters and the
// de-duplicated name; re-snapshotted it gives the same bytes; the state
// it describes is the one the code of today builds; and sequential names
// go on from its counters. The committed sequential entry decodes and
// re-encodes to its bytes.
func TestSequentialSnapshotV5Restores(t *testing.T) {
	h, s := seqGoldenState(t)
	f := restoreGolden(t, seqSnapshotV5, 5, h.snapshot())
	if got := f.nodes[fsmtPath("q")].ChildSeq; got != 5 {
		t.Fatalf("q's counter restored as %d, want 5", got)
	}
	var named int
	for _, r := range f.sessions[s].Results {
		if r.Name == fsmtPath("q/job-0000000004") {
			named++
		}
	}
	if named != 1 {
		t.Fatal("the de-duplicated result of the last sequential open lost its name")
	}
	h2 := h.clone(f)
	wantSeqName(t, h2, h2.seqOpen(s, "q/job-", fsmtRW), "q/job-0000000005")
	wantSeqName(t, h2, h2.seqOpen(s, "other/x-", fsmtRW), "other/x-0000000000")

	c, _ := goldenEntry(t, seqOpenEntryV2, CmdOpenSequential)
	p, ok := c.Payload.(*OpenArgs)
	if !ok || c.Session != 2 || c.Seq != 7 || p.Path != "/ls/c/q/job-" ||
		p.Flags != fsmtRWC|FlagSequential || string(p.Contents) != "x" {
		t.Fatalf("the committed entry decodes to %+v %+v", c, c.Payload)
	}
}
