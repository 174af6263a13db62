package fsm

import (
	"encoding/hex"
	"flag"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"
)

func (h *fsmtH) ttlOpen(s uint64, rel string, ttl time.Duration) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC, TTL: int64(ttl)}})
}

// expire proposes the TTL deletion the master would, for what DueTTLs
// reports at the driver's clock.
func (h *fsmtH) expireDue() []string {
	h.t.Helper()
	due, _ := View{f: h.f}.DueTTLs(h.now, 100)
	var gone []string
	for _, d := range due {
		if r := h.raw(Command{Payload: &ExpireTTLArgs{Path: d.Path, Instance: d.Instance, Gen: d.Gen}}); r.Err == nil {
			gone = append(gone, d.Path[len(fsmtRoot)+1:])
		}
	}
	return gone
}

// A TTL file is due, and deleted, once MTime+TTL passes without a write; a
// write moves its deadline; the deletion applies only for the instance
// and generation the master saw and at a stamped time past the deadline.
func TestTTLNodeExpiresUnlessWritten(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	a := h.ttlOpen(s, "a", time.Second)
	wantOK(t, "create a", a)
	if a.Stat.TTL != int64(time.Second) || a.Stat.Container {
		t.Fatalf("stat of a TTL file: %+v", a.Stat)
	}
	wantOK(t, "create b", h.ttlOpen(s, "b", 2*time.Second))
	if due := h.expireDue(); len(due) != 0 {
		t.Fatalf("due at once: %v", due)
	}
	stale := View{f: h.f}
	due0, next := stale.DueTTLs(h.now+int64(time.Second), 10)
	if len(due0) != 1 || next != h.now+int64(2*time.Second) {
		t.Fatalf("at +1s: due %+v next %d", due0, next)
	}

	h.now += int64(900 * time.Millisecond)
	wantOK(t, "write a", h.set(s, a.Handle, "x")) // a's deadline moves to +1.9s
	h.now += int64(200 * time.Millisecond)
	// The master saw a's old generation: the write wins.
	r := h.raw(Command{Payload: &ExpireTTLArgs{Path: due0[0].Path, Instance: due0[0].Instance, Gen: due0[0].Gen}})
	wantKind(t, "expiry of a written TTL file", r, KindGenerationMismatch)
	// A deadline not yet reached by the entry's own time is refused too.
	cur, _ := View{f: h.f}.DueTTLs(h.now+int64(time.Hour), 10)
	r = h.raw(Command{Payload: &ExpireTTLArgs{Path: cur[0].Path, Instance: cur[0].Instance, Gen: cur[0].Gen}})
	wantKind(t, "expiry before the deadline", r, KindBadRequest)
	if !h.exists("a") || !h.exists("b") {
		t.Fatal("a refused expiry deleted something")
	}

	h.now += int64(time.Second) // +2.1s: both due
	if got := h.expireDue(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("expired %v, want [a b]", got)
	}
	if h.exists("a") || h.exists("b") || (View{f: h.f}).TTLNodes() != 0 {
		t.Fatal("expired TTL files survive")
	}
	if len(h.changesOf(ChangeDeleted)) != 1 {
		t.Fatalf("the last expiry reported %v", h.changes)
	}
	wantKind(t, "a's handle after expiry", h.set(s, a.Handle, "y"), KindHandleInvalid)
	// Re-made under the same name, a new instance is not the one expired.
	wantOK(t, "re-create b", h.ttlOpen(s, "b", time.Second))
	r = h.raw(Command{Payload: &ExpireTTLArgs{Path: fsmtPath("b"), Instance: 1, Gen: h.node("b").ContentGen}})
	wantKind(t, "expiry of an older instance", r, KindNotFound)
}

// A held lock does not keep a TTL node: it goes as with a Delete, and
// its waiters are told their wait ended.
func TestTTLNodeExpiresWhileLocked(t *testing.T) {
	h := newFSMT(t)
	s, s2 := h.session(), h.session()
	a := h.ttlOpen(s, "a", time.Second)
	wantOK(t, "create", a)
	wantOK(t, "lock", fsmtR(h.acquire(s, a.Handle, LockExclusive, false)))
	b := h.mustOpen(s2, "a", fsmtRW)
	if r, _ := h.acquire(s2, b, LockExclusive, true); !r.Queued {
		t.Fatalf("second acquire: %+v", r)
	}
	h.now += int64(time.Second)
	if got := h.expireDue(); len(got) != 1 {
		t.Fatalf("expired %v", got)
	}
	if len(h.changesOf(ChangeWaitEnded)) != 1 {
		t.Fatalf("the waiter was not told: %v", h.changes)
	}
	fsmtCheckInvariants(t, h.f)
}

func TestLifetimeRefusals(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	for _, c := range []struct {
		what  string
		flags uint32
		ttl   time.Duration
	}{
		{"TTL without create", fsmtRW, time.Second},
		{"TTL below the minimum", fsmtRWC, MinTTL - 1},
		{"TTL above the maximum", fsmtRWC, MaxTTL + 1},
		{"negative TTL", fsmtRWC, -time.Second},
		{"TTL directory", fsmtRWC | FlagDirectory, time.Second},
		{"ephemeral TTL file", fsmtRWC | FlagEphemeral, time.Second},
		{"container file", fsmtRWC | FlagContainer, 0},
		{"ephemeral container", fsmtRWC | FlagDirectory | FlagEphemeral | FlagContainer, 0},
		{"TTL container", fsmtRWC | FlagDirectory | FlagContainer, time.Second},
	} {
		r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("x"), Flags: c.flags, TTL: int64(c.ttl)}})
		wantKind(t, c.what, r, KindBadRequest)
	}
	if h.exists("x") {
		t.Fatal("a refused open made x")
	}
	h.mustOpen(s, ACLDirName, fsmtRWC|FlagDirectory)
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(ACLDirName + "/all"), Flags: fsmtRWC, Contents: []byte("*\n"), TTL: int64(time.Second)}})
	wantKind(t, "TTL ACL file", r, KindBadRequest)
	wantOK(t, "TTL at the minimum", h.ttlOpen(s, "min", MinTTL))
	wantOK(t, "TTL at the maximum", h.ttlOpen(s, "max", MaxTTL))
	// The master's own command of a node that is no TTL node.
	h.mustOpen(s, "plain", fsmtRWC)
	n := h.node("plain")
	wantKind(t, "expiry of a plain file", h.raw(Command{Payload: &ExpireTTLArgs{Path: n.Path, Instance: n.Instance, Gen: n.ContentGen}}), KindBadRequest)
}

// A container goes with its last child, whatever removes it (a Delete,
// a TTL expiry, its ephemeral child's session), and a chain of containers
// goes with it; a container never given a child stays.
func TestContainerGoesWithItsLastChild(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	c := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("c"), Flags: fsmtRWC | FlagDirectory | FlagContainer}})
	wantOK(t, "create container", c)
	if !c.Stat.Container || !c.Stat.Dir {
		t.Fatalf("container stat %+v", c.Stat)
	}
	h.mustOpen(s, "c/inner", fsmtRWC|FlagDirectory|FlagContainer)
	x := h.mustOpen(s, "c/inner/x", fsmtRWC)
	y := h.mustOpen(s, "c/y", fsmtRWC)
	h.mustOpen(s, "never", fsmtRWC|FlagDirectory|FlagContainer)

	wantOK(t, "delete x", h.do(s, Command{Payload: &DeleteArgs{Handle: x}}))
	if h.exists("c/inner") || !h.exists("c") {
		t.Fatal("deleting inner's last child: inner should go, c (with y) stay")
	}
	wantOK(t, "delete y", h.do(s, Command{Payload: &DeleteArgs{Handle: y}}))
	if h.exists("c") {
		t.Fatal("c survived its last child")
	}
	// The events of a delete, for the container too.
	var removed []string
	for _, ch := range h.changesOf(ChangeChildRemoved) {
		removed = append(removed, ch.Path+" "+ch.Child)
	}
	if want := []string{fsmtPath("c") + " y", fsmtRoot + " c"}; !slices.Equal(removed, want) {
		t.Fatalf("child-removed changes %v, want %v", removed, want)
	}
	if del := h.changesOf(ChangeDeleted); len(del) != 2 || del[1].Path != fsmtPath("c") {
		t.Fatalf("deleted changes %+v", del)
	}
	if !h.exists("never") {
		t.Fatal("a container never given a child went")
	}

	// By TTL expiry, and by an ephemeral child's session.
	h.mustOpen(s, "t", fsmtRWC|FlagDirectory|FlagContainer)
	wantOK(t, "TTL child", h.ttlOpen(s, "t/f", time.Second))
	h.now += int64(time.Second)
	h.expireDue()
	if h.exists("t") {
		t.Fatal("container t survived its TTL child's expiry")
	}
	s2 := h.session()
	h.mustOpen(s, "e", fsmtRWC|FlagDirectory|FlagContainer)
	h.mustOpen(s2, "e/eph", fsmtRWC|FlagEphemeral)
	wantOK(t, "expire s2", h.raw(Command{Session: s2, Payload: &CloseSessionArgs{Expired: true}}))
	if h.exists("e") {
		t.Fatal("container e survived its ephemeral child's session")
	}
	fsmtCheckInvariants(t, h.f)
}

// AffectedPaths names what a container's removal with its last child and
// a TTL expiry change, before they are proposed.
func TestLifetimeAffectedPaths(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "c", fsmtRWC|FlagDirectory|FlagContainer)
	h.mustOpen(s, "c/d", fsmtRWC|FlagDirectory|FlagContainer)
	x := h.mustOpen(s, "c/d/x", fsmtRWC)
	got := View{f: h.f}.AffectedPaths(&Command{Session: s, Payload: &DeleteArgs{Handle: x}})
	want := []string{fsmtRoot, fsmtPath("c"), fsmtPath("c/d"), fsmtPath("c/d/x")}
	if !slices.Equal(got, want) {
		t.Fatalf("delete of a container chain's last child: %v, want %v", got, want)
	}
	wantOK(t, "ttl", h.ttlOpen(s, "c/t", time.Second))
	n := h.node("c/t")
	got = View{f: h.f}.AffectedPaths(&Command{Payload: &ExpireTTLArgs{Path: n.Path, Instance: n.Instance, Gen: n.ContentGen}})
	// A superset: c, a container, could be emptied by it.
	if !slices.Equal(got, []string{fsmtRoot, fsmtPath("c"), fsmtPath("c/t")}) {
		t.Fatalf("TTL expiry: %v", got)
	}
}

// Snapshot versions: a state with no TTL node and no container keeps
// writing the version before (5, 4 or 3), one with either writes 7, and
// restoring keeps the rules and the expiry index.
func TestLifetimeSnapshotVersions(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "plain", fsmtRWC)
	if v := fsmtImage(t, h.snapshot()).Version; v != snapshotV3 {
		t.Fatalf("a state without lifetimes snapshots as version %d", v)
	}
	wantOK(t, "ttl", h.ttlOpen(s, "t", time.Second))
	h.mustOpen(s, "c", fsmtRWC|FlagDirectory|FlagContainer)
	b := h.snapshot()
	if v := fsmtImage(t, b).Version; v != snapshotV7 {
		t.Fatalf("a state with a TTL node snapshots as version %d", v)
	}
	f, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.nodes[fsmtPath("t")]; n.TTL != int64(time.Second) || !f.nodes[fsmtPath("c")].Container {
		t.Fatal("restore lost a lifetime rule")
	}
	h2 := h.clone(f)
	h2.now += int64(time.Second)
	if got := h2.expireDue(); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("after restore, expired %v", got)
	}
}

// A snapshot of version 7 written once and committed
// (testdata/snapshot-v7.bin, with -write-lifetime-snapshot), and the
// bytes of the two new command types (23, 24). The files, not the code
// that wrote them, are the record.
const (
	ttlSnapshotV7 = "testdata/snapshot-v7.bin"
	// ttlOpenEntryV2 is Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6,
	// Principal: "p", Payload: &OpenArgs{Path: "/ls/c/t", Flags:
	// Read|Write|Create, Contents: "x", TTL: 30s}}.Encode().
	ttlOpenEntryV2 = "029286a174cc18a2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000007a161cf0000000000000006a27072a17084a170a72f6c732f632f74a166ce00000007a163c40178a2746cd300000006fc23ac00"
	// ttlExpireEntryV2 is Command{Time: fsmtBase, Payload:
	// &ExpireTTLArgs{Path: "/ls/c/t", Instance: 9, Gen: 11}}.Encode().
	ttlExpireEntryV2 = "029282a174cc17a2746dd317979cfe362a000083a170a72f6c732f632f74a169cf0000000000000009a167cf000000000000000b"
)

var writeTTLSnapshot = flag.Bool("write-lifetime-snapshot", false, "write "+ttlSnapshotV7+" (TestWriteLifetimeSnapshot)")

func ttlGoldenState(t *testing.T) *fsmtH {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "c", fsmtRWC|FlagDirectory|FlagContainer)
	h.mustOpen(s, "c/x", fsmtRWC)
	h.mustOpen(s, "empty", fsmtRWC|FlagDirectory|FlagContainer)
	a := h.ttlOpen(s, "c/t", 30*time.Second)
	wantOK(t, "ttl", a)
	h.now += int64(time.Second)
	wantOK(t, "write", h.set(s, a.Handle, "kept"))
	return h
}

func goldenLifetimeEntries(t *testing.T) (open, expire Command) {
	open = Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6, Principal: "p",
		Payload: &OpenArgs{Path: "/ls/c/t", Flags: fsmtRWC, Contents: []byte("x"), TTL: int64(30 * time.Second)}}
	expire = Command{Time: fsmtBase, Payload: &ExpireTTLArgs{Path: "/ls/c/t", Instance: 9, Gen: 11}}
	return open, expire
}

func TestWriteLifetimeSnapshot(t *testing.T) {
	if !*writeTTLSnapshot {
		t.Skip("writes the golden version-7 snapshot only with -write-lifetime-snapshot")
	}
	if err := os.WriteFile(ttlSnapshotV7, ttlGoldenState(t).snapshot(), 0o644); err != nil {
		t.Fatal(err)
	}
	open, expire := goldenLifetimeEntries(t)
	for _, c := range []Command{open, expire} {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %q", c.Type, hex.EncodeToString(b))
	}
}

// The committed version-7 snapshot restores to the state today's code
// builds and snapshots to its own bytes; the committed entries decode to
// their commands, of types 24 and 23, and re-encode to their bytes.
func TestLifetimeGoldenSnapshotAndEntries(t *testing.T) {
	f := restoreGolden(t, ttlSnapshotV7, 7, ttlGoldenState(t).snapshot())
	if n := f.nodes[fsmtPath("c/t")]; n == nil || n.TTL != int64(30*time.Second) || n.MTime != fsmtBase+int64(time.Second) {
		t.Fatalf("the TTL node restored as %+v", n)
	}
	open, expire := goldenLifetimeEntries(t)
	for _, g := range []struct {
		hex  string
		want Command
		ty   CmdType
	}{{ttlOpenEntryV2, open, CmdOpenLifetime}, {ttlExpireEntryV2, expire, CmdExpireTTL}} {
		c, _ := goldenEntry(t, g.hex, g.ty)
		g.want.Type = g.ty
		if !reflect.DeepEqual(c, &g.want) {
			t.Fatalf("the committed %s entry decodes to %+v %+v", g.ty, c, c.Payload)
		}
	}
}

// The master's expiries enter the audit trail as expire_ttl of the name,
// with what came of them.
func TestExpireTTLIsAudited(t *testing.T) {
	h := newFSMT(t)
	a := &recordingAuditor{}
	h.f.SetAuditor(a)
	s := h.raw(Command{Client: "w", Principal: "ops", Admin: true, Payload: &CreateSessionArgs{}}).Session
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("t"), Flags: fsmtRWC, TTL: int64(time.Second)}})
	n := h.node("t")
	h.raw(Command{Payload: &ExpireTTLArgs{Path: n.Path, Instance: n.Instance, Gen: n.ContentGen}}) // not yet due
	h.now += int64(time.Second)
	h.raw(Command{Payload: &ExpireTTLArgs{Path: n.Path, Instance: n.Instance, Gen: n.ContentGen}})
	if got, want := a.ops(), "create_session::ok create:/t:ok expire_ttl:/t:bad_request expire_ttl:/t:ok"; got != want {
		t.Fatalf("records\n%s\nwant\n%s", got, want)
	}
}

// A sequential create takes a TTL too (ZooKeeper's
// PERSISTENT_SEQUENTIAL_WITH_TTL), under the lifetime command type.
func TestSequentialTTLFile(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "q", fsmtRWC|FlagDirectory|FlagContainer)
	p := &OpenArgs{Path: fsmtPath("q/job-"), Flags: fsmtRWC | FlagSequential, TTL: int64(time.Second)}
	r := h.do(s, Command{Payload: p})
	wantSeqName(t, h, r, "q/job-0000000000")
	if p.CmdType() != CmdOpenLifetime || r.Stat.TTL != int64(time.Second) {
		t.Fatalf("type %s, stat %+v", p.CmdType(), r.Stat)
	}
	h.now += int64(time.Second)
	if got := h.expireDue(); !slices.Equal(got, []string{"q/job-0000000000"}) {
		t.Fatalf("expired %v", got)
	}
	if h.exists("q") {
		t.Fatal("the container q survived its only (sequential TTL) child")
	}
}

// Seeding a cell from a backup drops sessions and their ephemeral nodes;
// a container they leave empty goes too (up a chain), as the end of those
// sessions would have taken it; one with a kept child, or never used,
// stays, and a TTL file keeps its TTL.
func TestSeedDropsContainersEmptiedOfEphemerals(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	box := fsmtRWC | FlagDirectory | FlagContainer
	h.mustOpen(s, "c", box)
	h.mustOpen(s, "c/inner", box)
	h.mustOpen(s, "c/inner/eph", fsmtRWC|FlagEphemeral)
	h.mustOpen(s, "k", box)
	h.mustOpen(s, "k/eph", fsmtRWC|FlagEphemeral)
	wantOK(t, "ttl", h.ttlOpen(s, "k/t", time.Second))
	h.mustOpen(s, "never", box)
	f, res := seededFromBackup(t, h.f, 1)
	for name, want := range map[string]bool{"c": false, "c/inner": false, "k": true, "k/t": true, "never": true} {
		if (f.nodes[fsmtPath(name)] != nil) != want {
			t.Errorf("%s kept: %v, want %v", name, !want, want)
		}
	}
	if res.DroppedEphemeral != 4 {
		t.Errorf("dropped %d, want 2 ephemeral files and 2 containers", res.DroppedEphemeral)
	}
	if n := f.nodes[fsmtPath("k/t")]; n == nil || n.TTL != int64(time.Second) {
		t.Error("the seeded TTL file lost its TTL")
	}
}
