package fsm

import (
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// semOpen opens (creating) the semaphore rel of limit permits with a
// lock-delay, and returns the handle.
func (h *fsmtH) semOpen(s uint64, rel string, limit uint32, delay time.Duration) uint64 {
	h.t.Helper()
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC, SemLimit: limit, LockDelay: int64(delay)}})
	if r.Err != nil {
		h.t.Fatalf("open semaphore %s: %v", rel, r.Err)
	}
	return r.Handle
}

func (h *fsmtH) multi(s uint64, wait bool, handles ...uint64) (*Result, uint64) {
	h.t.Helper()
	r := h.do(s, Command{Payload: &AcquireMultiArgs{Handles: handles, Wait: wait}})
	return r, h.seq[s]
}

func (h *fsmtH) fenceOK(rel string, gen uint64, mode uint8) bool {
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	return fenceReasonOf(&Fence{Path: fsmtPath(rel), Mode: mode, Generation: gen}, h.f.nodes[fsmtPath(rel)]) == ""
}

func holdersOf(h *fsmtH, rel string) []uint64 {
	var out []uint64
	for _, ho := range h.node(rel).Holders {
		out = append(out, ho.Session)
	}
	return out
}

// A semaphore of 2 has at most 2 holders; waiters are granted in arrival
// order as permits free; each holder's sequencer names its own
// generation, valid exactly while it holds its permit.
func TestSemaphorePermitsFIFOAndOwnGenerations(t *testing.T) {
	h := newFSMT(t)
	var ss, hs []uint64
	for range 4 {
		s := h.session()
		ss, hs = append(ss, s), append(hs, h.semOpen(s, "sem", 2, 0))
	}
	r0, _ := h.acquire(ss[0], hs[0], LockShared, true)
	r1, _ := h.acquire(ss[1], hs[1], LockShared, true)
	wantOK(t, "first", r0)
	wantOK(t, "second", r1)
	if !r0.Granted || !r1.Granted || r0.LockGen == r1.LockGen {
		t.Fatalf("two permits: %+v %+v", r0, r1)
	}
	try, _ := h.acquire(ss[2], hs[2], LockShared, false)
	wantKind(t, "a third permit", try, KindLockHeld)
	wantKind(t, "exclusive on a semaphore", func() *Result { r, _ := h.acquire(ss[2], hs[2], LockExclusive, true); return r }(), KindBadRequest)
	q2, _ := h.acquire(ss[2], hs[2], LockShared, true)
	q3, _ := h.acquire(ss[3], hs[3], LockShared, true)
	if !q2.Queued || !q3.Queued {
		t.Fatalf("waits: %+v %+v", q2, q3)
	}
	wantOK(t, "release", h.release(ss[0], hs[0]))
	if got := holdersOf(h, "sem"); !slices.Equal(got, []uint64{ss[1], ss[2]}) {
		t.Fatalf("holders after a release: %v, want the second and the first waiter", got)
	}
	if h.fenceOK("sem", r0.LockGen, LockShared) || !h.fenceOK("sem", r1.LockGen, LockShared) {
		t.Fatal("the released permit's sequencer must be stale and the held one's valid")
	}
	if h.fenceOK("sem", r1.LockGen, LockExclusive) {
		t.Fatal("a permit's sequencer in exclusive mode must be stale")
	}
	if st := h.stat(ss[1], hs[1]); st.SemLimit != 2 || st.LockHolders != 2 || st.LockWaiters != 1 {
		t.Fatalf("stat %+v", st)
	}
}

// A holder whose session expires keeps its permit from anyone for its
// lock-delay; a clean release frees a permit at once; one entry granting
// two permits gives them two generations.
func TestSemaphoreLockDelayHoldsBackOnePermit(t *testing.T) {
	h := newFSMT(t)
	a, b, c, d := h.session(), h.session(), h.session(), h.session()
	ha := h.semOpen(a, "sem", 2, 5*time.Second)
	hb := h.semOpen(b, "sem", 2, 5*time.Second)
	hc := h.semOpen(c, "sem", 2, 0)
	hd := h.semOpen(d, "sem", 2, 0)
	h.acquire(a, ha, LockShared, true)
	h.acquire(b, hb, LockShared, true)
	h.acquire(c, hc, LockShared, true)
	h.acquire(d, hd, LockShared, true)
	wantOK(t, "a expires", h.raw(Command{Session: a, Payload: &CloseSessionArgs{Expired: true}}))
	if got := holdersOf(h, "sem"); !slices.Equal(got, []uint64{b}) {
		t.Fatalf("holders after a failed holder: %v, want only b (a's permit is held back)", got)
	}
	if len(h.changesOf(ChangeLockDelay)) == 0 {
		t.Fatal("no lock-delay reported for the master's hand-off")
	}
	wantOK(t, "b expires", h.raw(Command{Session: b, Payload: &CloseSessionArgs{Expired: true}}))
	if got := holdersOf(h, "sem"); len(got) != 0 {
		t.Fatalf("holders while both permits are held back: %v", got)
	}
	wantOK(t, "early grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("sem")}}))
	if len(holdersOf(h, "sem")) != 0 {
		t.Fatal("a Grant before the delay ended handed a permit on")
	}
	h.now += int64(5 * time.Second)
	wantOK(t, "grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("sem")}}))
	n := h.node("sem")
	if got := holdersOf(h, "sem"); !slices.Equal(got, []uint64{c, d}) || n.Holders[0].Gen == n.Holders[1].Gen {
		t.Fatalf("after the delays: holders %+v", n.Holders)
	}
	if !h.fenceOK("sem", n.Holders[0].Gen, LockShared) || !h.fenceOK("sem", n.Holders[1].Gen, LockShared) {
		t.Fatal("both new permits' sequencers must be valid")
	}
	cGen := n.Holders[0].Gen
	wantOK(t, "c releases", h.release(c, hc))
	if h.fenceOK("sem", cGen, LockShared) || h.node("sem").SemDelays != nil {
		t.Fatalf("a clean release: c's sequencer still valid, or a delay left: %+v", h.node("sem"))
	}
}

// Opens of a semaphore: the permit count is set at create, must agree on
// a later create-open, is capped, and is a plain file's only.
func TestSemaphoreOpenRules(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.semOpen(s, "sem", 3, 0)
	wantKind(t, "another count", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("sem"), Flags: fsmtRWC, SemLimit: 4}}), KindExists)
	wantOK(t, "a plain open of it", h.open(s, "sem", fsmtRW))
	h.mustOpen(s, "plain", fsmtRWC)
	wantKind(t, "a plain file as a semaphore", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("plain"), Flags: fsmtRWC, SemLimit: 2}}), KindExists)
	for name, p := range map[string]*OpenArgs{
		"over the cap": {Path: fsmtPath("big"), Flags: fsmtRWC, SemLimit: MaxSemLimit + 1},
		"no create":    {Path: fsmtPath("nc"), Flags: fsmtRW, SemLimit: 2},
		"directory":    {Path: fsmtPath("d"), Flags: fsmtRWC | FlagDirectory, SemLimit: 2},
		"ttl":          {Path: fsmtPath("t"), Flags: fsmtRWC, SemLimit: 2, TTL: int64(time.Second)},
	} {
		wantKind(t, name, h.do(s, Command{Payload: p}), KindBadRequest)
	}
}

// Two groups asking for {A,B} and {B,A} while A is held queue in every
// queue at once; a single waiter on B arriving between them is served in
// its turn; nobody ever holds a part of a group; and the groups are
// granted in arrival order.
func TestMultiLockAllOrNothingInArrivalOrder(t *testing.T) {
	h := newFSMT(t)
	s1, s2, s3, s4 := h.session(), h.session(), h.session(), h.session()
	a1 := h.mustOpen(s1, "A", fsmtRWC)
	a2, b2 := h.mustOpen(s2, "A", fsmtRWC), h.mustOpen(s2, "B", fsmtRWC)
	b3 := h.mustOpen(s3, "B", fsmtRWC)
	b4, a4 := h.mustOpen(s4, "B", fsmtRWC), h.mustOpen(s4, "A", fsmtRWC)
	h.acquire(s1, a1, LockExclusive, false)
	r2, _ := h.multi(s2, true, a2, b2)
	if !r2.Queued || len(h.node("B").Holders) != 0 {
		t.Fatalf("group {A,B} with A held: %+v, B holders %v", r2, h.node("B").Holders)
	}
	try, _ := h.acquire(s3, b3, LockExclusive, false)
	wantKind(t, "B is reserved for the group", try, KindLockHeld)
	h.acquire(s3, b3, LockExclusive, true)
	group := []uint64{b4, a4}
	slices.Sort(group)
	r4, _ := h.multi(s4, true, group...)
	if !r4.Queued {
		t.Fatalf("group {B,A}: %+v", r4)
	}
	wantOK(t, "s1 releases A", h.release(s1, a1))
	if !slices.Equal(holdersOf(h, "A"), []uint64{s2}) || !slices.Equal(holdersOf(h, "B"), []uint64{s2}) {
		t.Fatalf("the first group must get both: A %v B %v", holdersOf(h, "A"), holdersOf(h, "B"))
	}
	wantOK(t, "s2 releases both", h.do(s2, Command{Payload: &ReleaseMultiArgs{Handles: []uint64{a2, b2}}}))
	if len(holdersOf(h, "A")) != 0 || !slices.Equal(holdersOf(h, "B"), []uint64{s3}) {
		t.Fatalf("after the first group: A %v (kept for the second group) B %v (the single waiter's turn)", holdersOf(h, "A"), holdersOf(h, "B"))
	}
	wantOK(t, "s3 releases B", h.release(s3, b3))
	if !slices.Equal(holdersOf(h, "A"), []uint64{s4}) || !slices.Equal(holdersOf(h, "B"), []uint64{s4}) {
		t.Fatalf("the second group must get both: A %v B %v", holdersOf(h, "A"), holdersOf(h, "B"))
	}
	if h.node("A").LockGen != h.node("B").LockGen {
		t.Fatal("a group's locks are granted in one entry")
	}
}

// A group waiting leaves every queue when it is cancelled, when one of its
// handles closes, or when one of its nodes is deleted; a granted group
// cancelled late lets go of every lock.
func TestMultiLockLeavesEveryQueue(t *testing.T) {
	for _, how := range []string{"cancel", "close", "delete", "late cancel"} {
		t.Run(how, func(t *testing.T) {
			h := newFSMT(t)
			s1, s2 := h.session(), h.session()
			a1 := h.mustOpen(s1, "A", fsmtRWC)
			a2, b2 := h.mustOpen(s2, "A", fsmtRWC), h.mustOpen(s2, "B", fsmtRWC)
			h.acquire(s1, a1, LockExclusive, false)
			_, seq := h.multi(s2, true, a2, b2)
			switch how {
			case "cancel":
				wantOK(t, how, h.do(s2, Command{Payload: &CancelWaitArgs{Handle: b2, WaitSeq: seq}}))
			case "close":
				wantOK(t, how, h.closeH(s2, b2))
			case "delete":
				wantOK(t, how, h.do(s2, Command{Payload: &DeleteArgs{Handle: b2}}))
			case "late cancel":
				wantOK(t, "release A", h.release(s1, a1))
				if len(holdersOf(h, "B")) != 1 {
					t.Fatal("the group was not granted")
				}
				wantOK(t, how, h.do(s2, Command{Payload: &CancelWaitArgs{Handle: a2, WaitSeq: seq}}))
			}
			if len(h.node("A").Waiters) != 0 || (h.exists("B") && (len(h.node("B").Waiters) != 0 || len(h.node("B").Holders) != 0)) {
				t.Fatalf("after %s: A waiters %v, B %+v", how, h.node("A").Waiters, h.node("B"))
			}
			if how == "late cancel" && len(h.node("A").Holders) != 0 {
				t.Fatal("a late cancel left A held")
			}
		})
	}
}

// A multi-lock refuses what it cannot honour.
func TestMultiLockRefusals(t *testing.T) {
	h := newFSMT(t)
	s, o := h.session(), h.session()
	a, b := h.mustOpen(s, "A", fsmtRWC), h.mustOpen(s, "B", fsmtRWC)
	a2 := h.mustOpen(s, "A", fsmtRW)
	sem := h.semOpen(s, "sem", 2, 0)
	other := h.mustOpen(o, "D", fsmtRWC)
	wantKind(t, "none", func() *Result { r, _ := h.multi(s, true); return r }(), KindBadRequest)
	wantKind(t, "unsorted", func() *Result { r, _ := h.multi(s, true, b, a); return r }(), KindBadRequest)
	wantKind(t, "one name twice", func() *Result { r, _ := h.multi(s, true, a, a2); return r }(), KindBadRequest)
	wantKind(t, "a semaphore", func() *Result { r, _ := h.multi(s, true, a, sem); return r }(), KindBadRequest)
	wantKind(t, "another session's handle", func() *Result { r, _ := h.multi(s, true, a, other); return r }(), KindHandleInvalid)
	many := make([]uint64, MaxMultiLock+1)
	for i := range many {
		many[i] = uint64(i + 1)
	}
	wantKind(t, "over the cap", func() *Result { r, _ := h.multi(s, true, many...); return r }(), KindBadRequest)
	wantOK(t, "a group", func() *Result { r, _ := h.multi(s, false, a, b); return r }())
	wantKind(t, "release of nothing held", h.do(o, Command{Payload: &ReleaseMultiArgs{Handles: []uint64{other}}}), KindNotHeld)
}

// A snapshot of version 8 written once and committed
// (testdata/snapshot-v8.bin, with -write-semaphore-snapshot), and the
// bytes of the three new command types (27, 28, 29). The files, not the
// code that wrote them, are the record.
const (
	semSnapshotV8 = "testdata/snapshot-v8.bin"
	// semOpenEntryV2 is goldenSemEntries' open, of type 27.
	semOpenEntryV2 = "029286a174cc1ba2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000007a161cf0000000000000006a27072a17084a170a92f6c732f632f73656da166ce00000007a26c64d3000000003b9aca00a2736cce00000003"
	// semMultiEntryV2 is goldenSemEntries' multi-lock, of type 28.
	semMultiEntryV2 = "029286a174cc1ca2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000008a161cf0000000000000007a27072a17082a2687392cf0000000000000009cf000000000000000ba177c3"
	// semReleaseEntryV2 is goldenSemEntries' multi-release, of type 29.
	semReleaseEntryV2 = "029286a174cc1da2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000009a161cf0000000000000008a27072a17081a2687392cf0000000000000009cf000000000000000b"
)

var writeSemSnapshot = flag.Bool("write-semaphore-snapshot", false, "write "+semSnapshotV8+" (TestWriteSemaphoreSnapshot)")

// semGoldenState has a semaphore with two holders, a waiter and a
// held-back permit, and a multi-lock group queued behind a held lock.
func semGoldenState(t *testing.T) *fsmtH {
	h := newFSMT(t)
	a, b, c, d := h.session(), h.session(), h.session(), h.session()
	ha := h.semOpen(a, "sem", 3, 10*time.Second)
	hb := h.semOpen(b, "sem", 3, 0)
	hc := h.semOpen(c, "sem", 3, 0)
	hd := h.semOpen(d, "sem", 3, 0)
	h.acquire(a, ha, LockShared, true)
	h.acquire(b, hb, LockShared, true)
	h.acquire(c, hc, LockShared, true)
	h.acquire(d, hd, LockShared, true)
	wantOK(t, "a expires", h.raw(Command{Session: a, Payload: &CloseSessionArgs{Expired: true}}))
	l1 := h.mustOpen(b, "l1", fsmtRWC)
	h.acquire(b, l1, LockExclusive, false)
	g1, g2 := h.mustOpen(c, "l1", fsmtRWC), h.mustOpen(c, "l2", fsmtRWC)
	if r, _ := h.multi(c, true, g1, g2); !r.Queued {
		t.Fatalf("group: %+v", r)
	}
	return h
}

func goldenSemEntries() (open, multi, release Command) {
	open = Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6, Principal: "p",
		Payload: &OpenArgs{Path: "/ls/c/sem", Flags: fsmtRWC, LockDelay: int64(time.Second), SemLimit: 3}}
	multi = Command{Time: fsmtBase, Session: 2, Seq: 8, Ack: 7, Principal: "p", Payload: &AcquireMultiArgs{Handles: []uint64{9, 11}, Wait: true}}
	release = Command{Time: fsmtBase, Session: 2, Seq: 9, Ack: 8, Principal: "p", Payload: &ReleaseMultiArgs{Handles: []uint64{9, 11}}}
	return open, multi, release
}

func TestWriteSemaphoreSnapshot(t *testing.T) {
	if !*writeSemSnapshot {
		t.Skip("writes the golden version-8 snapshot only with -write-semaphore-snapshot")
	}
	if err := os.WriteFile(semSnapshotV8, semGoldenState(t).snapshot(), 0o644); err != nil {
		t.Fatal(err)
	}
	open, multi, release := goldenSemEntries()
	for _, c := range []Command{open, multi, release} {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %q", c.Type, hex.EncodeToString(b))
	}
}

// The committed version-8 snapshot restores to the state today's code
// builds and snapshots to its own bytes; the committed entries decode to
// their commands, of types 27, 28 and 29, and re-encode to their bytes.
func TestSemaphoreGoldenSnapshotAndEntries(t *testing.T) {
	f := restoreGolden(t, semSnapshotV8, 8, semGoldenState(t).snapshot())
	n := f.nodes[fsmtPath("sem")]
	if n == nil || n.SemLimit != 3 || len(n.Holders) != 2 || len(n.SemDelays) != 1 || len(n.Waiters) != 1 {
		t.Fatalf("the semaphore restored as %+v", n)
	}
	if w := f.nodes[fsmtPath("l2")].Waiters; len(w) != 1 || len(w[0].Group) != 2 {
		t.Fatalf("the group restored as %+v", w)
	}
	open, multi, release := goldenSemEntries()
	for _, g := range []struct {
		hex  string
		want Command
		ty   CmdType
	}{{semOpenEntryV2, open, CmdOpenSemaphore}, {semMultiEntryV2, multi, CmdAcquireMulti}, {semReleaseEntryV2, release, CmdReleaseMulti}} {
		c, _ := goldenEntry(t, g.hex, g.ty)
		g.want.Type = g.ty
		if !reflect.DeepEqual(c, &g.want) {
			t.Fatalf("the committed %s entry decodes to %+v %+v", g.ty, c, c.Payload)
		}
	}
}

// A state without a semaphore or a group is written as the older version
// it needs; one with a semaphore as version 8, which a version-7 reader
// (the restore's version check, here the pinned constant) would refuse.
func TestSemaphoreSnapshotVersion(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "plain", fsmtRWC)
	if v := fsmtImage(t, h.snapshot()).Version; v != snapshotV3 {
		t.Fatalf("a plain state snapshots as version %d", v)
	}
	h.semOpen(s, "sem", 2, 0)
	if v := fsmtImage(t, h.snapshot()).Version; v != 8 {
		t.Fatalf("a state with a semaphore snapshots as version %d", v)
	}
}

// A backup keeps a semaphore (its permit count) and restores it free, as
// it restores every lock: no holders, no held-back permits, no waits, a
// multi-lock group's included; the restored cell grants its N permits.
func TestBackupKeepsSemaphores(t *testing.T) {
	h := semGoldenState(t)
	f, _ := seededFromBackup(t, h.f, 3)
	n := f.nodes[fsmtPath("sem")]
	if n == nil || n.SemLimit != 3 || len(n.Holders)+len(n.Waiters)+len(n.SemDelays) != 0 || n.LockMode != LockFree {
		t.Fatalf("the semaphore restored as %+v", n)
	}
	if w := f.nodes[fsmtPath("l2")].Waiters; len(w) != 0 {
		t.Fatalf("a group's wait outlived the backup: %+v", w)
	}
	h2 := h.clone(f)
	for i := range 4 {
		s := h2.session()
		r, _ := h2.acquire(s, h2.semOpen(s, "sem", 3, 0), LockShared, false)
		if (r.Err == nil) != (i < 3) {
			t.Fatalf("permit %d after restore: %+v", i+1, r)
		}
	}
}

// A version-8 image whose semaphores or groups this version could not
// have made is refused as malformed, and changes nothing.
func TestRestoreRefusesBadSemaphoresAndGroups(t *testing.T) {
	good := semGoldenState(t).snapshot()
	node := func(img *snapshotImage, rel string) *Node {
		for _, n := range img.Nodes {
			if n.Path == fsmtPath(rel) {
				return n
			}
		}
		t.Fatalf("no node %s", rel)
		return nil
	}
	for name, mutate := range map[string]func(img *snapshotImage){
		"more holders than permits": func(img *snapshotImage) { node(img, "sem").SemLimit = 1 },
		"over the cap":              func(img *snapshotImage) { node(img, "sem").SemLimit = MaxSemLimit + 1 },
		"held exclusively":          func(img *snapshotImage) { node(img, "sem").LockMode = LockExclusive },
		"a holder without its own generation": func(img *snapshotImage) {
			node(img, "sem").Holders[0].Gen = 0
		},
		"a plain holder with one": func(img *snapshotImage) { node(img, "l1").Holders[0].Gen = 5 },
		"delays on a plain lock":  func(img *snapshotImage) { node(img, "l1").SemDelays = []int64{1} },
		"a group not naming its handle": func(img *snapshotImage) {
			w := &node(img, "l2").Waiters[0]
			w.Group = []uint64{w.Handle + 1000}
		},
		"a shared group": func(img *snapshotImage) { node(img, "l2").Waiters[0].Mode = LockShared },
	} {
		var img snapshotImage
		if err := msgpack.Unmarshal(good, &img); err != nil {
			t.Fatal(err)
		}
		mutate(&img)
		b, err := msgpack.Marshal(&img)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fsmtRestore(t, fsmtCell, b); !errors.Is(err, ErrMalformedSnapshot) {
			t.Errorf("%s: restore returned %v", name, err)
		}
	}
}
