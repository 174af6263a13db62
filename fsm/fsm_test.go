package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Unit tests of the replicated state machine applied directly: no Raft, no
// network. Every command goes through Encode and FSM.Apply exactly as a
// committed log entry would.

const (
	fsmtCell = "c"
	fsmtRoot = "/ls/c"
	fsmtRW   = FlagRead | FlagWrite
	fsmtRWC  = FlagRead | FlagWrite | FlagCreate
	fsmtBase = int64(1_700_000_000) * int64(time.Second)
)

func fsmtPath(rel string) string { return fsmtRoot + "/" + rel }

func fsmtLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fsmtH drives one FSM: it numbers entries like a Raft log, stamps the
// master's clock, and numbers each session's requests like a sequential
// client (Ack = Seq-1: every earlier request has completed).
type fsmtH struct {
	t       testing.TB
	f       *FSM
	idx     uint64
	now     int64
	seq     map[uint64]uint64
	changes []Change // the observer's changes of the last applied entry
	// record, when set, sees every entry before it is applied (the
	// committed-log writer keeps them).
	record func(*logEntry)
}

// logEntry is one committed log entry as the node hands it to the FSM.
type logEntry struct {
	Index, Term uint64
	Data        []byte
}

// applyLog applies l as the node's raft adapter does.
func applyLog(f *FSM, l *logEntry) any { return f.ApplyEntry(l.Index, l.Data) }

// persist writes the snapshot whole, as the node's raft adapter persists
// it (in two halves, to the same bytes).
func persist(s *Snapshot, w io.Writer) error { return s.WriteRange(w, 0, s.Len()) }

func newFSMT(t testing.TB) *fsmtH {
	h := &fsmtH{t: t, now: fsmtBase, seq: map[uint64]uint64{}}
	h.attach(NewFSM(fsmtCell, fsmtLogger()))
	return h
}

func (h *fsmtH) attach(f *FSM) {
	h.f = f
	f.SetObserver(func(index uint64, ch []Change) {
		if index != h.idx {
			h.t.Errorf("observer called for index %d while applying %d", index, h.idx)
		}
		h.changes = ch
	})
}

// clone returns a driver positioned like h (same index, clock and request
// numbering) for another FSM.
func (h *fsmtH) clone(f *FSM) *fsmtH {
	c := &fsmtH{t: h.t, idx: h.idx, now: h.now, seq: map[uint64]uint64{}}
	for k, v := range h.seq {
		c.seq[k] = v
	}
	c.attach(f)
	return c
}

// raw applies c as the next log entry, exactly as given (Time defaults to
// the driver's clock).
func (h *fsmtH) raw(c Command) *Result {
	h.t.Helper()
	h.idx++
	if c.Time == 0 {
		c.Time = h.now
	}
	b, err := c.Encode()
	if err != nil {
		h.t.Fatalf("encode %+v: %v", c, err)
	}
	h.changes = nil
	l := &logEntry{Index: h.idx, Term: 1, Data: b}
	if h.record != nil {
		h.record(l)
	}
	r, ok := applyLog(h.f, l).(*Result)
	if !ok || r == nil {
		h.t.Fatalf("Apply returned %T %v", r, r)
	}
	return r
}

// do applies c as session s's next request.
func (h *fsmtH) do(s uint64, c Command) *Result {
	h.t.Helper()
	h.seq[s]++
	c.Session, c.Seq, c.Ack = s, h.seq[s], h.seq[s]-1
	return h.raw(c)
}

func (h *fsmtH) session() uint64 {
	h.t.Helper()
	r := h.raw(Command{Client: "test", Principal: "p", Payload: &CreateSessionArgs{}})
	if r.Err != nil || r.Session != h.idx {
		h.t.Fatalf("create session at %d: %+v", h.idx, r)
	}
	return r.Session
}

func (h *fsmtH) open(s uint64, rel string, flags uint32) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags}})
}

func (h *fsmtH) mustOpen(s uint64, rel string, flags uint32) uint64 {
	h.t.Helper()
	r := h.open(s, rel, flags)
	if r.Err != nil {
		h.t.Fatalf("open %s flags %#x: %v", rel, flags, r.Err)
	}
	return r.Handle
}

func (h *fsmtH) openDelay(s uint64, rel string, flags uint32, delay time.Duration) uint64 {
	h.t.Helper()
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags, LockDelay: int64(delay)}})
	if r.Err != nil {
		h.t.Fatalf("open %s: %v", rel, r.Err)
	}
	return r.Handle
}

func (h *fsmtH) set(s, handle uint64, data string) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &SetContentsArgs{Handle: handle, Contents: []byte(data)}})
}

// acquire returns the result and the request id the acquire carried (the
// WaitSeq of a blocking acquire).
func (h *fsmtH) acquire(s, handle uint64, mode uint8, wait bool) (*Result, uint64) {
	h.t.Helper()
	r := h.do(s, Command{Payload: &AcquireArgs{Handle: handle, Mode: mode, Wait: wait}})
	return r, h.seq[s]
}

func (h *fsmtH) release(s, handle uint64) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &ReleaseArgs{Handle: handle}})
}

func (h *fsmtH) closeH(s, handle uint64) *Result {
	h.t.Helper()
	return h.do(s, Command{Payload: &CloseArgs{Handle: handle}})
}

func (h *fsmtH) stat(s, handle uint64) Stat {
	h.t.Helper()
	v, err := h.f.LookupHandle(s, handle)
	if err != nil {
		h.t.Fatalf("lookup handle %d of session %d: %v", handle, s, err)
	}
	return v.Stat
}

func (h *fsmtH) exists(rel string) bool {
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	return h.f.nodes[fsmtPath(rel)] != nil
}

func (h *fsmtH) node(rel string) *Node {
	h.t.Helper()
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	n := h.f.nodes[fsmtPath(rel)]
	if n == nil {
		h.t.Fatalf("%s does not exist", rel)
	}
	return n
}

func (h *fsmtH) waitState(s, handle, seq uint64) WaitState {
	h.t.Helper()
	st, _, err := h.f.LockWait(s, handle, seq)
	if err != nil {
		h.t.Fatalf("LockWait(%d, %d, %d): %v", s, handle, seq, err)
	}
	return st
}

// changesOf returns the changes of the last entry of the given kind.
func (h *fsmtH) changesOf(k ChangeKind) []Change {
	var out []Change
	for _, c := range h.changes {
		if c.Kind == k {
			out = append(out, c)
		}
	}
	return out
}

func (h *fsmtH) snapshot() []byte {
	h.t.Helper()
	return fsmtSnapshotBytes(h.t, h.f)
}

func kindOf(r *Result) Kind {
	if r.Err == nil {
		return KindNone
	}
	return r.Err.Kind
}

func wantKind(t testing.TB, what string, r *Result, k Kind) {
	t.Helper()
	if got := kindOf(r); got != k {
		t.Fatalf("%s: kind %d (%v), want %d", what, got, r.Err, k)
	}
}

func wantOK(t testing.TB, what string, r *Result) {
	t.Helper()
	wantKind(t, what, r, KindNone)
}

// fsmtSink is an in-memory snapshot writer, or a failing one.
type fsmtSink struct {
	bytes.Buffer
	failWrite bool
}

func (s *fsmtSink) Write(p []byte) (int, error) {
	if s.failWrite {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}

func fsmtSnapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	var sink fsmtSink
	if err := persist(snap, &sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	return sink.Bytes()
}

func fsmtRestore(t testing.TB, cell string, b []byte) (*FSM, error) {
	t.Helper()
	f := NewFSM(cell, fsmtLogger())
	return f, f.Restore(io.NopCloser(bytes.NewReader(b)))
}

// fsmtImage decodes snapshot bytes into their structure, for comparisons
// that do not depend on map encoding order.
func fsmtImage(t testing.TB, b []byte) snapshotImage {
	t.Helper()
	var img snapshotImage
	if err := msgpack.Unmarshal(b, &img); err != nil {
		t.Fatalf("decode snapshot: %v", err)
	}
	return img
}

// fsmtCheckInvariants checks the state machine's internal consistency.
func fsmtCheckInvariants(t testing.TB, f *FSM) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	root := f.Root()
	if n := f.nodes[root]; n == nil || !n.Dir {
		t.Fatalf("root %s missing or not a directory", root)
	}
	open := map[string]int{}
	for id, h := range f.handles {
		if id != h.ID {
			t.Fatalf("handle %d stored under %d", h.ID, id)
		}
		s := f.sessions[h.Session]
		if s == nil || !s.handles[id] {
			t.Fatalf("handle %d of session %d: session missing or does not list it", id, h.Session)
		}
		if n := f.nodes[h.Path]; n != nil && n.Instance == h.Instance {
			open[h.Path]++
		}
	}
	for id, s := range f.sessions {
		if id != s.ID {
			t.Fatalf("session %d stored under %d", s.ID, id)
		}
		for hid := range s.handles {
			if f.handles[hid] == nil || f.handles[hid].Session != id {
				t.Fatalf("session %d lists handle %d that is not its own", id, hid)
			}
		}
		for q := range s.Results {
			if q <= s.AckSeq {
				t.Fatalf("session %d keeps result %d at or below its ack %d", id, q, s.AckSeq)
			}
		}
		if len(s.Results) > maxDedupPerSession {
			t.Fatalf("session %d keeps %d results", id, len(s.Results))
		}
	}
	for p, n := range f.nodes {
		if p != n.Path {
			t.Fatalf("node %s stored under %s", n.Path, p)
		}
		if n.openHandles != open[p] {
			t.Fatalf("%s: openHandles %d, but %d live handles name it", p, n.openHandles, open[p])
		}
		if p != root {
			parent := f.nodes[parentOf(p)]
			if parent == nil || !parent.Dir {
				t.Fatalf("%s: parent missing or a file", p)
			}
			if d, ok := parent.children[baseOf(p)]; !ok || d != n.Dir {
				t.Fatalf("%s: parent's child entry %v/%v", p, d, ok)
			}
		}
		for c, d := range n.children {
			k := f.nodes[p+"/"+c]
			if k == nil || k.Dir != d {
				t.Fatalf("%s lists child %s (dir %v) that does not exist as such", p, c, d)
			}
		}
		if n.Dir && len(n.Contents) > 0 {
			t.Fatalf("directory %s has contents", p)
		}
		if n.ContentGen < n.Instance || n.ACLGen < n.Instance || n.LockGen != 0 && n.LockGen < n.Instance {
			t.Fatalf("%s: generations below the instance: %+v", p, n.stat())
		}
		if !n.Dir && n.Checksum != checksum(n.Contents) {
			t.Fatalf("%s: checksum does not match contents", p)
		}
		// Locks.
		switch n.LockMode {
		case LockFree:
			if len(n.Holders) != 0 {
				t.Fatalf("%s: free lock with holders %+v", p, n.Holders)
			}
		case LockExclusive:
			if len(n.Holders) != 1 {
				t.Fatalf("%s: exclusive lock with %d holders", p, len(n.Holders))
			}
		case LockShared:
			if len(n.Holders) == 0 {
				t.Fatalf("%s: shared lock without holders", p)
			}
		default:
			t.Fatalf("%s: lock mode %d", p, n.LockMode)
		}
		seen := map[uint64]bool{}
		for _, ho := range n.Holders {
			h := f.handles[ho.Handle]
			if h == nil || h.Session != ho.Session || h.Path != p || h.Instance != n.Instance || h.Flags&FlagWrite == 0 {
				t.Fatalf("%s: holder %+v is not a live write handle on this instance", p, ho)
			}
			if seen[ho.Handle] {
				t.Fatalf("%s: handle %d holds twice", p, ho.Handle)
			}
			seen[ho.Handle] = true
		}
		for _, w := range n.Waiters {
			h := f.handles[w.Handle]
			if h == nil || h.Session != w.Session || h.Path != p || h.Instance != n.Instance {
				t.Fatalf("%s: waiter %+v is not a live handle on this instance", p, w)
			}
			if seen[w.Handle] {
				t.Fatalf("%s: handle %d both holds and waits, or waits twice", p, w.Handle)
			}
			seen[w.Handle] = true
			if w.Mode != LockExclusive && w.Mode != LockShared {
				t.Fatalf("%s: waiter mode %d", p, w.Mode)
			}
		}
		if n.SemLimit != 0 {
			// A semaphore's queue waits only while every permit is held
			// or held back (a delay that ended is pruned by the next
			// grant, so counting it too is a bound).
			if len(n.Waiters) > 0 && len(n.Holders)+len(n.SemDelays) < int(n.SemLimit) {
				t.Fatalf("%s: %d waiters while a permit idles (%d holders, %d held back, %d permits)", p, len(n.Waiters), len(n.Holders), len(n.SemDelays), n.SemLimit)
			}
			continue
		}
		if len(n.Waiters) > 0 && n.LockMode == LockFree && n.LockDelayUntil == 0 && n.Waiters[0].Group == nil {
			t.Fatalf("%s: lock free, no lock-delay, yet %d waiters queue", p, len(n.Waiters))
		}
		if len(n.Waiters) > 0 && n.LockMode == LockShared && n.Waiters[0].Mode == LockShared {
			t.Fatalf("%s: held shared, yet a shared waiter heads the queue: %+v", p, n.Waiters)
		}
	}
	fsmtCheckKidsLocked(t, f)
}

// ---------------------------------------------------------------------------
// Request de-duplication.

func TestFSMDedupSameRequestAppliesOnce(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC)

	h.seq[s]++
	q := h.seq[s]
	first := h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("one")}})
	wantOK(t, "first write", first)
	gen := h.idx
	if first.Stat.ContentGen != gen || len(h.changesOf(ChangeNode)) == 0 {
		t.Fatalf("first write: stat %+v changes %+v", first.Stat, h.changes)
	}
	// The retry, even with different contents, returns the first result
	// and changes nothing.
	again := h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("two")}})
	if again != first || !reflect.DeepEqual(again, first) {
		t.Fatalf("retry returned %+v, want the first result %+v", again, first)
	}
	if h.changes != nil {
		t.Fatalf("a de-duplicated retry reported changes %+v", h.changes)
	}
	if v, err := h.f.LookupHandle(s, fh); err != nil || string(v.Contents) != "one" || v.Stat.ContentGen != gen {
		t.Fatalf("after retry: %q %+v %v", v.Contents, v.Stat, err)
	}
	// A retry of a different command type under the same id also gets the
	// first result.
	if r := h.raw(Command{Session: s, Seq: q, Payload: &DeleteArgs{Handle: fh}}); r != first {
		t.Fatalf("retry as another command: %+v", r)
	}
	if !h.exists("f") {
		t.Fatal("a de-duplicated Delete deleted")
	}
}

func TestFSMDedupErrorResultsAreStable(t *testing.T) {
	h := newFSMT(t)
	s1, s2 := h.session(), h.session()
	h.seq[s1]++
	q := h.seq[s1]
	open := Command{Session: s1, Seq: q, Payload: &OpenArgs{Path: fsmtPath("later"), Flags: FlagRead}}
	r := h.raw(open)
	wantKind(t, "open missing", r, KindNotFound)
	h.mustOpen(s2, "later", fsmtRWC)
	// The node exists now, but the retried request keeps its first answer.
	if again := h.raw(open); again != r {
		t.Fatalf("retry after the node appeared: %+v", again)
	}
	// A new request id sees the node.
	if r := h.open(s1, "later", FlagRead); r.Err != nil || r.Created {
		t.Fatalf("fresh open: %+v", r)
	}
}

func TestFSMDedupAck(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC) // seq 1
	// Three writes, none acknowledged.
	var res []*Result
	for q := uint64(2); q <= 4; q++ {
		r := h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte(fmt.Sprint(q))}})
		wantOK(t, "write", r)
		res = append(res, r)
	}
	sess := h.f.sessions[s]
	if len(sess.Results) != 4 {
		t.Fatalf("results %v", sortedKeys(sess.Results))
	}
	// Seq 5 acknowledges everything up to 3.
	r5 := h.raw(Command{Session: s, Seq: 5, Ack: 3, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("5")}})
	wantOK(t, "write 5", r5)
	if got := sortedKeys(sess.Results); !reflect.DeepEqual(got, []uint64{4, 5}) || sess.AckSeq != 3 {
		t.Fatalf("after ack 3: results %v ack %d", got, sess.AckSeq)
	}
	// Acknowledged ids are duplicates now, and apply nothing.
	for _, q := range []uint64{1, 2, 3} {
		r := h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("dup")}})
		wantKind(t, fmt.Sprintf("retry of acked %d", q), r, KindDuplicate)
	}
	// Unacknowledged 4 still returns its first result.
	if r := h.raw(Command{Session: s, Seq: 4, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("dup")}}); r != res[2] {
		t.Fatalf("retry of 4: %+v", r)
	}
	if v, _ := h.f.LookupHandle(s, fh); string(v.Contents) != "5" {
		t.Fatalf("contents %q", v.Contents)
	}
	// An ack never moves backwards.
	h.raw(Command{Session: s, Seq: 6, Ack: 1, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("6")}})
	if sess.AckSeq != 3 {
		t.Fatalf("ack moved back to %d", sess.AckSeq)
	}
	// A command that acks its own id is itself a duplicate.
	wantKind(t, "seq <= own ack", h.raw(Command{Session: s, Seq: 7, Ack: 7, Payload: &SetContentsArgs{Handle: fh}}), KindDuplicate)
	if len(sess.Results) != 0 || sess.AckSeq != 7 {
		t.Fatalf("results %v ack %d", sortedKeys(sess.Results), sess.AckSeq)
	}
}

func TestFSMDedupTableIsBounded(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC) // seq 1, never acknowledged
	for q := uint64(2); q <= maxDedupPerSession; q++ {
		h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("x")}})
	}
	sess := h.f.sessions[s]
	if len(sess.Results) != maxDedupPerSession || sess.AckSeq != 0 {
		t.Fatalf("%d results, ack %d", len(sess.Results), sess.AckSeq)
	}
	// One more pushes out the oldest (the open); its retry is a duplicate,
	// never a second application.
	h.raw(Command{Session: s, Seq: maxDedupPerSession + 1, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("y")}})
	if len(sess.Results) != maxDedupPerSession || sess.AckSeq != 1 {
		t.Fatalf("%d results, ack %d", len(sess.Results), sess.AckSeq)
	}
	wantKind(t, "forgotten open", h.raw(Command{Session: s, Seq: 1, Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC}}), KindDuplicate)
	fsmtCheckInvariants(t, h.f)
}

// ---------------------------------------------------------------------------
// Create and open.

func TestFSMOpenCreateSemantics(t *testing.T) {
	h := newFSMT(t)
	s := h.session()

	wantKind(t, "create under missing parent", h.open(s, "nodir/x", fsmtRWC), KindNotFound)
	wantKind(t, "open missing", h.open(s, "missing", FlagRead), KindNotFound)
	if h.exists("nodir/x") || h.exists("missing") {
		t.Fatal("failed opens created nodes")
	}

	h.now += int64(time.Second)
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC, Contents: []byte("hello")}})
	wantOK(t, "create file", r)
	fIdx := h.idx
	st := r.Stat
	if !r.Created || r.Handle != fIdx || st.Dir || st.Ephemeral || st.Size != 5 || st.Checksum != checksum([]byte("hello")) ||
		st.Instance != fIdx || st.ContentGen != fIdx || st.ACLGen != fIdx || st.LockGen != 0 || st.CTime != h.now || st.MTime != h.now {
		t.Fatalf("create file: %+v", r)
	}
	if ch := h.changesOf(ChangeNode); len(ch) != 2 || ch[0].Path != fsmtPath("f") || ch[1].Path != fsmtRoot {
		t.Fatalf("create changes %+v", h.changes)
	}

	wantKind(t, "create under a file", h.open(s, "f/x", fsmtRWC), KindNotDir)
	wantKind(t, "exclusive create of existing", h.open(s, "f", fsmtRWC|FlagExcl), KindExists)
	wantKind(t, "create dir over file", h.open(s, "f", fsmtRWC|FlagDirectory), KindExists)
	wantKind(t, "open file as dir", h.open(s, "f", FlagRead|FlagDirectory), KindNotDir)
	// Create without Excl of an existing file opens it.
	r = h.open(s, "f", fsmtRWC)
	if r.Err != nil || r.Created || r.Stat.Instance != fIdx {
		t.Fatalf("create of existing: %+v", r)
	}

	r = h.open(s, "d", fsmtRWC|FlagDirectory)
	wantOK(t, "mkdir", r)
	if !r.Created || !r.Stat.Dir || r.Stat.Size != 0 {
		t.Fatalf("mkdir: %+v", r)
	}
	dh := r.Handle
	wantKind(t, "create file over dir", h.open(s, "d", fsmtRWC), KindExists)
	wantKind(t, "exclusive mkdir of existing", h.open(s, "d", fsmtRWC|FlagDirectory|FlagExcl), KindExists)
	// A directory opened without the directory flag is still a directory.
	if r := h.open(s, "d", FlagRead); r.Err != nil || !r.Stat.Dir {
		t.Fatalf("open dir without the flag: %+v", r)
	}
	wantKind(t, "directory with contents", h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("d2"), Flags: fsmtRWC | FlagDirectory, Contents: []byte("x")}}), KindBadRequest)
	if h.exists("d2") {
		t.Fatal("rejected mkdir created a node")
	}

	// Directory listing.
	h.mustOpen(s, "d/b", fsmtRWC)
	h.mustOpen(s, "d/a", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "d/c", fsmtRWC)
	ents, err := h.f.ReadDir(s, dh)
	want := []DirEntry{{"a", true}, {"b", false}, {"c", false}}
	if err != nil || !reflect.DeepEqual(ents, want) {
		t.Fatalf("readdir: %+v %v", ents, err)
	}
	fh := h.mustOpen(s, "f", FlagRead)
	if _, err := h.f.ReadDir(s, fh); !errors.Is(err, &Error{Kind: KindNotDir}) {
		t.Fatalf("readdir of a file: %v", err)
	}

	// Contents and deletes through handles.
	rw := h.mustOpen(s, "f", fsmtRW)
	ro := h.mustOpen(s, "f", FlagRead)
	wantKind(t, "write via read-only handle", h.set(s, ro, "x"), KindPermission)
	wantKind(t, "delete via read-only handle", h.do(s, Command{Payload: &DeleteArgs{Handle: ro}}), KindPermission)
	wantKind(t, "write a directory", h.set(s, dh, "x"), KindIsDir)
	wantKind(t, "delete non-empty dir", h.do(s, Command{Payload: &DeleteArgs{Handle: dh}}), KindNotEmpty)
	gen := h.stat(s, rw).ContentGen
	wantKind(t, "stale CAS", h.do(s, Command{Payload: &SetContentsArgs{Handle: rw, Contents: []byte("cas"), HasIfGen: true, IfGen: gen - 1}}), KindGenerationMismatch)
	if v, _ := h.f.LookupHandle(s, rw); string(v.Contents) != "hello" || v.Stat.ContentGen != gen {
		t.Fatalf("stale CAS changed the file: %q %+v", v.Contents, v.Stat)
	}
	wantOK(t, "CAS", h.do(s, Command{Payload: &SetContentsArgs{Handle: rw, Contents: []byte("cas"), HasIfGen: true, IfGen: gen}}))
	// IfGen 0 without HasIfGen is an unconditional write.
	wantOK(t, "plain write", h.do(s, Command{Payload: &SetContentsArgs{Handle: rw, Contents: []byte("p"), IfGen: 1}}))
	rr := h.do(s, Command{Payload: &OpenArgs{Path: fsmtRoot, Flags: fsmtRW | FlagDirectory}})
	wantOK(t, "open root", rr)
	wantKind(t, "delete root", h.do(s, Command{Payload: &DeleteArgs{Handle: rr.Handle}}), KindBadRequest)
	fsmtCheckInvariants(t, h.f)
}

func TestFSMACLNamesInherit(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	// No ACL names: children inherit the empty names.
	r := h.open(s, "plain", fsmtRWC|FlagDirectory)
	if r.Stat.ReadACL != "" || r.Stat.WriteACL != "" || r.Stat.ChangeACL != "" {
		t.Fatalf("inherited %+v", r.Stat)
	}
	// No command sets ACL names yet; set them on the root directly.
	h.f.mu.Lock()
	root := h.f.nodes[fsmtRoot]
	root.ReadACL, root.WriteACL, root.ChangeACL = "readers", "writers", "admins"
	h.f.mu.Unlock()
	r = h.open(s, "d", fsmtRWC|FlagDirectory)
	if r.Stat.ReadACL != "readers" || r.Stat.WriteACL != "writers" || r.Stat.ChangeACL != "admins" {
		t.Fatalf("child of root: %+v", r.Stat)
	}
	r = h.open(s, "d/f", fsmtRWC)
	if r.Stat.ReadACL != "readers" || r.Stat.WriteACL != "writers" || r.Stat.ChangeACL != "admins" {
		t.Fatalf("grandchild: %+v", r.Stat)
	}
	// Inheritance is at creation: a node made before keeps its names.
	if st := h.stat(s, h.mustOpen(s, "plain", FlagRead)); st.ReadACL != "" {
		t.Fatalf("older node changed: %+v", st)
	}
}

// ---------------------------------------------------------------------------
// Generations.

func TestFSMGenerationsAreIndexesAndGrow(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	var last Stat
	check := func(what string, st Stat) {
		t.Helper()
		if st.Instance < last.Instance || st.ContentGen < last.ContentGen || st.LockGen < last.LockGen || st.ACLGen < last.ACLGen {
			t.Fatalf("%s: a generation went back: %+v -> %+v", what, last, st)
		}
		last = st
	}
	fh := h.mustOpen(s, "f", fsmtRWC)
	created := h.idx
	st := h.stat(s, fh)
	if st.Instance != created || st.ContentGen != created || st.ACLGen != created || st.LockGen != 0 {
		t.Fatalf("created at %d: %+v", created, st)
	}
	check("create", st)

	r := h.set(s, fh, "v2")
	if r.Stat.ContentGen != h.idx || r.Stat.Instance != created {
		t.Fatalf("write at %d: %+v", h.idx, r.Stat)
	}
	check("write", r.Stat)

	ar, _ := h.acquire(s, fh, LockExclusive, false)
	if !ar.Granted || ar.LockGen != h.idx || h.stat(s, fh).LockGen != h.idx {
		t.Fatalf("acquire at %d: %+v", h.idx, ar)
	}
	check("acquire", h.stat(s, fh))
	wantOK(t, "release", h.release(s, fh))
	lg := h.stat(s, fh).LockGen
	h.raw(Command{Payload: &EpochArgs{}})
	ar, _ = h.acquire(s, fh, LockShared, false)
	if ar.LockGen != h.idx || ar.LockGen <= lg {
		t.Fatalf("re-acquire: %+v (was %d)", ar, lg)
	}
	check("re-acquire", h.stat(s, fh))
	// A shared holder joining does not start a new generation.
	s2 := h.session()
	fh2 := h.mustOpen(s2, "f", fsmtRW)
	ar2, _ := h.acquire(s2, fh2, LockShared, false)
	if !ar2.Granted || ar2.LockGen != ar.LockGen {
		t.Fatalf("shared join: %+v, want gen %d", ar2, ar.LockGen)
	}

	wantOK(t, "delete", h.do(s, Command{Payload: &DeleteArgs{Handle: fh}}))
	before := last
	// The old handles go invalid.
	if _, err := h.f.LookupHandle(s, fh); !errors.Is(err, &Error{Kind: KindHandleInvalid}) {
		t.Fatalf("handle on deleted node: %v", err)
	}
	nh := h.mustOpen(s, "f", fsmtRWC)
	st = h.stat(s, nh)
	if st.Instance != h.idx || st.ContentGen != h.idx || st.ACLGen != h.idx || st.LockGen != 0 {
		t.Fatalf("re-created at %d: %+v", h.idx, st)
	}
	if st.Instance <= before.Instance || st.ContentGen <= before.ContentGen {
		t.Fatalf("re-create did not grow: %+v -> %+v", before, st)
	}
	ar, _ = h.acquire(s, nh, LockExclusive, false)
	if ar.LockGen <= before.LockGen {
		t.Fatalf("lock gen after re-create %d <= %d", ar.LockGen, before.LockGen)
	}
	// Handles of the old instance stay invalid though the name exists again.
	wantKind(t, "write via old handle", h.set(s, fh, "x"), KindHandleInvalid)
	wantKind(t, "acquire via old handle", h.do(s2, Command{Payload: &AcquireArgs{Handle: fh2, Mode: LockShared}}), KindHandleInvalid)
	wantKind(t, "close via another session", h.closeH(s2, nh), KindHandleInvalid)
	wantOK(t, "close old handle", h.closeH(s2, fh2))
	fsmtCheckInvariants(t, h.f)
}

// ---------------------------------------------------------------------------
// Locks.

type fsmtLocker struct {
	s, h uint64
}

// lockers opens n sessions, each with a write handle on rel.
func (h *fsmtH) lockers(rel string, n int) []fsmtLocker {
	h.t.Helper()
	var out []fsmtLocker
	for i := 0; i < n; i++ {
		s := h.session()
		out = append(out, fsmtLocker{s: s, h: h.mustOpen(s, rel, fsmtRWC)})
	}
	return out
}

func TestFSMLockCompatibility(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 3)
	a, b, c := ls[0], ls[1], ls[2]

	r, _ := h.acquire(a.s, a.h, LockExclusive, false)
	if !r.Granted || r.Queued {
		t.Fatalf("first exclusive: %+v", r)
	}
	if g := h.changesOf(ChangeLockGranted); len(g) != 1 || g[0].Handle != a.h || g[0].Session != a.s || g[0].Seq != 0 {
		t.Fatalf("grant changes %+v", h.changes)
	}
	r2, _ := h.acquire(a.s, a.h, LockExclusive, false)
	if !r2.Granted || r2.LockGen != r.LockGen {
		t.Fatalf("re-acquire in the same mode: %+v", r2)
	}
	wantKind(t, "re-acquire in another mode", fsmtR(h.acquire(a.s, a.h, LockShared, false)), KindLockHeld)
	wantKind(t, "exclusive vs exclusive", fsmtR(h.acquire(b.s, b.h, LockExclusive, false)), KindLockHeld)
	wantKind(t, "shared vs exclusive", fsmtR(h.acquire(b.s, b.h, LockShared, false)), KindLockHeld)
	wantKind(t, "release by a non-holder", h.release(b.s, b.h), KindNotHeld)
	wantOK(t, "release", h.release(a.s, a.h))
	wantKind(t, "release twice", h.release(a.s, a.h), KindNotHeld)
	if st := h.stat(a.s, a.h); st.LockMode != LockFree || st.LockHolders != 0 {
		t.Fatalf("after release: %+v", st)
	}

	// Shared with shared.
	for _, l := range ls {
		r, _ := h.acquire(l.s, l.h, LockShared, false)
		if !r.Granted {
			t.Fatalf("shared: %+v", r)
		}
	}
	if st := h.stat(a.s, a.h); st.LockMode != LockShared || st.LockHolders != 3 {
		t.Fatalf("three shared: %+v", st)
	}
	wantOK(t, "release shared", h.release(b.s, b.h))
	wantKind(t, "exclusive vs shared", fsmtR(h.acquire(b.s, b.h, LockExclusive, false)), KindLockHeld)
	wantOK(t, "release shared", h.release(a.s, a.h))
	wantOK(t, "release shared", h.release(c.s, c.h))
	if r, _ := h.acquire(b.s, b.h, LockExclusive, false); !r.Granted {
		t.Fatalf("exclusive after all shared left: %+v", r)
	}

	// Bad requests.
	wantKind(t, "bad mode", fsmtR(h.acquire(c.s, c.h, 7, false)), KindBadRequest)
	wantKind(t, "free is not a mode", fsmtR(h.acquire(c.s, c.h, LockFree, false)), KindBadRequest)
	ro := h.mustOpen(c.s, "l", FlagRead)
	wantKind(t, "read-only handle", fsmtR(h.acquire(c.s, ro, LockShared, false)), KindPermission)
	wantKind(t, "someone else's handle", fsmtR(h.acquire(c.s, a.h, LockShared, false)), KindHandleInvalid)
	fsmtCheckInvariants(t, h.f)
}

func fsmtR(r *Result, _ uint64) *Result { return r }

func TestFSMLockFIFOHandOff(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 6)
	a, b, c, d, e, f := ls[0], ls[1], ls[2], ls[3], ls[4], ls[5]
	ra, _ := h.acquire(a.s, a.h, LockExclusive, true)
	if !ra.Granted {
		t.Fatalf("a: %+v", ra)
	}
	// Queue: b X, c S, d S, e X, f S.
	type q struct {
		l    fsmtLocker
		mode uint8
		seq  uint64
	}
	var queue []q
	for _, x := range []struct {
		l    fsmtLocker
		mode uint8
	}{{b, LockExclusive}, {c, LockShared}, {d, LockShared}, {e, LockExclusive}, {f, LockShared}} {
		r, seq := h.acquire(x.l.s, x.l.h, x.mode, true)
		if !r.Queued || r.Granted || r.Err != nil {
			t.Fatalf("queue: %+v", r)
		}
		// Queueing changes nothing but tells the holders of a conflict.
		if len(h.changes) != 1 || h.changes[0].Kind != ChangeLockConflict || h.changes[0].Handle != x.l.h {
			t.Fatalf("queueing reported %+v", h.changes)
		}
		queue = append(queue, q{x.l, x.mode, seq})
	}
	wantKind(t, "second wait by the same handle", fsmtR(h.acquire(b.s, b.h, LockExclusive, true)), KindLockHeld)
	if st := h.stat(a.s, a.h); st.LockWaiters != 5 || st.LockHolders != 1 || st.LockMode != LockExclusive {
		t.Fatalf("stat: %+v", st)
	}
	for _, w := range queue {
		if s := h.waitState(w.l.s, w.l.h, w.seq); s != WaitQueued {
			t.Fatalf("waiter %d: state %d", w.l.h, s)
		}
		if s := h.waitState(w.l.s, w.l.h, w.seq+100); s != WaitGone {
			t.Fatalf("waiter %d with another seq: state %d", w.l.h, s)
		}
	}
	grants := func(want ...q) {
		t.Helper()
		g := h.changesOf(ChangeLockGranted)
		if len(g) != len(want) {
			t.Fatalf("granted %+v, want %d grants", g, len(want))
		}
		for i, w := range want {
			if g[i].Handle != w.l.h || g[i].Session != w.l.s || g[i].Seq != w.seq || g[i].Path != fsmtPath("l") {
				t.Fatalf("grant %d: %+v, want %+v", i, g[i], w)
			}
			if s := h.waitState(w.l.s, w.l.h, w.seq); s != WaitGranted {
				t.Fatalf("granted waiter %d: state %d", w.l.h, s)
			}
		}
	}
	// a releases: b (exclusive) alone.
	gen0 := h.stat(a.s, a.h).LockGen
	wantOK(t, "a releases", h.release(a.s, a.h))
	grants(queue[0])
	genB := h.stat(b.s, b.h).LockGen
	if genB != h.idx || genB <= gen0 {
		t.Fatalf("b's generation %d at index %d", genB, h.idx)
	}
	// b releases: the run of shared waiters c, d, in the same entry; not f
	// behind e.
	wantOK(t, "b releases", h.release(b.s, b.h))
	grants(queue[1], queue[2])
	if st := h.stat(c.s, c.h); st.LockMode != LockShared || st.LockHolders != 2 || st.LockWaiters != 2 || st.LockGen != h.idx {
		t.Fatalf("after shared hand-off: %+v", st)
	}
	if h.waitState(b.s, b.h, queue[0].seq) != WaitGone {
		t.Fatal("b still shown holding")
	}
	// No barging: a shared request behind the queued exclusive e queues.
	wantKind(t, "shared try behind a queued exclusive", fsmtR(h.acquire(a.s, a.h, LockShared, false)), KindLockHeld)
	ra, aseq := h.acquire(a.s, a.h, LockShared, true)
	if !ra.Queued {
		t.Fatalf("shared wait behind a queued exclusive: %+v", ra)
	}
	queue = append(queue, q{a, LockShared, aseq})
	// c releases: d still holds, nothing handed on.
	wantOK(t, "c releases", h.release(c.s, c.h))
	grants()
	// d releases: e.
	wantOK(t, "d releases", h.release(d.s, d.h))
	grants(queue[3])
	// e releases: f and a (both shared).
	wantOK(t, "e releases", h.release(e.s, e.h))
	grants(queue[4], queue[5])
	fsmtCheckInvariants(t, h.f)
}

func TestFSMLockCancelWait(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 4)
	a, b, c, d := ls[0], ls[1], ls[2], ls[3]
	h.acquire(a.s, a.h, LockShared, false)
	_, bseq := h.acquire(b.s, b.h, LockExclusive, true)
	_, cseq := h.acquire(c.s, c.h, LockShared, true)
	_, dseq := h.acquire(d.s, d.h, LockShared, true)

	// A cancel that names another wait does nothing.
	wantOK(t, "cancel of an unknown wait", h.do(b.s, Command{Payload: &CancelWaitArgs{Handle: b.h, WaitSeq: bseq + 1000}}))
	if h.waitState(b.s, b.h, bseq) != WaitQueued || h.changes != nil {
		t.Fatalf("unknown cancel changed something: %+v", h.changes)
	}
	// Cancelling the exclusive head lets the shared run behind it join the
	// shared holder at once.
	wantOK(t, "cancel b", h.do(b.s, Command{Payload: &CancelWaitArgs{Handle: b.h, WaitSeq: bseq}}))
	if e := h.changesOf(ChangeWaitEnded); len(e) != 1 || e[0].Handle != b.h || e[0].Seq != bseq {
		t.Fatalf("wait-ended changes %+v", h.changes)
	}
	if g := h.changesOf(ChangeLockGranted); len(g) != 2 || g[0].Handle != c.h || g[0].Seq != cseq || g[1].Handle != d.h || g[1].Seq != dseq {
		t.Fatalf("grants after cancel %+v", h.changes)
	}
	if h.waitState(b.s, b.h, bseq) != WaitGone {
		t.Fatal("cancelled wait still shown")
	}

	// Undo of a late grant: b waits again and is granted when the shared
	// holders leave; then its wait is cancelled.
	_, bseq = h.acquire(b.s, b.h, LockExclusive, true)
	for _, l := range []fsmtLocker{a, c, d} {
		wantOK(t, "release", h.release(l.s, l.h))
	}
	if h.waitState(b.s, b.h, bseq) != WaitGranted {
		t.Fatalf("b not granted: %+v", h.node("l"))
	}
	_, aseq := h.acquire(a.s, a.h, LockExclusive, true)
	// A cancel that names another wait does not undo the grant.
	h.do(b.s, Command{Payload: &CancelWaitArgs{Handle: b.h, WaitSeq: bseq - 1}})
	if h.waitState(b.s, b.h, bseq) != WaitGranted {
		t.Fatal("a cancel with another seq undid the grant")
	}
	wantOK(t, "cancel granted wait", h.do(b.s, Command{Payload: &CancelWaitArgs{Handle: b.h, WaitSeq: bseq}}))
	if h.waitState(b.s, b.h, bseq) != WaitGone {
		t.Fatal("undone grant still held")
	}
	if g := h.changesOf(ChangeLockGranted); len(g) != 1 || g[0].Handle != a.h || g[0].Seq != aseq {
		t.Fatalf("grant after undo %+v", h.changes)
	}
	// An immediate grant (WaitSeq 0) is never undone by a cancel.
	wantOK(t, "a releases", h.release(a.s, a.h))
	h.acquire(b.s, b.h, LockExclusive, false)
	wantOK(t, "cancel 0", h.do(b.s, Command{Payload: &CancelWaitArgs{Handle: b.h, WaitSeq: 0}}))
	if h.waitState(b.s, b.h, 0) != WaitGranted {
		t.Fatal("cancel of seq 0 released an immediate grant")
	}
	fsmtCheckInvariants(t, h.f)
}

func TestFSMCloseHandleDropsWaitsAndReleases(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 3)
	a, b, c := ls[0], ls[1], ls[2]
	h.acquire(a.s, a.h, LockExclusive, false)
	_, bseq := h.acquire(b.s, b.h, LockExclusive, true)
	_, cseq := h.acquire(c.s, c.h, LockExclusive, true)

	wantOK(t, "close b", h.closeH(b.s, b.h))
	if e := h.changesOf(ChangeWaitEnded); len(e) != 1 || e[0].Handle != b.h || e[0].Seq != bseq {
		t.Fatalf("close of a waiter: %+v", h.changes)
	}
	if _, _, err := h.f.LockWait(b.s, b.h, bseq); !errors.Is(err, &Error{Kind: KindHandleInvalid}) {
		t.Fatalf("LockWait on a closed handle: %v", err)
	}
	wantKind(t, "close twice", h.closeH(b.s, b.h), KindHandleInvalid)
	wantOK(t, "close holder a", h.closeH(a.s, a.h))
	if g := h.changesOf(ChangeLockGranted); len(g) != 1 || g[0].Handle != c.h || g[0].Seq != cseq {
		t.Fatalf("close of the holder: %+v", h.changes)
	}
	// A clean close leaves no lock-delay.
	if n := h.node("l"); n.LockDelayUntil != 0 {
		t.Fatalf("close set a lock-delay: %d", n.LockDelayUntil)
	}
	fsmtCheckInvariants(t, h.f)
}

// A waiter heading the queue leaves by closing its handle while the lock is
// held shared: the shared waiters behind it should join the holders, as
// they do when the same waiter leaves by CancelWait.
func TestFSMCloseOfQueueHeadWaiterGrantsSharedRun(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 3)
	a, b, c := ls[0], ls[1], ls[2]
	h.acquire(a.s, a.h, LockShared, false)
	h.acquire(b.s, b.h, LockExclusive, true)
	_, cseq := h.acquire(c.s, c.h, LockShared, true)
	wantOK(t, "close b", h.closeH(b.s, b.h))
	if st := h.waitState(c.s, c.h, cseq); st != WaitGranted {
		t.Fatalf("shared waiter behind a departed exclusive head: state %d, want granted (node %+v)", st, h.node("l"))
	}
	fsmtCheckInvariants(t, h.f)
}

func TestFSMCloseSessionOfQueueHeadWaiterGrantsSharedRun(t *testing.T) {
	h := newFSMT(t)
	ls := h.lockers("l", 3)
	a, b, c := ls[0], ls[1], ls[2]
	h.acquire(a.s, a.h, LockShared, false)
	h.acquire(b.s, b.h, LockExclusive, true)
	_, cseq := h.acquire(c.s, c.h, LockShared, true)
	wantOK(t, "expire b", h.raw(Command{Session: b.s, Payload: &CloseSessionArgs{Expired: true}}))
	if st := h.waitState(c.s, c.h, cseq); st != WaitGranted {
		t.Fatalf("shared waiter: state %d, want granted", st)
	}
}

// ---------------------------------------------------------------------------
// Lock-delay.

func TestFSMLockDelay(t *testing.T) {
	const d = 5 * time.Second
	h := newFSMT(t)
	s1, s2, s3 := h.session(), h.session(), h.session()
	h1 := h.openDelay(s1, "l", fsmtRWC, d)
	h2 := h.mustOpen(s2, "l", fsmtRW)
	h3 := h.mustOpen(s3, "l", fsmtRW)
	if r, _ := h.acquire(s1, h1, LockExclusive, false); !r.Granted {
		t.Fatalf("s1: %+v", r)
	}
	_, s3seq := h.acquire(s3, h3, LockExclusive, true) // queued before the expiry

	h.now += int64(time.Second)
	expiry := h.now
	wantOK(t, "expire s1", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{Expired: true}}))
	n := h.node("l")
	if n.LockDelayUntil != expiry+int64(d) || n.LockMode != LockFree || len(n.Holders) != 0 {
		t.Fatalf("after expiry: delay %d (want %d) mode %d holders %+v", n.LockDelayUntil, expiry+int64(d), n.LockMode, n.Holders)
	}
	if ld := h.changesOf(ChangeLockDelay); len(ld) != 1 || ld[0].Path != fsmtPath("l") || ld[0].Time != expiry+int64(d) {
		t.Fatalf("expiry with a waiter queued: changes %+v", h.changes)
	}
	if len(h.changesOf(ChangeLockGranted)) != 0 || h.waitState(s3, h3, s3seq) != WaitQueued {
		t.Fatal("the queued waiter was granted during lock-delay")
	}
	if got := h.f.LockDelays(); !reflect.DeepEqual(got, map[string]int64{fsmtPath("l"): expiry + int64(d)}) {
		t.Fatalf("LockDelays %v", got)
	}

	// A try-acquire during the delay is refused with KindLockDelay.
	h.now = expiry + int64(time.Second)
	wantKind(t, "try during delay", fsmtR(h.acquire(s2, h2, LockShared, false)), KindLockDelay)
	// A blocking acquire queues and re-announces the delay.
	r, s2seq := h.acquire(s2, h2, LockShared, true)
	if !r.Queued || r.Granted {
		t.Fatalf("wait during delay: %+v", r)
	}
	if ld := h.changesOf(ChangeLockDelay); len(ld) != 1 || ld[0].Time != expiry+int64(d) {
		t.Fatalf("wait during delay: changes %+v", h.changes)
	}
	// A Grant before the delay ends grants nothing.
	h.now = expiry + int64(d) - 1
	wantOK(t, "early grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("l")}}))
	if len(h.changesOf(ChangeLockGranted)) != 0 || len(h.changesOf(ChangeLockDelay)) != 1 {
		t.Fatalf("early grant: %+v", h.changes)
	}
	// The Grant at the end of the delay hands the lock to the queue head
	// (s3, exclusive), not to the later shared waiter.
	h.now = expiry + int64(d)
	wantOK(t, "grant", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("l")}}))
	if g := h.changesOf(ChangeLockGranted); len(g) != 1 || g[0].Handle != h3 || g[0].Seq != s3seq {
		t.Fatalf("grant: %+v", h.changes)
	}
	if h.waitState(s3, h3, s3seq) != WaitGranted || h.waitState(s2, h2, s2seq) != WaitQueued {
		t.Fatal("grant order")
	}
	if len(h.f.LockDelays()) != 0 {
		t.Fatalf("LockDelays after grant: %v", h.f.LockDelays())
	}
	// A Grant of a missing path, or with nothing to do, is harmless.
	wantOK(t, "grant of nothing", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("nothing")}}))
	wantOK(t, "grant again", h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("l")}}))
	if len(h.changesOf(ChangeLockGranted)) != 0 {
		t.Fatalf("second grant: %+v", h.changes)
	}
	fsmtCheckInvariants(t, h.f)
}

func TestFSMLockDelayTryAfterDelay(t *testing.T) {
	const d = 2 * time.Second
	h := newFSMT(t)
	s1, s2 := h.session(), h.session()
	h1 := h.openDelay(s1, "l", fsmtRWC, d)
	h2 := h.mustOpen(s2, "l", fsmtRW)
	h.acquire(s1, h1, LockExclusive, false)
	wantOK(t, "expire", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{Expired: true}}))
	if len(h.changesOf(ChangeLockDelay)) != 0 {
		t.Fatalf("delay announced with no waiters: %+v", h.changes)
	}
	until := h.now + int64(d)
	h.now = until - 1
	wantKind(t, "try 1ns before the end", fsmtR(h.acquire(s2, h2, LockExclusive, false)), KindLockDelay)
	h.now = until
	if r, _ := h.acquire(s2, h2, LockExclusive, false); !r.Granted {
		t.Fatalf("try at the end of the delay: %+v", r)
	}
}

func TestFSMNoLockDelayOnCleanCloseOrZeroDelay(t *testing.T) {
	h := newFSMT(t)
	// Clean close of a session that holds with a lock-delay handle.
	s1, s2 := h.session(), h.session()
	h1 := h.openDelay(s1, "a", fsmtRWC, time.Minute)
	h2 := h.mustOpen(s2, "a", fsmtRW)
	h.acquire(s1, h1, LockExclusive, false)
	_, seq := h.acquire(s2, h2, LockExclusive, true)
	wantOK(t, "clean close", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{}}))
	if n := h.node("a"); n.LockDelayUntil != 0 || h.waitState(s2, h2, seq) != WaitGranted {
		t.Fatalf("clean close: delay %d, waiter %d", n.LockDelayUntil, h.waitState(s2, h2, seq))
	}
	// Expiry of a holder whose handle asked for no lock-delay.
	s3, s4 := h.session(), h.session()
	h3 := h.mustOpen(s3, "b", fsmtRWC)
	h4 := h.mustOpen(s4, "b", fsmtRW)
	h.acquire(s3, h3, LockExclusive, false)
	wantOK(t, "expire", h.raw(Command{Session: s3, Payload: &CloseSessionArgs{Expired: true}}))
	if n := h.node("b"); n.LockDelayUntil != 0 {
		t.Fatalf("zero-delay handle set a delay %d", n.LockDelayUntil)
	}
	if r, _ := h.acquire(s4, h4, LockExclusive, false); !r.Granted {
		t.Fatalf("after expiry without delay: %+v", r)
	}
	// Expiry of a session that only waited sets no delay.
	s5 := h.session()
	h5 := h.openDelay(s5, "b", fsmtRW, time.Minute)
	h.acquire(s5, h5, LockExclusive, true)
	wantOK(t, "expire waiter", h.raw(Command{Session: s5, Payload: &CloseSessionArgs{Expired: true}}))
	if n := h.node("b"); n.LockDelayUntil != 0 || len(n.Waiters) != 0 {
		t.Fatalf("expired waiter: %+v", n)
	}
	// An expired shared holder with other shared holders left sets no delay.
	wantOK(t, "release", h.release(s4, h4))
	s6 := h.session()
	h6 := h.openDelay(s6, "b", fsmtRW, time.Minute)
	h.acquire(s6, h6, LockShared, false)
	h.acquire(s4, h4, LockShared, false)
	wantOK(t, "expire a shared holder", h.raw(Command{Session: s6, Payload: &CloseSessionArgs{Expired: true}}))
	if n := h.node("b"); n.LockDelayUntil != 0 || n.LockMode != LockShared || len(n.Holders) != 1 {
		t.Fatalf("expired shared holder: %+v", n)
	}
}

// Once a lock-delay has ended, the waiters queued during it come first: a
// new acquire applied before the master's Grant entry must not barge ahead.
func TestFSMNoBargingAfterLockDelayEnds(t *testing.T) {
	const d = 5 * time.Second
	for _, mode := range []uint8{LockExclusive, LockShared} {
		h := newFSMT(t)
		s1, s2, s3 := h.session(), h.session(), h.session()
		h1 := h.openDelay(s1, "l", fsmtRWC, d)
		h2 := h.mustOpen(s2, "l", fsmtRW)
		h3 := h.mustOpen(s3, "l", fsmtRW)
		h.acquire(s1, h1, LockExclusive, false)
		wantOK(t, "expire", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{Expired: true}}))
		_, seq2 := h.acquire(s2, h2, LockExclusive, true)
		h.now += int64(d) + 1 // the delay is over; the master's Grant is not yet applied
		r, _ := h.acquire(s3, h3, mode, false)
		if r.Granted && h.waitState(s2, h2, seq2) != WaitGranted {
			t.Fatalf("mode %d: a new acquire was granted ahead of the waiter queued during the lock-delay: %+v", mode, h.node("l"))
		}
		fsmtCheckInvariants(t, h.f)
	}
}

// ---------------------------------------------------------------------------
// Ephemeral nodes.

func TestFSMEphemeralFileDiesWithLastHandle(t *testing.T) {
	h := newFSMT(t)
	s1, s2 := h.session(), h.session()
	e1 := h.mustOpen(s1, "e", fsmtRWC|FlagEphemeral)
	if st := h.stat(s1, e1); !st.Ephemeral {
		t.Fatalf("stat %+v", st)
	}
	e2 := h.mustOpen(s2, "e", FlagRead)
	wantOK(t, "close creator's handle", h.closeH(s1, e1))
	if !h.exists("e") {
		t.Fatal("ephemeral deleted while another handle is open")
	}
	wantOK(t, "close last handle", h.closeH(s2, e2))
	if h.exists("e") {
		t.Fatal("ephemeral outlived its last handle")
	}
	if ch := h.changesOf(ChangeNode); len(ch) < 2 {
		t.Fatalf("changes %+v", h.changes)
	}
	// A plain file stays.
	p := h.mustOpen(s1, "p", fsmtRWC)
	h.closeH(s1, p)
	if !h.exists("p") {
		t.Fatal("plain file deleted on close")
	}
	fsmtCheckInvariants(t, h.f)
}

func TestFSMEphemeralDiesWithCreatingSession(t *testing.T) {
	h := newFSMT(t)
	s1, s2 := h.session(), h.session()
	h.mustOpen(s1, "e", fsmtRWC|FlagEphemeral)
	other := h.mustOpen(s2, "e", fsmtRW)
	h.acquire(s2, other, LockExclusive, false)
	// s1's handle is closed without deleting (s2 still has it open) ...
	wantOK(t, "close session", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{}}))
	// ... yet the node dies with the session that created it.
	if h.exists("e") {
		t.Fatal("ephemeral outlived its creating session")
	}
	if _, err := h.f.LookupHandle(s2, other); !errors.Is(err, &Error{Kind: KindHandleInvalid}) {
		t.Fatalf("other session's handle: %v", err)
	}
	wantOK(t, "close of a dead handle", h.closeH(s2, other))
	fsmtCheckInvariants(t, h.f)
}

func TestFSMEphemeralDirectories(t *testing.T) {
	h := newFSMT(t)
	s1, s2 := h.session(), h.session()
	// An ephemeral directory with a plain child stays while the child does,
	// and goes with the child's delete once unopened.
	dh := h.mustOpen(s1, "d", fsmtRWC|FlagDirectory|FlagEphemeral)
	ch := h.mustOpen(s1, "d/x", fsmtRWC)
	wantOK(t, "close dir handle", h.closeH(s1, dh))
	if !h.exists("d") {
		t.Fatal("ephemeral dir with a child deleted")
	}
	wantOK(t, "delete child", h.do(s1, Command{Payload: &DeleteArgs{Handle: ch}}))
	if h.exists("d") || h.exists("d/x") {
		t.Fatal("empty unopened ephemeral dir kept")
	}
	// Still open: the empty ephemeral dir stays until its last handle closes.
	dh = h.mustOpen(s1, "d", fsmtRWC|FlagDirectory|FlagEphemeral)
	ch = h.mustOpen(s1, "d/x", fsmtRWC)
	wantOK(t, "delete child", h.do(s1, Command{Payload: &DeleteArgs{Handle: ch}}))
	if !h.exists("d") {
		t.Fatal("open ephemeral dir deleted")
	}
	wantOK(t, "close dir", h.closeH(s1, dh))
	if h.exists("d") {
		t.Fatal("ephemeral dir outlived its last handle")
	}
	// The creating session's ephemeral tree goes deepest first.
	h.mustOpen(s1, "t", fsmtRWC|FlagDirectory|FlagEphemeral)
	h.mustOpen(s1, "t/u", fsmtRWC|FlagDirectory|FlagEphemeral)
	h.mustOpen(s1, "t/u/v", fsmtRWC|FlagEphemeral)
	h.mustOpen(s2, "t/u/v", FlagRead)
	// A plain child made by another session keeps its ephemeral parent.
	h.mustOpen(s1, "k", fsmtRWC|FlagDirectory|FlagEphemeral)
	kc := h.mustOpen(s2, "k/c", fsmtRWC)
	wantOK(t, "close s1", h.raw(Command{Session: s1, Payload: &CloseSessionArgs{}}))
	for _, p := range []string{"t", "t/u", "t/u/v"} {
		if h.exists(p) {
			t.Fatalf("%s outlived its creating session", p)
		}
	}
	if !h.exists("k") || !h.exists("k/c") {
		t.Fatal("ephemeral dir with another session's child deleted")
	}
	wantOK(t, "delete k/c", h.do(s2, Command{Payload: &DeleteArgs{Handle: kc}}))
	if h.exists("k") {
		t.Fatal("ownerless empty ephemeral dir kept")
	}
	fsmtCheckInvariants(t, h.f)
}

// ---------------------------------------------------------------------------
// Sessions and epochs.

func TestFSMSessions(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	if c := h.changesOf(ChangeSessionCreated); len(c) != 1 || c[0].Session != s {
		t.Fatalf("create changes %+v", h.changes)
	}
	sess := h.f.sessions[s]
	if sess.Client != "test" || sess.Principal != "p" || sess.Created != h.now {
		t.Fatalf("session %+v", sess)
	}
	fh := h.mustOpen(s, "f", fsmtRWC)
	dh := h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	const ghost = 999
	for _, c := range []Command{
		{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: FlagRead}},
		{Payload: &OpenArgs{Path: fsmtPath("new"), Flags: fsmtRWC}},
		{Payload: &SetContentsArgs{Handle: fh, Contents: []byte("x")}},
		{Payload: &AcquireArgs{Handle: fh, Mode: LockExclusive}},
		{Payload: &ReleaseArgs{Handle: fh}},
		{Payload: &CloseArgs{Handle: fh}},
		{Payload: &DeleteArgs{Handle: fh}},
		{Payload: &CancelWaitArgs{Handle: fh, WaitSeq: 1}},
		{Payload: &CloseSessionArgs{}},
	} {
		c.Session, c.Seq = ghost, 1
		wantKind(t, "unknown session "+c.Payload.CmdType().String(), h.raw(c), KindSessionExpired)
	}
	// Without a request id too.
	wantKind(t, "open, no seq", h.raw(Command{Session: ghost, Payload: &OpenArgs{Path: fsmtPath("f"), Flags: FlagRead}}), KindSessionExpired)
	wantKind(t, "close session, no seq", h.raw(Command{Session: ghost, Payload: &CloseSessionArgs{}}), KindSessionExpired)
	if h.exists("new") {
		t.Fatal("unknown session created a node")
	}

	if !h.f.SessionExists(s) || !reflect.DeepEqual(h.f.SessionIDs(), []uint64{s}) {
		t.Fatalf("sessions %v", h.f.SessionIDs())
	}
	h.seq[s]++
	last := h.seq[s]
	wantOK(t, "close session", h.raw(Command{Session: s, Seq: last, Ack: last - 1, Payload: &CloseSessionArgs{}}))
	if c := h.changesOf(ChangeSessionClosed); len(c) != 1 || c[0].Session != s {
		t.Fatalf("close changes %+v", h.changes)
	}
	if h.f.SessionExists(s) || len(h.f.SessionIDs()) != 0 {
		t.Fatal("session still exists")
	}
	for _, hid := range []uint64{fh, dh} {
		if _, err := h.f.LookupHandle(s, hid); !errors.Is(err, &Error{Kind: KindHandleInvalid}) {
			t.Fatalf("handle %d after session close: %v", hid, err)
		}
	}
	if n := h.node("f"); n.openHandles != 0 {
		t.Fatalf("openHandles %d after session close", n.openHandles)
	}
	if len(h.f.handles) != 0 {
		t.Fatalf("handles left: %v", h.f.handles)
	}
	// A retry of any of the closed session's requests: session expired.
	wantKind(t, "retry after close", h.raw(Command{Session: s, Seq: last, Payload: &CloseSessionArgs{}}), KindSessionExpired)
	wantKind(t, "old request after close", h.raw(Command{Session: s, Seq: 1, Payload: &OpenArgs{Path: fsmtPath("f"), Flags: FlagRead}}), KindSessionExpired)

	// Epochs.
	for want := uint64(1); want <= 3; want++ {
		if r := h.raw(Command{Payload: &EpochArgs{}}); r.Epoch != want {
			t.Fatalf("epoch %d, want %d", r.Epoch, want)
		}
	}
	if epoch, sessions, nodes, applied := h.f.Counts(); epoch != 3 || sessions != 0 || nodes != 3 || applied != h.idx {
		t.Fatalf("counts %d %d %d %d (index %d)", epoch, sessions, nodes, applied, h.idx)
	}
	fsmtCheckInvariants(t, h.f)
}

// ---------------------------------------------------------------------------
// Snapshot and restore.

// fsmtRichState builds a state with something of everything a snapshot
// carries. Every session's last request leaves one de-duplication result.
func fsmtRichState(t testing.TB) (*fsmtH, []fsmtLocker) {
	h := newFSMT(t)
	h.raw(Command{Payload: &EpochArgs{}})
	h.raw(Command{Payload: &EpochArgs{}})
	s1, s2, s3, s4 := h.session(), h.session(), h.session(), h.session()
	h.f.mu.Lock()
	h.f.nodes[fsmtRoot].ReadACL = "everyone"
	h.f.mu.Unlock()
	h.mustOpen(s1, "dir", fsmtRWC|FlagDirectory)
	h.mustOpen(s1, "dir/sub", fsmtRWC|FlagDirectory)
	f1 := h.mustOpen(s1, "dir/sub/file", fsmtRWC)
	h.set(s1, f1, "contents of file")
	h.mustOpen(s2, "empty", fsmtRWC)
	eph := h.mustOpen(s2, "eph", fsmtRWC|FlagEphemeral)
	h.set(s2, eph, "ephemeral")
	h.mustOpen(s3, "edir", fsmtRWC|FlagDirectory|FlagEphemeral)
	h.mustOpen(s3, "edir/x", fsmtRWC|FlagEphemeral)
	// An exclusive lock with exclusive and shared waiters.
	lx := []fsmtLocker{{s1, h.mustOpen(s1, "lx", fsmtRWC)}, {s2, h.mustOpen(s2, "lx", fsmtRW)}, {s3, h.mustOpen(s3, "lx", fsmtRW)}}
	h.acquire(lx[0].s, lx[0].h, LockExclusive, true)
	h.acquire(lx[1].s, lx[1].h, LockExclusive, true)
	h.acquire(lx[2].s, lx[2].h, LockShared, true)
	// A shared lock with two holders.
	ls1 := h.mustOpen(s1, "ls", fsmtRWC)
	ls2 := h.mustOpen(s2, "ls", fsmtRW)
	h.acquire(s1, ls1, LockShared, false)
	h.acquire(s2, ls2, LockShared, false)
	// A lock under lock-delay with a waiter.
	ld4 := h.openDelay(s4, "ld", fsmtRWC, 10*time.Second)
	ld3 := h.mustOpen(s3, "ld", fsmtRW)
	h.acquire(s4, ld4, LockExclusive, false)
	h.raw(Command{Session: s4, Payload: &CloseSessionArgs{Expired: true}})
	h.now += int64(time.Second)
	h.acquire(s3, ld3, LockExclusive, true)
	// A handle of a deleted node.
	gone := h.mustOpen(s1, "gone", fsmtRWC)
	h.do(s1, Command{Payload: &DeleteArgs{Handle: gone}})
	// One more request per live session, so each keeps a result.
	for _, s := range []uint64{s1, s2, s3} {
		h.open(s, "dir", FlagRead)
	}
	fsmtCheckInvariants(t, h.f)
	return h, lx
}

// fsmtContinue applies the same further commands to h, covering every kind
// of command and dedup retries of requests made before the snapshot.
func fsmtContinue(h *fsmtH, lx []fsmtLocker) []any {
	var out []any
	rec := func(r *Result) {
		out = append(out, *r, append([]Change(nil), h.changes...))
	}
	ids := h.f.SessionIDs()
	s1, s2, s3 := ids[0], ids[1], ids[2]
	// Retries of the last requests of each session: de-duplicated.
	for _, s := range ids {
		rec(h.raw(Command{Session: s, Seq: h.seq[s], Ack: h.seq[s] - 1, Payload: &OpenArgs{Path: fsmtPath("dir"), Flags: FlagRead}}))
	}
	rec(h.raw(Command{Payload: &EpochArgs{}}))
	rec(h.release(lx[0].s, lx[0].h))
	rec(h.closeH(lx[1].s, lx[1].h))
	h.now += int64(20 * time.Second)
	rec(h.raw(Command{Payload: &GrantArgs{Path: fsmtPath("ld")}}))
	s5 := h.session()
	rec(h.open(s5, "dir/new", fsmtRWC))
	rec(h.open(s5, "eph", fsmtRW))
	rec(h.raw(Command{Session: s2, Seq: h.seq[s2] + 1, Ack: h.seq[s2], Payload: &CloseSessionArgs{}}))
	rec(h.raw(Command{Session: s3, Payload: &CloseSessionArgs{Expired: true}}))
	rec(h.open(s1, "edir", FlagRead))
	rec(h.open(s1, "eph", FlagRead))
	rec(h.open(s5, "dir/sub/file", fsmtRW))
	rec(h.do(s5, Command{Payload: &SetContentsArgs{Handle: h.idx, Contents: []byte("after")}}))
	return out
}

func TestFSMSnapshotRestoreRoundTrip(t *testing.T) {
	h, lx := fsmtRichState(t)
	b1 := h.snapshot()

	f2, err := fsmtRestore(t, fsmtCell, b1)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	fsmtCheckInvariants(t, f2)
	if b2 := fsmtSnapshotBytes(t, f2); !bytes.Equal(b1, b2) {
		t.Fatalf("snapshot of the restored state differs (%d vs %d bytes)", len(b1), len(b2))
	}
	// The derived state rebuilt on restore equals the original's.
	for p, n := range h.f.nodes {
		m := f2.nodes[p]
		if m == nil || m.openHandles != n.openHandles || !reflect.DeepEqual(m.children, n.children) {
			t.Fatalf("%s: restored %+v, want %+v", p, m, n)
		}
	}
	for id, s := range h.f.sessions {
		if !reflect.DeepEqual(f2.sessions[id].handles, s.handles) {
			t.Fatalf("session %d handles %v, want %v", id, f2.sessions[id].handles, s.handles)
		}
	}
	e1, n1, s1, a1 := h.f.Counts()
	if e2, n2, s2, a2 := f2.Counts(); e1 != e2 || n1 != n2 || s1 != s2 || a1 != a2 {
		t.Fatalf("counts %d %d %d %d vs %d %d %d %d", e1, n1, s1, a1, e2, n2, s2, a2)
	}
	if !reflect.DeepEqual(h.f.LockDelays(), f2.LockDelays()) || len(f2.LockDelays()) != 1 {
		t.Fatalf("lock delays %v vs %v", h.f.LockDelays(), f2.LockDelays())
	}
	for id, hd := range h.f.handles {
		v1, err1 := h.f.LookupHandle(hd.Session, id)
		v2, err2 := f2.LookupHandle(hd.Session, id)
		if !reflect.DeepEqual(err1, err2) || v1.Handle != v2.Handle || v1.Stat != v2.Stat || !bytes.Equal(v1.Contents, v2.Contents) {
			t.Fatalf("handle %d: %+v %v vs %+v %v", id, v1, err1, v2, err2)
		}
	}

	// The same further commands give the same results and states.
	h2 := h.clone(f2)
	out1 := fsmtContinue(h, lx)
	out2 := fsmtContinue(h2, lx)
	if !reflect.DeepEqual(out1, out2) {
		for i := range out1 {
			if !reflect.DeepEqual(out1[i], out2[i]) {
				t.Fatalf("step %d after restore: %+v vs %+v", i/2, out1[i], out2[i])
			}
		}
		t.Fatal("results differ")
	}
	fsmtCheckInvariants(t, h.f)
	fsmtCheckInvariants(t, f2)
	if a, b := h.snapshot(), h2.snapshot(); !bytes.Equal(a, b) {
		t.Fatal("snapshots differ after the same further commands")
	}
}

func TestFSMRestoreRejectsBadSnapshots(t *testing.T) {
	h, _ := fsmtRichState(t)
	b := h.snapshot()
	if _, err := fsmtRestore(t, "other", b); err == nil || !strings.Contains(err.Error(), "other") {
		t.Fatalf("restore into another cell: %v", err)
	}
	if _, err := fsmtRestore(t, fsmtCell, b[:len(b)/2]); err == nil {
		t.Fatal("restore of a truncated snapshot succeeded")
	}
	if _, err := fsmtRestore(t, fsmtCell, []byte{0xc1}); err == nil {
		t.Fatal("restore of garbage succeeded")
	}
	img := fsmtImage(t, b)
	img.Version = snapshotVersion + 1
	nb, err := msgpack.Marshal(&img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsmtRestore(t, fsmtCell, nb); err == nil {
		t.Fatal("restore of an unknown snapshot version succeeded")
	}
	// A failed restore leaves the state it had.
	before := h.snapshot()
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(nb))); err == nil {
		t.Fatal("restore of an unknown version succeeded")
	}
	if !bytes.Equal(before, h.snapshot()) {
		t.Fatal("a failed restore changed the state")
	}
	// A restore over a populated FSM replaces everything.
	fresh := newFSMT(t)
	fresh.session()
	fresh.mustOpen(fresh.idx, "junk", fsmtRWC)
	if err := fresh.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fsmtSnapshotBytes(t, fresh.f), b) {
		t.Fatal("restore over a populated FSM kept old state")
	}
	// A failing writer fails the write (the node's raft adapter then
	// cancels its sink: replica's TestRaftSnapshotPersist).
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &fsmtSink{failWrite: true}
	if err := persist(snap, sink); err == nil {
		t.Fatal("a snapshot written to a failing writer succeeded")
	}
}

// A snapshot written before the de-duplication tables moved out of the
// sessions (commit 5c64d20; snapshot version 1) must either restore with
// its tables or be refused, never silently lose them: a retried request
// would be applied twice.
func TestFSMRestoreOfEarlierSnapshotLayoutKeepsResults(t *testing.T) {
	type oldSession struct {
		ID        uint64             `msgpack:"id"`
		Client    string             `msgpack:"c,omitempty"`
		Principal string             `msgpack:"p,omitempty"`
		Created   int64              `msgpack:"t"`
		AckSeq    uint64             `msgpack:"a,omitempty"`
		Results   map[uint64]*Result `msgpack:"r,omitempty"`
	}
	type oldImage struct {
		Version  uint8        `msgpack:"v"`
		Cell     string       `msgpack:"c"`
		Epoch    uint64       `msgpack:"e"`
		Applied  uint64       `msgpack:"a"`
		Nodes    []*Node      `msgpack:"n"`
		Sessions []oldSession `msgpack:"s"`
		Handles  []*Handle    `msgpack:"h"`
	}
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC)
	h.seq[s]++
	q := h.seq[s]
	first := h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("once")}})
	img := fsmtImage(t, h.snapshot())
	old := oldImage{Version: 1, // the earlier layout was written as version 1
		Cell: img.Cell, Epoch: img.Epoch, Applied: img.Applied, Nodes: img.Nodes, Handles: img.Handles}
	for _, ss := range img.Sessions {
		os := oldSession{ID: ss.ID, Client: ss.Client, Principal: ss.Principal, Created: ss.Created, AckSeq: ss.AckSeq, Results: map[uint64]*Result{}}
		for _, r := range img.Results {
			if r.Session == ss.ID {
				os.Results[r.Seq] = r.Result
			}
		}
		old.Sessions = append(old.Sessions, os)
	}
	b, err := msgpack.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		return // refusing the earlier layout is safe
	}
	h2 := h.clone(f2)
	h2.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("twice")}})
	if v, _ := f2.LookupHandle(s, fh); string(v.Contents) != "once" || v.Stat.ContentGen != first.Stat.ContentGen {
		t.Fatalf("a retry after restoring an earlier-layout snapshot was applied again: %q gen %d", v.Contents, v.Stat.ContentGen)
	}
}

// Two snapshots of one state should be the same bytes, whatever the
// de-duplication tables hold.
func TestFSMSnapshotBytesStableWithManyResults(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC)
	for q := uint64(2); q < 20; q++ {
		h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("x")}})
	}
	b := h.snapshot()
	for i := 0; i < 20; i++ {
		if !bytes.Equal(b, h.snapshot()) {
			t.Fatalf("snapshot %d of an unchanged state differs", i)
		}
	}
}

// The same state holds whatever the encoding order: checked structurally.
func TestFSMSnapshotRoundTripManyResults(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	fh := h.mustOpen(s, "f", fsmtRWC)
	res := map[uint64]*Result{}
	for q := uint64(2); q < 20; q++ {
		res[q] = h.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte(fmt.Sprint(q))}})
	}
	b := h.snapshot()
	f2, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fsmtImage(t, b), fsmtImage(t, fsmtSnapshotBytes(t, f2))) {
		t.Fatal("restored state differs")
	}
	h2 := h.clone(f2)
	for q := uint64(2); q < 20; q++ {
		r := h2.raw(Command{Session: s, Seq: q, Payload: &SetContentsArgs{Handle: fh, Contents: []byte("retry")}})
		if !reflect.DeepEqual(r, res[q]) {
			t.Fatalf("retry %d after restore: %+v, want %+v", q, r, res[q])
		}
	}
	if v, _ := f2.LookupHandle(s, fh); string(v.Contents) != "19" {
		t.Fatalf("retries after restore re-applied: %q", v.Contents)
	}
}

// ---------------------------------------------------------------------------
// Determinism under random workloads.

type fsmtGen struct {
	r        *rand.Rand
	h        *fsmtH // the reference FSM the generator reads handles from
	now      int64
	sessions []uint64
	handles  map[uint64][]uint64 // session -> open handle ids (may be dead)
	waits    map[uint64]uint64   // handle -> seq of its last blocking acquire
	idx      uint64
	seq      map[uint64]uint64
}

var fsmtNames = []string{"a", "b", "c", "a/x", "a/y", "b/z", "a/x/q"}

// next returns a random command, Time set, with Seq/Ack left to the caller
// via the returned session (0: no request id).
func (g *fsmtGen) next() Command {
	r := g.r
	g.now += int64(r.Intn(3000)) * int64(time.Millisecond)
	pick := func() uint64 { return g.sessions[r.Intn(len(g.sessions))] }
	handle := func(s uint64) uint64 {
		hs := g.handles[s]
		if len(hs) == 0 || r.Intn(20) == 0 {
			return uint64(r.Intn(int(g.idx) + 2)) // anything, likely invalid
		}
		return hs[r.Intn(len(hs))]
	}
	c := Command{Time: g.now}
	if len(g.sessions) == 0 || r.Intn(25) == 0 {
		c.Client = fmt.Sprint("c", r.Intn(3))
		c.Type, c.Payload = CmdCreateSession, &CreateSessionArgs{}
		return c
	}
	s := pick()
	c.Session = s
	switch x := r.Intn(100); {
	case x < 3:
		c.Payload = &CloseSessionArgs{Expired: r.Intn(2) == 0}
	case x < 5:
		c = Command{Time: g.now, Payload: &EpochArgs{}}
	case x < 25:
		p := &OpenArgs{Path: fsmtPath(fsmtNames[r.Intn(len(fsmtNames))]), Flags: FlagRead}
		if r.Intn(4) != 0 {
			p.Flags |= FlagWrite
		}
		if r.Intn(2) == 0 {
			p.Flags |= FlagCreate
			if r.Intn(4) == 0 {
				p.Flags |= FlagExcl
			}
			if r.Intn(5) == 0 {
				p.Flags |= FlagEphemeral
			}
			if r.Intn(3) == 0 {
				p.Contents = []byte(fmt.Sprint(r.Intn(10)))
			}
		}
		if r.Intn(3) == 0 {
			p.Flags |= FlagDirectory
			p.Contents = nil
		}
		if r.Intn(2) == 0 {
			p.LockDelay = int64(r.Intn(5000)) * int64(time.Millisecond)
		}
		c.Payload = p
	case x < 33:
		c.Payload = &CloseArgs{Handle: handle(s)}
	case x < 43:
		p := &SetContentsArgs{Handle: handle(s)}
		p.Contents = []byte(fmt.Sprint(r.Intn(100)))
		if r.Intn(3) == 0 {
			p.HasIfGen = true
			p.IfGen = uint64(r.Intn(int(g.idx) + 1))
		}
		c.Payload = p
	case x < 48:
		c.Payload = &DeleteArgs{Handle: handle(s)}
	case x < 70:
		p := &AcquireArgs{Handle: handle(s)}
		p.Mode = uint8(1 + r.Intn(2))
		p.Wait = r.Intn(3) != 0
		c.Payload = p
	case x < 85:
		c.Payload = &ReleaseArgs{Handle: handle(s)}
	case x < 92:
		p := &CancelWaitArgs{Handle: handle(s)}
		p.WaitSeq = g.waits[p.Handle]
		if r.Intn(4) == 0 {
			p.WaitSeq = uint64(r.Intn(10))
		}
		c.Payload = p
	default:
		c = Command{Time: g.now, Payload: &GrantArgs{Path: fsmtPath(fsmtNames[r.Intn(len(fsmtNames))])}}
	}
	c.Type = c.Payload.CmdType()
	return c
}

// applyAll applies c to every driver with the same index, request id and
// time; it returns the results.
func fsmtApplyAll(t *testing.T, g *fsmtGen, hs []*fsmtH, c Command) []*Result {
	t.Helper()
	if c.Session != 0 && c.Type != CmdCreateSession {
		switch x := g.r.Intn(50); {
		case x == 0 && g.seq[c.Session] > 0:
			c.Seq = g.seq[c.Session] // a retry of the last request
			c.Ack = c.Seq - 1
		default:
			g.seq[c.Session]++
			c.Seq = g.seq[c.Session]
			c.Ack = c.Seq - 1
		}
	}
	g.idx++
	var out []*Result
	for _, h := range hs {
		if h.idx+1 != g.idx {
			t.Fatalf("driver at %d, generator at %d", h.idx, g.idx)
		}
		out = append(out, h.raw(c))
	}
	r := out[0]
	switch {
	case c.Type == CmdCreateSession:
		g.sessions = append(g.sessions, r.Session)
	case (c.Type == CmdCloseSession || c.Type == CmdIdleCloseSession) && r.Err == nil:
		for i, s := range g.sessions {
			if s == c.Session {
				g.sessions = append(g.sessions[:i:i], g.sessions[i+1:]...)
			}
		}
		delete(g.handles, c.Session)
	case c.Type == CmdOpen && r.Err == nil && r.Handle == g.idx:
		g.handles[c.Session] = append(g.handles[c.Session], r.Handle)
	case c.Type == CmdClose && r.Err == nil:
		hs := g.handles[c.Session]
		for i, id := range hs {
			if id == c.HandleOf() {
				g.handles[c.Session] = append(hs[:i:i], hs[i+1:]...)
				break
			}
		}
	case c.Type == CmdAcquire && c.Payload.(*AcquireArgs).Wait:
		g.waits[c.HandleOf()] = c.Seq
	}
	return out
}

func TestFSMDeterminism(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 20260101} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			const steps = 4000
			a, b := newFSMT(t), newFSMT(t)
			g := &fsmtGen{r: rand.New(rand.NewSource(seed)), now: fsmtBase, handles: map[uint64][]uint64{}, waits: map[uint64]uint64{}, seq: map[uint64]uint64{}}
			hs := []*fsmtH{a, b}
			var stats [CmdGrant + 1][2]int
			for i := 0; i < steps; i++ {
				c := g.next()
				res := fsmtApplyAll(t, g, hs, c)
				if !reflect.DeepEqual(res[0], res[1]) {
					t.Fatalf("step %d (%s): %+v vs %+v", i, c.Type, res[0], res[1])
				}
				if !reflect.DeepEqual(hs[0].changes, hs[1].changes) {
					t.Fatalf("step %d: changes %+v vs %+v", i, hs[0].changes, hs[1].changes)
				}
				if res[0].Err == nil {
					stats[c.Type][0]++
				} else {
					stats[c.Type][1]++
				}
				fsmtCheckInvariants(t, a.f)
				if i == steps/2 {
					// A third replica joins from a snapshot and follows.
					f3, err := fsmtRestore(t, fsmtCell, a.snapshot())
					if err != nil {
						t.Fatal(err)
					}
					hs = append(hs, a.clone(f3))
				}
				if i%500 == 499 {
					sa := fsmtSnapshotBytes(t, a.f)
					for j, h := range hs[1:] {
						if sb := fsmtSnapshotBytes(t, h.f); !bytes.Equal(sa, sb) {
							t.Fatalf("step %d: snapshot of replica %d differs", i, j+1)
						}
					}
				}
			}
			sa := fsmtSnapshotBytes(t, a.f)
			for j, h := range hs[1:] {
				if sb := fsmtSnapshotBytes(t, h.f); !bytes.Equal(sa, sb) {
					t.Fatalf("final snapshot of replica %d differs", j+1)
				}
			}
			epoch, sessions, nodes, _ := a.f.Counts()
			ok := 0
			for _, s := range stats {
				ok += s[0]
			}
			t.Logf("seed %d: %d commands, %d succeeded; epoch %d, %d sessions, %d nodes; per type ok/err %v", seed, steps, ok, epoch, sessions, nodes, stats[1:])
			if ok < steps/4 || stats[CmdAcquire][0] < 50 || stats[CmdOpen][0] < 100 {
				t.Fatalf("workload too weak: %v", stats)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Command encoding.

// fsmtEveryPayload is one command of every type, every field set.
func fsmtEveryPayload() []Command {
	env := Command{Time: 42, Session: 7, Seq: 9, Ack: 8, Principal: "pr", Admin: true, Client: "cl",
		Fence: &Fence{Path: "/ls/c/l", Mode: LockShared, Generation: 6}, Incarnation: 11}
	q := &Quota{Nodes: 1, ContentBytes: 2, NodesPerPrincipal: 3, ContentBytesPerPrincipal: 4, NodesAdminReserve: 5, ContentBytesAdminReserve: 6}
	ms := []MemberAddrs{{ID: "r1", ClientAddr: "a:1", RaftAddr: "a:2"}, {ID: "r2"}}
	var out []Command
	for _, p := range []Payload{
		&EpochArgs{},
		&CreateSessionArgs{},
		&CloseSessionArgs{Expired: true},
		&CloseSessionArgs{Idle: true}, // CmdIdleCloseSession
		&OpenArgs{Path: "/ls/c/x", Flags: fsmtRWC, Contents: []byte("abc"), LockDelay: int64(time.Second), EventMask: 3, Quota: q},
		&CloseArgs{Handle: 3},
		&SetContentsArgs{Handle: 3, Contents: []byte("abc"), IfGen: 5, HasIfGen: true, Quota: q, Path: "/ls/c/x"},
		&DeleteArgs{Handle: 3},
		&AcquireArgs{Handle: 3, Mode: LockShared, Wait: true},
		&ReleaseArgs{Handle: 3},
		&CancelWaitArgs{Handle: 3, WaitSeq: 4},
		&GrantArgs{Path: "/ls/c/x"},
		&CellKeyArgs{Key: bytes.Repeat([]byte{7}, 32)},
		&SetACLArgs{Handle: 3, ACL: &ACLNames{Read: "r", Write: "w", ChangeACL: "c"}},
		&SetACLArgs{Handle: 3, ACL: &ACLNames{Read: "r", Write: "w", ChangeACL: "c"}, IfGen: 12, HasIfGen: true}, // CmdSetACLIfGen
		&MembersSeedArgs{Members: ms, ConfiguredSize: 5},
		&MemberPutArgs{Members: ms},
		&MemberRemoveArgs{Members: ms},
		&BreakLockArgs{Path: "/ls/c/x", Reason: "stuck"},
		&ResumeSessionArgs{},
		&OpenArgs{Path: "/ls/c/s", Flags: fsmtRWC, SemLimit: 3}, // CmdOpenSemaphore
		&AcquireMultiArgs{Handles: []uint64{3, 5}, Wait: true},
		&ReleaseMultiArgs{Handles: []uint64{3, 5}},
		&ReadReplicaPutArgs{Members: ms},
	} {
		c := env
		c.Payload = p
		out = append(out, c)
	}
	return out
}

func TestCommandEncodeRoundTrip(t *testing.T) {
	seen := map[CmdType]bool{}
	for _, c := range fsmtEveryPayload() {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != commandVersion {
			t.Fatalf("version byte %d", b[0])
		}
		if c.Type != c.Payload.CmdType() {
			t.Fatalf("Encode left Type %s for a %T", c.Type, c.Payload)
		}
		got, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(*got, c) {
			t.Fatalf("round trip: %+v %v, want %+v", got, err, c)
		}
		seen[c.Type] = true
	}
	for _, typ := range []CmdType{CmdResumeSession, CmdIdleCloseSession, CmdSetACLIfGen, CmdOpenSemaphore, CmdAcquireMulti, CmdReleaseMulti, CmdReadReplicaPut} {
		if !seen[typ] {
			t.Errorf("no %s command round-tripped", typ)
		}
	}
	for typ := CmdEpoch; typ <= CmdBreakLock; typ++ {
		if s := typ.String(); strings.HasPrefix(s, "CmdType(") {
			t.Fatalf("%d has no name", typ)
		}
		if !seen[typ] {
			t.Errorf("no %s command round-tripped", typ)
		}
	}
	if s := CmdType(99).String(); s != "CmdType(99)" {
		t.Fatal(s)
	}
}

// A command whose Type disagrees with its payload, or that has none, is
// refused before it is proposed.
func TestCommandEncodeRefusesMismatch(t *testing.T) {
	for name, c := range map[string]Command{
		"no payload":     {Type: CmdOpen},
		"nothing":        {},
		"type mismatch":  {Type: CmdRelease, Payload: &AcquireArgs{Handle: 1}},
		"unknown type":   {Type: CmdType(200), Payload: &EpochArgs{}},
		"matching type ": {Type: CmdAcquire, Payload: &AcquireArgs{Handle: 1}},
	} {
		_, err := c.Encode()
		if ok := name == "matching type "; ok != (err == nil) {
			t.Errorf("%s: Encode: %v", name, err)
		} else if err != nil && !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("%s: %v does not wrap ErrMalformedCommand", name, err)
		}
	}
}

func TestDecodeCommandRejectsBadBytes(t *testing.T) {
	good, err := (&Command{Session: 1, Seq: 2, Payload: &SetContentsArgs{Handle: 3, Contents: []byte("hello"), Path: "/ls/c/f"}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":         nil,
		"version only":  {commandVersion},
		"version 0":     append([]byte{0}, good[1:]...),
		"version 3":     append([]byte{3}, good[1:]...),
		"version 255":   append([]byte{255}, good[1:]...),
		"never used":    {commandVersion, 0xc1},
		"not a map":     {commandVersion, 0xa3, 'a', 'b', 'c'},
		"bad field":     {commandVersion, 0x81, 0xa1, 't', 0xa1, 'x'},
		"str32 bomb":    {commandVersion, 0xdb, 0xff, 0xff, 0xff, 0xff},
		"array32 bomb":  {commandVersion, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"map32 bomb":    {commandVersion, 0xdf, 0xff, 0xff, 0xff, 0xff},
		"path str32":    {commandVersion, 0x81, 0xa1, 'p', 0xdb, 0x00, 0x0f, 0xff, 0xff},
		"nested arrays": append([]byte{commandVersion}, bytes.Repeat([]byte{0xdc, 0xff, 0xff}, 1000)...),
	}
	for i := 1; i < len(good); i++ {
		cases[fmt.Sprintf("truncated to %d", i)] = good[:i]
	}
	// The same bytes after a version-1 byte.
	for name, b := range cases {
		if len(b) > 1 && b[0] == commandVersion {
			cases["v1 "+name] = append([]byte{commandV1}, b[1:]...)
		}
	}
	// Version 2's own shape: [envelope, payload].
	v2 := func(parts ...any) []byte {
		b, err := msgpack.Marshal(parts)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{commandVersion}, b...)
	}
	env := map[string]any{"t": uint8(CmdSetContents), "s": 1, "q": 2}
	cases["v2 array of 1"] = v2(env)
	cases["v2 array of 3"] = v2(env, map[string]any{"h": 3}, map[string]any{})
	cases["v2 envelope not a map"] = v2("x", map[string]any{"h": 3})
	cases["v2 payload not a map"] = v2(env, "x")
	cases["v2 payload field of the wrong type"] = v2(env, map[string]any{"h": "three"})
	cases["v2 unknown type"] = v2(map[string]any{"t": 99}, map[string]any{})
	cases["v2 type 0"] = v2(map[string]any{"t": 0}, map[string]any{})
	for name, b := range cases {
		if c, err := DecodeCommand(b); err == nil {
			t.Errorf("%s: decoded %+v", name, c)
		}
	}
}

func TestCommandEncodeTooLarge(t *testing.T) {
	p := &SetContentsArgs{Handle: 1, Contents: make([]byte, MaxCommandSize)}
	c := Command{Session: 1, Seq: 1, Payload: p}
	if _, err := c.Encode(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize command: %v", err)
	}
	// Find the largest contents that still fit: the encoding is exactly at
	// the limit, and one byte more fails.
	lo, hi := 0, MaxCommandSize
	for lo < hi {
		mid := (lo + hi + 1) / 2
		p.Contents = make([]byte, mid)
		if _, err := c.Encode(); err == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	p.Contents = make([]byte, lo)
	b, err := c.Encode()
	if err != nil || len(b) != MaxCommandSize {
		t.Fatalf("largest fitting command: %d bytes, %v", len(b), err)
	}
	p.Contents = make([]byte, lo+1)
	if _, err := c.Encode(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	// 256 KiB of contents, the cell's limit, always fits.
	p.Contents = make([]byte, 256*1024)
	p.Path = "/ls/c/" + strings.Repeat("p", 1000)
	if _, err := c.Encode(); err != nil {
		t.Fatalf("max contents: %v", err)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		{Time: 1, Payload: &EpochArgs{}},
		{Time: 2, Client: "cli", Principal: "pr", Payload: &CreateSessionArgs{}},
		{Session: 3, Seq: 4, Ack: 3, Payload: &OpenArgs{Path: "/ls/c/a/b", Flags: fsmtRWC | FlagEphemeral, Contents: []byte("x"), LockDelay: 5}},
		{Session: 3, Seq: 5, Payload: &SetContentsArgs{Handle: 9, Contents: []byte("hello"), IfGen: 8, HasIfGen: true}},
		{Session: 3, Seq: 6, Payload: &AcquireArgs{Handle: 9, Mode: LockShared, Wait: true}},
		{Session: 3, Seq: 7, Payload: &CancelWaitArgs{Handle: 9, WaitSeq: 6}},
		{Session: 3, Payload: &CloseSessionArgs{Expired: true}},
		{Time: 1 << 62, Payload: &GrantArgs{Path: "/ls/c/l"}},
	} {
		b, err := c.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, bomb := range fsmtBombs() {
		f.Add(append([]byte{commandVersion}, bomb...))
		f.Add(append([]byte{commandV1}, bomb...))
	}
	// Version-1 entries as committed.
	for _, e := range readCommittedLog(f, committedLogV1)[:40] {
		f.Add(e.Data)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if c != nil {
				t.Fatalf("error %v with a command", err)
			}
			return
		}
		// Whatever decodes re-encodes (unless too large) and decodes to the
		// same command.
		e, err := c.Encode()
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return
			}
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		c2, err := DecodeCommand(e)
		if err != nil {
			t.Fatalf("decode of re-encoded %+v: %v", c, err)
		}
		if !reflect.DeepEqual(normCmd(c), normCmd(c2)) {
			t.Fatalf("round trip %+v -> %+v", c, c2)
		}
	})
}

// normCmd is c with a copy of its payload in which every empty slice is
// nil: msgpack's omitempty writes neither, so they decode alike.
func normCmd(c *Command) Command {
	n := *c
	if n.Payload == nil {
		return n
	}
	v := reflect.ValueOf(n.Payload).Elem()
	cp := reflect.New(v.Type())
	cp.Elem().Set(v)
	for i := range cp.Elem().NumField() {
		if f := cp.Elem().Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	n.Payload = cp.Interface().(Payload)
	return n
}

func fsmtBombs() [][]byte {
	chain := func(hdr []byte, n int) []byte { return bytes.Repeat(hdr, n) }
	return [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdb, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0xff, 0xff, 0xff, 0xff},
		{0xc6, 0xff, 0xff, 0xff, 0xff},
		{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
		chain([]byte{0xdc, 0xff, 0xff}, 1),
		chain([]byte{0xdc, 0xff, 0xff}, 64),
		chain([]byte{0xdc, 0xff, 0xff}, 5000),
		chain([]byte{0xde, 0xff, 0xff}, 64),
		chain([]byte{0x91}, 10000),
		append([]byte{0x81, 0xa1, 'p'}, 0xdb, 0xff, 0xff, 0xff, 0xff),
		append([]byte{0x81, 0xa1, 'z'}, 0xdd, 0xff, 0xff, 0xff, 0xff),
		append([]byte{0x81, 0xa1, 'z'}, 0xdf, 0xff, 0xff, 0xff, 0xff),
		append([]byte{0x81, 0xa1, 'z'}, chain([]byte{0xdc, 0xff, 0xff}, 100)...),
		append([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, 0xa1, 'z', 0xdd, 0xff, 0xff, 0xff, 0xff),
	}
}

func fsmtAllocDuring(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// Decoding must not allocate far more than its input (at most
// 64 x input + 1 MiB: docs/testplan.md#allocation-bound): the bombs that
// stay within it.
func TestDecodeCommandBombsAreCheap(t *testing.T) {
	for i, bomb := range append(fsmtBombs(), fsmtBombs()...) {
		v := commandVersion
		if i >= len(fsmtBombs()) {
			v = commandV1
		}
		b := append([]byte{v}, bomb...)
		var err error
		n := fsmtAllocDuring(func() { _, err = DecodeCommand(b) })
		if err == nil {
			t.Errorf("bomb %d decoded", i)
		}
		if limit := uint64(64*len(b) + 1<<20); n > limit {
			t.Errorf("bomb %d (% x...): %d bytes allocated, limit %d", i, b[:min(len(b), 8)], n, limit)
		}
	}
}

func TestDecodeCommandBombAllocation(t *testing.T) {
	for _, b := range [][]byte{
		{commandV1, 0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff},
		{commandV1, 0x81, 0xa1, 'c', 0xdb, 0xff, 0xff, 0xff, 0xff},
		// Version 2: an empty envelope, then a payload claiming 4 GiB.
		{commandVersion, 0x92, 0x80, 0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff},
		{commandVersion, 0x92, 0x81, 0xa1, 't', 0x06, 0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff},
		{commandVersion, 0x92, 0x81, 0xa2, 'p', 'r', 0xdb, 0xff, 0xff, 0xff, 0xff, 0x80},
	} {
		var err error
		n := fsmtAllocDuring(func() { _, err = DecodeCommand(b) })
		if err == nil {
			t.Errorf("% x decoded", b)
		}
		if limit := uint64(64*len(b) + 1<<20); n > limit {
			t.Errorf("% x: %d bytes allocated, limit %d", b, n, limit)
		}
	}
}
