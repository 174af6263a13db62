package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// A Raft log written once, with the command encoding of its day, and
// committed: every later version must replay it to the same state. The
// entries cover every command type, requests of ACL'd principals, locks
// exclusive and shared with waits, cancels, hand-offs and lock-delay,
// sequencers, quotas, ephemeral nodes, expiry, membership and
// de-duplicated retries, then a random workload.
//
// File layout: committedLogMagic, then one record per entry: uvarint
// index, uvarint term, uvarint length, the entry's bytes. Indexes grow but
// skip some numbers, as Raft's own entries (configuration changes, a new
// leader's no-op) never reach the FSM.

const (
	committedLogV1    = "testdata/log-v1.bin"
	committedLogV2    = "testdata/log-v2.bin"
	committedLogMagic = "lockcell replica log\n"
	// The state the v1 log replays to, and a digest of every entry's
	// result in order (TestCommittedLogReplays).
	committedLogV1Applied     = 1578
	committedLogV1StateHash   = "2ad614e166d895cfb960be17b07d427011ae33232251833f5ed27d4a8e9626c9"
	committedLogV1ResultsHash = "79992cadbc4e70b8e750f651fa624e075f1d609ecc8b50495078fbfc933eb5d3"
)

var writeCommittedLog = flag.Bool("write-committed-log", false, "write "+committedLogV2+" from today's command encoding (never needed again once committed)")

// committedEntry is one entry of a committed log.
type committedEntry struct {
	Index, Term uint64
	Data        []byte
}

func readCommittedLog(t testing.TB, name string) []committedEntry {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(committedLogMagic)) {
		t.Fatalf("%s: no header", name)
	}
	r := bytes.NewReader(b[len(committedLogMagic):])
	var out []committedEntry
	for r.Len() > 0 {
		var e committedEntry
		var n uint64
		for _, p := range []*uint64{&e.Index, &e.Term, &n} {
			if *p, err = binary.ReadUvarint(r); err != nil {
				t.Fatalf("%s: entry %d: %v", name, len(out), err)
			}
		}
		if n > uint64(r.Len()) {
			t.Fatalf("%s: entry %d claims %d bytes, %d left", name, len(out), n, r.Len())
		}
		e.Data = make([]byte, n)
		if _, err := io.ReadFull(r, e.Data); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// replayCommitted applies the entries to a fresh FSM of cell "c" and

// replaysToTheRecordedState replays entries on a fresh FSM and checks it
// ends at the index, state hash and results digest recorded for the
// committed log, with the facts committedLogFacts checks; it returns the
// state hash.
func replaysToTheRecordedState(t *testing.T, entries []committedEntry) [32]byte {
	t.Helper()
	f, results := replayCommitted(t, entries)
	applied, sum, err := f.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if applied != committedLogV1Applied || hex.EncodeToString(sum[:]) != committedLogV1StateHash {
		t.Errorf("replayed to index %d hash %x, want %d %s", applied, sum, committedLogV1Applied, committedLogV1StateHash)
	}
	if hex.EncodeToString(results[:]) != committedLogV1ResultsHash {
		t.Errorf("results digest %x, want %s", results, committedLogV1ResultsHash)
	}
	committedLogFacts(t, f)
	return sum
}

// returns it with a SHA-256 of the results' msgpack encodings in order.
func replayCommitted(t testing.TB, entries []committedEntry) (*FSM, [32]byte) {
	t.Helper()
	f := NewFSM(fsmtCell, fsmtLogger())
	h := sha256.New()
	enc := msgpack.NewEncoder(h)
	enc.SetSortMapKeys(true)
	var last uint64
	for i, e := range entries {
		if e.Index <= last {
			t.Fatalf("entry %d: index %d after %d", i, e.Index, last)
		}
		last = e.Index
		r, ok := f.ApplyEntry(e.Index, e.Data).(*Result)
		if !ok || r == nil {
			t.Fatalf("entry %d: Apply returned %T", e.Index, r)
		}
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return f, sum
}

func TestCommittedLogReplays(t *testing.T) {
	entries := readCommittedLog(t, committedLogV1)
	types := map[CmdType]int{}
	for _, e := range entries {
		if len(e.Data) == 0 || e.Data[0] != 1 {
			t.Fatalf("entry %d is not of command version 1", e.Index)
		}
		c, err := DecodeCommand(e.Data)
		if err != nil {
			t.Fatalf("entry %d: %v", e.Index, err)
		}
		types[c.Type]++
	}
	for ty := CmdEpoch; ty <= CmdMemberRemove; ty++ {
		if types[ty] == 0 {
			t.Errorf("the log holds no %s entry", ty)
		}
	}
	sum := replaysToTheRecordedState(t, entries)

	// A replica that joins from a snapshot half way and replays the rest
	// ends in the same state.
	half := len(entries) / 2
	g, _ := replayCommitted(t, entries[:half])
	g2, err := fsmtRestore(t, fsmtCell, fsmtSnapshotBytes(t, g))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries[half:] {
		g2.ApplyEntry(e.Index, e.Data)
	}
	if _, sum2, _ := g2.StateHash(); sum2 != sum {
		t.Errorf("snapshot at entry %d then replay: hash %x, want %x", entries[half].Index, sum2, sum)
	}
}

// TestCommittedLogV2Replays replays the log of version-2 entries that the
// same script and workload wrote: entry for entry it decodes to the
// commands the version-1 log decodes to, and it replays to the same state
// and the same results.
func TestCommittedLogV2Replays(t *testing.T) {
	v1, v2 := readCommittedLog(t, committedLogV1), readCommittedLog(t, committedLogV2)
	if len(v1) != len(v2) {
		t.Fatalf("%d version-1 entries, %d version-2", len(v1), len(v2))
	}
	types := map[CmdType]int{}
	for i, e := range v2 {
		if len(e.Data) == 0 || e.Data[0] != commandVersion {
			t.Fatalf("entry %d is not of command version %d", e.Index, commandVersion)
		}
		if e.Index != v1[i].Index || e.Term != v1[i].Term {
			t.Fatalf("entry %d: index/term %d/%d, version 1 has %d/%d", i, e.Index, e.Term, v1[i].Index, v1[i].Term)
		}
		c2, err := DecodeCommand(e.Data)
		if err != nil {
			t.Fatalf("entry %d: %v", e.Index, err)
		}
		c1, err := DecodeCommand(v1[i].Data)
		if err != nil {
			t.Fatalf("version-1 entry %d: %v", e.Index, err)
		}
		if !reflect.DeepEqual(c1, c2) {
			t.Fatalf("entry %d decodes to\n  %+v (%+v) in version 2,\n  %+v (%+v) in version 1", e.Index, c2, c2.Payload, c1, c1.Payload)
		}
		types[c2.Type]++
	}
	for ty := CmdEpoch; ty <= CmdMemberRemove; ty++ {
		if types[ty] == 0 {
			t.Errorf("the log holds no %s entry", ty)
		}
	}
	sum := replaysToTheRecordedState(t, v2)

	// A log that switches version half way (a cell upgraded mid-log)
	// replays to the same state too.
	mixed := append(append([]committedEntry(nil), v1[:len(v1)/2]...), v2[len(v2)/2:]...)
	g, _ := replayCommitted(t, mixed)
	if _, sum2, _ := g.StateHash(); sum2 != sum {
		t.Errorf("version 1 then version 2 from entry %d: hash %x, want %x", v2[len(v2)/2].Index, sum2, sum)
	}
}

// committedLogFacts checks what users of the scripted part of the log
// rely on, read from the replayed state itself.
func committedLogFacts(t testing.TB, f *FSM) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	node := func(rel string) *Node {
		n := f.nodes[fsmtPath(rel)]
		if n == nil {
			t.Errorf("%s is missing", rel)
			return &Node{}
		}
		return n
	}
	if got := string(node("home/config").Contents); got != "v3 fenced" {
		t.Errorf("home/config holds %q", got)
	}
	if n := node("home"); n.ReadACL != "readers" || n.WriteACL != "ops" || n.ChangeACL != "ops" {
		t.Errorf("home's ACL names %q %q %q", n.ReadACL, n.WriteACL, n.ChangeACL)
	}
	if n := node("home/ld"); n.LockMode != LockExclusive || len(n.Holders) != 1 || n.LockDelayUntil == 0 {
		t.Errorf("home/ld: mode %d holders %+v delay %d", n.LockMode, n.Holders, n.LockDelayUntil)
	}
	if n := node("home/lock"); n.LockMode != LockShared || len(n.Holders) != 2 || len(n.Waiters) != 0 {
		t.Errorf("home/lock: mode %d holders %+v waiters %+v", n.LockMode, n.Holders, n.Waiters)
	}
	for _, gone := range []string{"home/eph", "home/edir", "home/edir/x", "home/doomed"} {
		if f.nodes[fsmtPath(gone)] != nil {
			t.Errorf("%s survived", gone)
		}
	}
	if len(f.cellKey) != 32 || f.cellKey[0] != 0xa5 {
		t.Errorf("cell key %x", f.cellKey)
	}
	members, size := f.members.sorted(), f.members.size
	if size != 3 || len(members) != 3 || members[0].ID != "r1" || members[1].ID != "r3" || members[2].ID != "r4" {
		t.Errorf("member table %+v size %d", members, size)
	}
	if f.epoch < 3 {
		t.Errorf("epoch %d", f.epoch)
	}
	for _, who := range []string{"alice", "root"} {
		if f.principals[who] != 1 {
			t.Errorf("%s has %d sessions", who, f.principals[who])
		}
	}
	if f.principals["bob"] != 0 || f.principals["carol"] != 0 {
		t.Errorf("bob or carol still has a session: %v", f.principals)
	}
}

// TestWriteCommittedLog writes committedLogV2 (with -write-committed-log):
// the same script and workload that wrote committedLogV1 in version 1,
// now in the version Encode writes. It ran once for each version, with
// the encoding of the day its file was committed; the files, not this
// code, are the record. Run again with a changed encoding it would write a
// different file, which the replay tests would then no longer test old
// entries with: a new version gets a new file.
func TestWriteCommittedLog(t *testing.T) {
	if !*writeCommittedLog {
		t.Skip("writes the committed log only with -write-committed-log")
	}
	var buf bytes.Buffer
	buf.WriteString(committedLogMagic)
	term := uint64(1)
	h := newFSMT(t)
	h.record = func(l *logEntry) {
		l.Term = term
		var tmp [binary.MaxVarintLen64]byte
		for _, v := range []uint64{l.Index, l.Term, uint64(len(l.Data))} {
			buf.Write(tmp[:binary.PutUvarint(tmp[:], v)])
		}
		buf.Write(l.Data)
	}
	committedLogScript(t, h, func() { term++ })

	// A random workload on top, with retries and bad handles.
	g := &fsmtGen{r: rand.New(rand.NewSource(18)), h: h, now: h.now, idx: h.idx,
		handles: map[uint64][]uint64{}, waits: map[uint64]uint64{}, seq: map[uint64]uint64{}}
	for range 1500 {
		fsmtApplyAll(t, g, []*fsmtH{h}, g.next())
	}
	fsmtCheckInvariants(t, h.f)
	if err := os.MkdirAll(filepath.Dir(committedLogV2), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(committedLogV2, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, results := replayCommitted(t, readCommittedLog(t, committedLogV2))
	applied, sum, err := f.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if _, want, _ := h.f.StateHash(); want != sum {
		t.Fatal("replaying the file does not give the writer's state")
	}
	t.Logf("wrote %s: %d bytes; applied %d state %x results %x", committedLogV2, buf.Len(), applied, sum, results)
}

// committedLogScript is the scripted part of the committed log. newTerm
// is called where a new leader would be elected.
func committedLogScript(t *testing.T, h *fsmtH, newTerm func()) {
	ok := func(what string, r *Result) *Result { t.Helper(); wantOK(t, what, r); return r }
	want := func(what string, r *Result, k Kind) { t.Helper(); wantKind(t, what, r, k) }
	// Raft's own entries (configuration, a leader's no-op) take indexes
	// the FSM never sees.
	skip := func(n uint64) { h.idx += n }
	sec := int64(time.Second)

	skip(2)
	ok("epoch", h.raw(Command{Payload: &EpochArgs{}}))
	key := bytes.Repeat([]byte{0xa5, 0x5a}, 16)
	ok("cell key", h.raw(Command{Payload: &CellKeyArgs{Key: key}}))
	ok("second cell key ignored", h.raw(Command{Payload: &CellKeyArgs{Key: bytes.Repeat([]byte{1}, 32)}}))
	ok("seed members", h.raw(Command{Payload: &MembersSeedArgs{ConfiguredSize: 3, Members: []MemberAddrs{
		{ID: "r1", ClientAddr: "10.0.0.1:7000", RaftAddr: "10.0.0.1:7001"},
		{ID: "r2", ClientAddr: "10.0.0.2:7000", RaftAddr: "10.0.0.2:7001"},
		{ID: "r3", ClientAddr: "10.0.0.3:7000", RaftAddr: "10.0.0.3:7001"}}}}))

	root, alice, bob, carol := h.sessionOf("root"), h.sessionOf("alice"), h.sessionOf("bob"), h.sessionOf("carol")
	as := func(s uint64, who string, c Command) *Result { t.Helper(); return h.aclDo(s, who, c) }

	// ACL files and a directory they guard.
	ok("mkdir acl", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}}))
	ok("acl/ops", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/ops"), Flags: fsmtRWC, Contents: []byte("alice\nbob\ncarol\n")}}))
	ok("acl/readers", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/readers"), Flags: fsmtRWC, Contents: []byte("# all\n*\n")}}))
	want("bad acl file", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("acl/bad"), Flags: fsmtRWC, Contents: []byte("not a principal!\n")}}), KindBadRequest)
	home := ok("mkdir home", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("home"), Flags: fsmtRWC | FlagDirectory}})).Handle
	want("alice names ACLs", as(alice, "alice", Command{Payload: &SetACLArgs{Handle: home, ACL: &ACLNames{Read: "readers"}}}), KindHandleInvalid)
	ok("setacl home", as(root, "root", Command{Payload: &SetACLArgs{Handle: home, ACL: &ACLNames{Read: "readers", Write: "ops", ChangeACL: "ops"}}}))
	want("alice at the root", as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("mine"), Flags: fsmtRWC}}), KindPermission)

	// Contents, conditional writes.
	cfg := ok("create config", as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/config"), Flags: fsmtRWC, Contents: []byte("v1")}}))
	ok("write v2", as(alice, "alice", Command{Payload: &SetContentsArgs{Handle: cfg.Handle, Contents: []byte("v2"), HasIfGen: true, IfGen: cfg.Stat.ContentGen}}))
	bobCfg := ok("bob opens config", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/config"), Flags: fsmtRW, EventMask: 0x7}})).Handle
	want("stale conditional write", as(bob, "bob", Command{Payload: &SetContentsArgs{Handle: bobCfg, Contents: []byte("lost"), HasIfGen: true, IfGen: cfg.Stat.ContentGen}}), KindGenerationMismatch)
	want("exclusive create of existing", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/config"), Flags: fsmtRWC | FlagExcl}}), KindExists)
	want("missing", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/none"), Flags: fsmtRW}}), KindNotFound)

	// Locks: exclusive, a FIFO of waits, a hand-off to a run of shared.
	lk := func(s uint64, who string) uint64 {
		t.Helper()
		return ok(who+" opens lock", as(s, who, Command{Payload: &OpenArgs{Path: fsmtPath("home/lock"), Flags: fsmtRWC}})).Handle
	}
	la, lb, lc := lk(alice, "alice"), lk(bob, "bob"), lk(carol, "carol")
	acq := func(s uint64, who string, hd uint64, mode uint8, wait bool) *Result {
		t.Helper()
		return as(s, who, Command{Payload: &AcquireArgs{Handle: hd, Mode: mode, Wait: wait}})
	}
	if !ok("alice x", acq(alice, "alice", la, LockExclusive, false)).Granted {
		t.Fatal("alice not granted")
	}
	want("bob try", acq(bob, "bob", lb, LockExclusive, false), KindLockHeld)
	if !ok("bob waits shared", acq(bob, "bob", lb, LockShared, true)).Queued {
		t.Fatal("bob not queued")
	}
	ok("carol waits shared", acq(carol, "carol", lc, LockShared, true))
	ok("alice releases", as(alice, "alice", Command{Payload: &ReleaseArgs{Handle: la}}))
	want("alice releases again", as(alice, "alice", Command{Payload: &ReleaseArgs{Handle: la}}), KindNotHeld)
	ok("alice waits x", acq(alice, "alice", la, LockExclusive, true))
	aliceWait := h.seq[alice]
	ok("alice cancels", as(alice, "alice", Command{Payload: &CancelWaitArgs{Handle: la, WaitSeq: aliceWait}}))
	want("bad mode", acq(alice, "alice", la, 7, false), KindBadRequest)

	// Sequencers: a write fenced on carol's shared lock.
	lockNode := h.f.nodes[fsmtPath("home/lock")]
	fence := &Fence{Path: fsmtPath("home/lock"), Mode: LockShared, Generation: lockNode.LockGen}
	ok("fenced write", as(bob, "bob", Command{Fence: fence, Payload: &SetContentsArgs{Handle: bobCfg, Contents: []byte("v3 fenced")}}))
	stale := *fence
	stale.Generation--
	want("stale fence", as(bob, "bob", Command{Fence: &stale, Payload: &SetContentsArgs{Handle: bobCfg, Contents: []byte("stale")}}), KindStaleSequencer)

	// Quotas.
	want("node quota", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/q"), Flags: fsmtRWC, Quota: &Quota{Nodes: 3}}}), KindQuotaExceeded)
	ok("within quota", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/q"), Flags: fsmtRWC, Contents: []byte("q"), Quota: &Quota{Nodes: 1000, ContentBytes: 1 << 20, NodesPerPrincipal: 10}}}))

	// Ephemeral nodes of carol's; a lock she holds with a lock-delay.
	ok("eph", as(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("home/eph"), Flags: fsmtRWC | FlagEphemeral, Contents: []byte("here")}}))
	ok("edir", as(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("home/edir"), Flags: fsmtRWC | FlagDirectory | FlagEphemeral}}))
	ok("edir/x", as(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("home/edir/x"), Flags: fsmtRWC | FlagEphemeral}}))
	ok("alice sees eph", as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/eph"), Flags: FlagRead}}))
	ldc := ok("carol ld", as(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("home/ld"), Flags: fsmtRWC, LockDelay: 5 * sec}})).Handle
	lda := ok("alice ld", as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/ld"), Flags: fsmtRW}})).Handle
	ok("carol takes ld", acq(carol, "carol", ldc, LockExclusive, false))
	ok("alice waits ld", acq(alice, "alice", lda, LockExclusive, true))

	// A fail-over: the new master's epoch, then carol's session expires.
	skip(1)
	newTerm()
	ok("epoch 2", h.raw(Command{Payload: &EpochArgs{}}))
	h.now += 12 * sec
	ok("carol expires", h.raw(Command{Session: carol, Payload: &CloseSessionArgs{Expired: true}}))
	want("carol is gone", as(carol, "carol", Command{Payload: &OpenArgs{Path: fsmtPath("home/x"), Flags: fsmtRWC}}), KindSessionExpired)
	h.now += 2 * sec
	ldr := ok("root ld", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("home/ld"), Flags: fsmtRW}})).Handle
	want("root tries under lock-delay", acq(root, "root", ldr, LockExclusive, false), KindLockDelay)
	ok("grant too early", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("home/ld")}}))
	h.now += 4 * sec
	ok("grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("home/ld")}}))

	// De-duplicated retries: the same request id gives the first result;
	// one at or below the acknowledgement is refused.
	first := as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/retry"), Flags: fsmtRWC, Contents: []byte("once")}})
	last := h.seq[alice]
	again := h.raw(Command{Session: alice, Seq: last, Ack: last - 1, Principal: "alice", Payload: &OpenArgs{Path: fsmtPath("home/retry"), Flags: fsmtRWC, Contents: []byte("once")}})
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("retry gave %+v, first %+v", again, first)
	}
	want("below ack", h.raw(Command{Session: alice, Seq: 1, Ack: last, Principal: "alice", Payload: &OpenArgs{Path: fsmtPath("home/config"), Flags: FlagRead}}), KindDuplicate)

	// Deletes: a file with a waiter, a non-empty directory.
	doomed := ok("doomed", as(bob, "bob", Command{Payload: &OpenArgs{Path: fsmtPath("home/doomed"), Flags: fsmtRWC}})).Handle
	ok("bob locks doomed", acq(bob, "bob", doomed, LockExclusive, false))
	dA := ok("alice doomed", as(alice, "alice", Command{Payload: &OpenArgs{Path: fsmtPath("home/doomed"), Flags: fsmtRW}})).Handle
	ok("alice waits doomed", acq(alice, "alice", dA, LockExclusive, true))
	ok("delete doomed", as(bob, "bob", Command{Payload: &DeleteArgs{Handle: doomed}}))
	want("delete home", as(root, "root", Command{Payload: &DeleteArgs{Handle: home}}), KindNotEmpty)
	want("write after delete", as(alice, "alice", Command{Payload: &SetContentsArgs{Handle: dA, Contents: []byte("x")}}), KindHandleInvalid)
	ok("alice closes", as(alice, "alice", Command{Payload: &CloseArgs{Handle: dA}}))

	// The lock ends shared by alice and root (bob's and carol's go).
	ok("alice shared", acq(alice, "alice", la, LockShared, false))
	lr := ok("root lock", as(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath("home/lock"), Flags: fsmtRW}})).Handle
	ok("root shared", acq(root, "root", lr, LockShared, false))

	// Membership changes, a third leader, bob leaves cleanly.
	ok("put r4", h.raw(Command{Payload: &MemberPutArgs{Members: []MemberAddrs{{ID: "r4", ClientAddr: "10.0.0.4:7000", RaftAddr: "10.0.0.4:7001"}}}}))
	ok("remove r2", h.raw(Command{Payload: &MemberRemoveArgs{Members: []MemberAddrs{{ID: "r2"}}}}))
	ok("seed again ignored", h.raw(Command{Payload: &MembersSeedArgs{ConfiguredSize: 5, Members: []MemberAddrs{{ID: "r9"}}}}))
	skip(3)
	newTerm()
	ok("epoch 3", h.raw(Command{Payload: &EpochArgs{}}))
	ok("bob closes", h.do(bob, Command{Payload: &CloseSessionArgs{}}))
	fsmtCheckInvariants(t, h.f)
}
