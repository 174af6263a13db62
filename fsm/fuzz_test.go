package fsm

// Fuzz targets (docs/testplan.md#fuzzing) for the replicated state machine:
//
//   - FuzzDecodeRaftEntry: arbitrary Raft entries are decoded and applied
//     to two FSMs in the same state. Decoding stays within the allocation
//     bound (docs/testplan.md#allocation-bound) and rejects with an error
//     (Apply then panics, by design: stopping beats diverging); everything
//     that decodes applies without panicking (except an unknown command
//     type, also by design) and both FSMs return identical results and
//     changes for every entry and snapshot to identical bytes at the end. A third FSM restored from
//     that snapshot must then behave exactly like the original. Rejections
//     wrap ErrMalformedCommand.
//   - FuzzSnapshotRestore: arbitrary bytes restored into an FSM, within
//     the allocation bound, give an error wrapping ErrMalformedSnapshot
//     and leave the state alone, or a state whose
//     snapshot restores to the same snapshot bytes and behaves the same.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"

	"lockcell/fixtures/fuzzbound"
)

const (
	fzCell = "c"
	fzTime = int64(1_700_000_000_000_000_000)
)

// fzRejection checks that a decode or restore error wraps want
// (ErrMalformedCommand, ErrMalformedSnapshot).
func fzRejection(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: rejection %v does not wrap %v", what, err, want)
	}
}

// fzFSM is an FSM with its log position and the changes its observer saw.
type fzFSM struct {
	f       *FSM
	changes map[uint64][]Change
}

func fzNewFSM() *fzFSM {
	z := &fzFSM{f: NewFSM(fzCell, slogDiscard()), changes: map[uint64][]Change{}}
	z.f.SetObserver(func(index uint64, ch []Change) { z.changes[index] = append([]Change(nil), ch...) })
	return z
}

// apply applies data as the entry at index, returning the result or the
// panic value.
func (z *fzFSM) apply(index uint64, data []byte) (res any, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fzPanic{p, debug.Stack()}
		}
	}()
	return z.f.ApplyEntry(index, data), nil
}

func (z *fzFSM) snapshot(t *testing.T) []byte {
	t.Helper()
	snap, err := z.f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var sink fzSink
	if err := persist(snap, &sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	snap.Release()
	return sink.Bytes()
}

// fzPanic is a recovered panic and where it happened. Its String is the
// value only, so two FSMs' panics compare equal when their values do.
type fzPanic struct {
	v     any
	stack []byte
}

func (p fzPanic) String() string { return fmt.Sprint(p.v) }

// fzStack returns the stack of a panic apply recovered, for reports.
func fzStack(p any) string {
	if fp, ok := p.(fzPanic); ok {
		return string(fp.stack)
	}
	return ""
}

type fzSink struct{ bytes.Buffer }

func (*fzSink) ID() string    { return "fuzz" }
func (*fzSink) Cancel() error { return nil }
func (*fzSink) Close() error  { return nil }

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fzEncode encodes c or fails the fuzz setup.
func fzEncode(tb testing.TB, c Command) []byte {
	tb.Helper()
	b, err := c.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The prelude's sessions and handles (ids are the entries' indexes).
const (
	fzAlice    = 3  // session of principal alice
	fzBob      = 4  // session of principal bob
	fzCarol    = 18 // session of principal carol; expires holding /ls/c/l
	fzHRoot    = 8  // alice's handle on the root
	fzHEveryF  = 6  // alice's handle on the ACL file /ls/c/acl/everyone
	fzHA       = 10 // alice's handle on /ls/c/a: holds it exclusive (generation 13)
	fzHD       = 11 // alice's handle on the directory /ls/c/d
	fzHABob    = 12 // bob's handle on /ls/c/a (all events): queued exclusive, wait seq 3
	fzHEph     = 15 // bob's handle on his ephemeral /ls/c/d/e: holds it shared
	fzLockGenA = 13
)

// fzPrelude is the state both FSMs start from, so fuzzed entries meet
// sessions of different principals, ACL files and names, handles, held and
// queued locks, an ephemeral file, a directory and a lock-delay instead of
// an empty cell. Entry i has index i+1; see the constants above.
func fzPrelude(tb testing.TB) [][]byte {
	const rwc = FlagRead | FlagWrite | FlagCreate
	var seq = map[uint64]uint64{}
	req := func(c Command) Command {
		seq[c.Session]++
		c.Seq, c.Ack = seq[c.Session], seq[c.Session]-1
		c.Principal = map[uint64]string{fzAlice: "alice", fzBob: "bob", fzCarol: "carol"}[c.Session]
		if c.Time == 0 {
			c.Time = fzTime
		}
		return c
	}
	cmds := []Command{
		{Time: fzTime, Payload: &EpochArgs{}},
		{Time: fzTime, Payload: &CellKeyArgs{Key: []byte("0123456789abcdef0123456789abcdef")}},
		{Time: fzTime, Client: "a", Principal: "alice", Payload: &CreateSessionArgs{Host: "alice-host", PID: 7, Program: "fuzz"}},
		{Time: fzTime, Client: "b", Principal: "bob", Payload: &CreateSessionArgs{}},
		req(Command{Session: fzAlice, Admin: true, Payload: &OpenArgs{Path: "/ls/c/acl", Flags: rwc | FlagDirectory}}),
		req(Command{Session: fzAlice, Admin: true, Payload: &OpenArgs{Path: "/ls/c/acl/everyone", Flags: rwc, Contents: []byte("*\n")}}),
		req(Command{Session: fzAlice, Admin: true, Payload: &OpenArgs{Path: "/ls/c/acl/admins", Flags: rwc, Contents: []byte("# admins\nalice\n")}}),
		req(Command{Session: fzAlice, Admin: true, Payload: &OpenArgs{Path: "/ls/c", Flags: FlagRead | FlagWrite}}),
		req(Command{Session: fzAlice, Admin: true, Payload: &SetACLArgs{Handle: fzHRoot, ACL: &ACLNames{Write: "everyone", ChangeACL: "admins"}}}),
		req(Command{Session: fzAlice, Payload: &OpenArgs{Path: "/ls/c/a", Flags: rwc, Contents: []byte("x"), LockDelay: 1e9}}),
		req(Command{Session: fzAlice, Payload: &OpenArgs{Path: "/ls/c/d", Flags: rwc | FlagDirectory}}),
		req(Command{Session: fzBob, Payload: &OpenArgs{Path: "/ls/c/a", Flags: FlagRead | FlagWrite, EventMask: 0x3f}}),
		req(Command{Session: fzAlice, Payload: &AcquireArgs{Handle: fzHA, Mode: LockExclusive}}),
		req(Command{Session: fzBob, Payload: &AcquireArgs{Handle: fzHABob, Mode: LockExclusive, Wait: true}}),
		req(Command{Session: fzBob, Payload: &OpenArgs{Path: "/ls/c/d/e", Flags: rwc | FlagEphemeral, LockDelay: 1e9, EventMask: 1}}),
		req(Command{Session: fzBob, Payload: &AcquireArgs{Handle: fzHEph, Mode: LockShared}}),
		req(Command{Session: fzAlice, Payload: &SetACLArgs{Handle: fzHD, ACL: &ACLNames{Read: "admins", Write: "admins", ChangeACL: "admins"}}}),
		{Time: fzTime, Client: "c", Principal: "carol", Payload: &CreateSessionArgs{Host: "carol-host", PID: 1 << 40, Program: "expires"}},
		req(Command{Session: fzCarol, Payload: &OpenArgs{Path: "/ls/c/l", Flags: rwc, LockDelay: 5e9}}),
		req(Command{Session: fzCarol, Payload: &AcquireArgs{Handle: 19, Mode: LockExclusive}}),
		{Time: fzTime + 1e9, Session: fzCarol, Payload: &CloseSessionArgs{Expired: true}},
	}
	out := make([][]byte, len(cmds))
	for i, c := range cmds {
		out[i] = fzEncode(tb, c)
	}
	return out
}

// TestFuzzPrelude checks the prelude builds the state its constants
// describe, so the seeds mean what they say.
func TestFuzzPrelude(t *testing.T) {
	z := fzNewFSM()
	for i, e := range fzPrelude(t) {
		r, p := z.apply(uint64(i+1), e)
		if p != nil || r.(*Result).Err != nil {
			t.Fatalf("prelude entry %d: %v %+v", i+1, p, r)
		}
	}
	f := z.f
	a, e, l := f.nodes["/ls/c/a"], f.nodes["/ls/c/d/e"], f.nodes["/ls/c/l"]
	switch {
	case len(f.sessions) != 2 || f.sessions[fzAlice] == nil || f.sessions[fzBob] == nil:
		t.Fatalf("sessions %v", f.SessionIDs())
	case a == nil || a.LockGen != fzLockGenA || len(a.Holders) != 1 || a.Holders[0].Handle != fzHA ||
		len(a.Waiters) != 1 || a.Waiters[0].Handle != fzHABob || a.WriteACL != "everyone":
		t.Fatalf("/ls/c/a: %+v", a)
	case e == nil || !e.Ephemeral || e.LockMode != LockShared || e.Holders[0].Handle != fzHEph:
		t.Fatalf("/ls/c/d/e: %+v", e)
	case l == nil || l.LockDelayUntil != fzTime+6e9 || len(l.Holders) != 0:
		t.Fatalf("/ls/c/l: %+v", l)
	case f.nodes["/ls/c/d"].ReadACL != "admins" || f.handles[fzHRoot] == nil || f.handles[fzHEveryF] == nil || f.handles[fzHD] == nil:
		t.Fatal("ACL names or handles")
	}
}

// fzEntries splits fuzz input into Raft entries: each is a uvarint length
// and that many bytes; a length past the end takes the rest.
func fzEntries(in []byte) [][]byte {
	var out [][]byte
	for len(in) > 0 && len(out) < 32 {
		n, k := binary.Uvarint(in)
		if k <= 0 || n > uint64(len(in)-k) {
			if k <= 0 {
				k = 1
			}
			out = append(out, in[min(k, len(in)):])
			break
		}
		out = append(out, in[k:k+int(n)])
		in = in[k+int(n):]
	}
	return out
}

// fzJoin is the inverse of fzEntries, for seeds.
func fzJoin(entries ...[]byte) []byte {
	var b []byte
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b
}

// fzSeedCommands are fuzz seeds against the prelude's state: every command
// type, retries, fences, ACL changes and denials, and edges the master
// never sends.
func fzSeedCommands() [][]Command {
	t := fzTime + 2e9
	al := func(c Command) Command {
		c.Session, c.Principal, c.Time = fzAlice, "alice", t
		return c
	}
	bo := func(c Command) Command {
		c.Session, c.Principal, c.Time = fzBob, "bob", t
		return c
	}
	fence := &Fence{Path: "/ls/c/a", Mode: LockExclusive, Generation: fzLockGenA}
	return [][]Command{
		{{Time: t, Payload: &EpochArgs{}}},
		{al(Command{Seq: 100, Payload: &ReleaseArgs{Handle: fzHA}})},
		{al(Command{Seq: 100, Payload: &ReleaseArgs{Handle: fzHA}}), al(Command{Seq: 100, Payload: &ReleaseArgs{Handle: fzHA}})},
		{al(Command{Seq: 100, Ack: 99, Payload: &ReleaseArgs{Handle: fzHA}}), al(Command{Seq: 100, Ack: 100, Payload: &ReleaseArgs{Handle: fzHA}})},
		{{Time: t, Session: fzAlice, Payload: &CloseSessionArgs{Expired: true}}, {Time: t + 2e9, Payload: &GrantArgs{Path: "/ls/c/a"}}},
		{{Time: t, Session: fzBob, Payload: &CloseSessionArgs{}}},
		{{Time: t, Session: fzBob, Payload: &CloseSessionArgs{Expired: true}}, al(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c/d/e", Flags: FlagRead}})},
		{al(Command{Seq: 100, Fence: fence, Payload: &SetContentsArgs{Handle: fzHA, Contents: []byte("new"), IfGen: fzHA, HasIfGen: true}})},
		{al(Command{Seq: 100, Fence: &Fence{Path: "/ls/c/a", Mode: LockShared, Generation: fzLockGenA}, Payload: &SetContentsArgs{Handle: fzHA, Contents: []byte("new")}})},
		{bo(Command{Seq: 100, Payload: &SetContentsArgs{Handle: fzHABob, Contents: []byte("bob")}})},
		{al(Command{Seq: 100, Payload: &DeleteArgs{Handle: fzHA}})},
		{al(Command{Seq: 100, Payload: &DeleteArgs{Handle: fzHD}})},
		{al(Command{Seq: 100, Payload: &DeleteArgs{Handle: fzHRoot}})},
		{bo(Command{Seq: 100, Payload: &CloseArgs{Handle: fzHEph}})},
		{bo(Command{Seq: 100, Payload: &CancelWaitArgs{Handle: fzHABob, WaitSeq: 3}})},
		{bo(Command{Seq: 100, Payload: &AcquireArgs{Handle: fzHEph, Mode: LockExclusive, Wait: true}}),
			al(Command{Seq: 100, Payload: &AcquireArgs{Handle: fzHD, Mode: 7}})},
		{{Time: fzTime + 7e9, Payload: &GrantArgs{Path: "/ls/c/l"}}},
		{{Time: t, Principal: "dave", Payload: &CreateSessionArgs{}},
			{Time: t, Session: 23, Principal: "dave", Seq: 1, Payload: &OpenArgs{Path: "/ls/c/l", Flags: FlagRead | FlagWrite}},
			{Time: t, Session: 23, Principal: "dave", Seq: 2, Payload: &AcquireArgs{Handle: 24, Mode: LockExclusive}}},
		{bo(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c/d/f", Flags: FlagRead | FlagWrite | FlagCreate}})},
		{bo(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c/d", Flags: FlagRead}})},
		{bo(Command{Seq: 100, Payload: &SetACLArgs{Handle: fzHABob, ACL: &ACLNames{Read: "x"}}})},
		{al(Command{Seq: 100, Payload: &SetACLArgs{Handle: fzHA, ACL: &ACLNames{Read: "admins", Write: "missing"}}})},
		{al(Command{Seq: 100, Payload: &SetACLArgs{Handle: fzHA, ACL: &ACLNames{Read: "a/b", Write: ".."}}})},
		{al(Command{Seq: 100, Payload: &SetACLArgs{Handle: fzHA}})},
		{al(Command{Seq: 100, Payload: &SetContentsArgs{Handle: fzHEveryF, Contents: []byte("bad entry\n")}})},
		{al(Command{Seq: 100, Admin: true, Payload: &SetContentsArgs{Handle: fzHEveryF, Contents: []byte("carol\n")}}),
			bo(Command{Seq: 100, Payload: &SetContentsArgs{Handle: fzHABob, Contents: []byte("bob")}})},
		{al(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c/a/b", Flags: FlagCreate}})},
		{al(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c/d/", Flags: FlagCreate | FlagDirectory}})},
		{al(Command{Seq: 100, Payload: &OpenArgs{Path: "", Flags: FlagCreate}})},
		{al(Command{Seq: 100, Payload: &OpenArgs{Path: "/ls/c", Flags: FlagCreate | FlagDirectory | FlagEphemeral}})},
		{{Time: t, Payload: &CellKeyArgs{Key: []byte("short")}}},
		{al(Command{Seq: 1 << 63, Ack: 1<<63 - 1, Payload: &OpenArgs{Path: "/ls/c/z", Flags: FlagCreate, LockDelay: 1<<63 - 1}})},
	}
}

// fzUnknownTypeEntries are entries of command types no version defines,
// in either encoding: they must not decode, so the replica stops before
// it changes anything.
func fzUnknownTypeEntries(tb testing.TB) [][]byte {
	var out [][]byte
	for _, v1 := range []commandV1Fields{{Type: 200, Time: fzTime}, {Type: 0, Time: fzTime, Session: fzAlice, Seq: 100, Principal: "alice"}} {
		b, err := msgpack.Marshal(&v1)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, append([]byte{commandV1}, b...))
	}
	for _, ty := range []CmdType{0, 200} {
		b, err := msgpack.Marshal([]any{&envelope{Type: ty, Time: fzTime}, map[string]any{}})
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, append([]byte{commandVersion}, b...))
	}
	return out
}

func FuzzDecodeRaftEntry(f *testing.F) {
	for _, cs := range fzSeedCommands() {
		var es [][]byte
		for _, c := range cs {
			es = append(es, fzEncode(f, c))
		}
		f.Add(fzJoin(es...))
	}
	for _, e := range fzUnknownTypeEntries(f) {
		f.Add(fzJoin(e))
	}
	prelude := fzPrelude(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := fzNewFSM(), fzNewFSM()
		for i, e := range prelude {
			for _, z := range []*fzFSM{a, b} {
				if _, p := z.apply(uint64(i+1), e); p != nil {
					t.Fatalf("prelude entry %d: %v\n%s", i+1, p, fzStack(p))
				}
			}
		}
		index := uint64(len(prelude))
		entries := fzEntries(in)
		cmds, errs := make([]*Command, len(entries)), make([]error, len(entries))
		alloc := fuzzbound.Alloc(func() {
			for i, e := range entries {
				cmds[i], errs[i] = DecodeCommand(e)
			}
		})
		if limit := fuzzbound.Limit(len(in)); alloc > limit {
			t.Fatalf("DecodeCommand of %d entries (%d bytes) allocated %d, limit %d", len(entries), len(in), alloc, limit)
		}
		for i, e := range entries {
			index++
			cmd, err := cmds[i], errs[i]
			if err != nil {
				fzRejection(t, "DecodeCommand", err, ErrMalformedCommand)
				if cmd != nil {
					t.Fatalf("DecodeCommand returned a command and %v", err)
				}
				// An entry this version cannot decode stops the replica
				// before it changes anything.
				before := a.snapshot(t)
				ra, pa := a.apply(index, e)
				rb, pb := b.apply(index, e)
				if pa == nil || pb == nil {
					t.Fatalf("Apply of an undecodable entry returned %v / %v", ra, rb)
				}
				if !bytes.Equal(before, a.snapshot(t)) {
					t.Fatal("Apply of an undecodable entry changed the state")
				}
				return
			}
			fzCommandRoundTrip(t, cmd)
			ra, pa := a.apply(index, e)
			rb, pb := b.apply(index, e)
			if fmt.Sprint(pa) != fmt.Sprint(pb) {
				t.Fatalf("entry %d (%+v): panics differ: %v / %v", index, cmd, pa, pb)
			}
			if pa != nil {
				// Only an unknown command type may stop the replica; its
				// FSM is dead (locked), so the input ends here.
				if !strings.HasPrefix(cmd.Type.String(), "CmdType(") {
					t.Fatalf("entry %d (%+v) panicked: %v\n%s", index, cmd, pa, fzStack(pa))
				}
				return
			}
			if r, ok := ra.(*Result); !ok || r == nil {
				t.Fatalf("entry %d (%+v): Apply returned %T %v", index, cmd, ra, ra)
			}
			if !reflect.DeepEqual(ra, rb) {
				t.Fatalf("entry %d (%+v): results differ: %+v / %+v", index, cmd, ra, rb)
			}
			if !reflect.DeepEqual(a.changes[index], b.changes[index]) {
				t.Fatalf("entry %d (%+v): changes differ: %+v / %+v", index, cmd, a.changes[index], b.changes[index])
			}
		}
		sa, sb := a.snapshot(t), b.snapshot(t)
		if !bytes.Equal(sa, sb) {
			t.Fatalf("after %d entries the two FSMs' snapshots differ", len(entries))
		}
		// A replica restored from the snapshot continues exactly like one
		// that applied the log.
		snap := sa
		c := fzNewFSM()
		if err := c.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("restore of a snapshot: %v", err)
		}
		if !bytes.Equal(snap, c.snapshot(t)) {
			t.Fatal("snapshot -> restore -> snapshot changed the bytes")
		}
		fzSameFuture(t, a, c, index)
	})
}

// fzCommandRoundTrip: a decoded command re-encodes (unless too large) to
// bytes that decode to the same command.
func fzCommandRoundTrip(t *testing.T, c *Command) {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		return
	}
	c2, err := DecodeCommand(b)
	if err != nil {
		t.Fatalf("decode of re-encoded %+v: %v", c, err)
	}
	if !reflect.DeepEqual(normCmd(c), normCmd(c2)) {
		t.Fatalf("command round trip %+v -> %+v", c, c2)
	}
}

// fzProbe is a fixed run of commands applied after a restore to compare
// two FSMs' behaviour: it touches every session's handles and locks.
func fzProbe(f *FSM, from uint64) [][]byte {
	var cs []Command
	t := fzTime + 100e9
	for _, id := range f.SessionIDs() {
		cs = append(cs, Command{Time: t, Session: id, Seq: 1 << 40, Payload: &OpenArgs{Path: "/ls/c/probe", Flags: FlagRead | FlagWrite | FlagCreate | FlagEphemeral}})
	}
	f.mu.RLock()
	// Retries of every remembered request: the stored result comes back.
	for _, id := range sortedKeys(f.sessions) {
		for _, q := range sortedKeys(f.sessions[id].Results) {
			cs = append(cs, Command{Time: t, Session: id, Seq: q, Payload: &ReleaseArgs{}})
		}
	}
	for _, id := range sortedKeys(f.handles) {
		h := f.handles[id]
		cs = append(cs, Command{Time: t, Session: h.Session, Payload: &SetContentsArgs{Handle: id, Contents: []byte("p")}},
			Command{Time: t, Session: h.Session, Payload: &AcquireArgs{Handle: id, Mode: LockShared, Wait: true}})
	}
	f.mu.RUnlock()
	for _, id := range f.SessionIDs() {
		cs = append(cs, Command{Time: t, Session: id, Payload: &CloseSessionArgs{Expired: id%2 == 0}})
	}
	cs = append(cs, Command{Time: t, Payload: &EpochArgs{}})
	var out [][]byte
	for _, c := range cs {
		if b, err := c.Encode(); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// fzSameFuture applies the probe run to a and c from index on and
// requires identical results, changes and snapshots.
func fzSameFuture(t *testing.T, a, c *fzFSM, index uint64) {
	t.Helper()
	for _, e := range fzProbe(a.f, index) {
		index++
		ra, pa := a.apply(index, e)
		rc, pc := c.apply(index, e)
		if pa != nil || pc != nil {
			t.Fatalf("probe entry %d panicked: %v / %v\n%s%s", index, pa, pc, fzStack(pa), fzStack(pc))
		}
		if r, ok := ra.(*Result); !ok || r == nil {
			cmd, _ := DecodeCommand(e)
			t.Fatalf("probe entry %d (%+v): Apply returned %T %v", index, cmd, ra, ra)
		}
		if !reflect.DeepEqual(ra, rc) || !reflect.DeepEqual(a.changes[index], c.changes[index]) {
			cmd, _ := DecodeCommand(e)
			t.Fatalf("probe entry %d (%+v): restored FSM differs: %+v %+v / %+v %+v", index, cmd, ra, a.changes[index], rc, c.changes[index])
		}
	}
	if !bytes.Equal(a.snapshot(t), c.snapshot(t)) {
		t.Fatalf("after the probe run (to index %d) the restored FSM's snapshot differs", index)
	}
}

// ---------------------------------------------------------------------------
// FuzzSnapshotRestore.

// fzSnapshotOf returns the snapshot bytes of a state built by cmds.
func fzSnapshotOf(tb testing.TB, entries [][]byte) []byte {
	z := fzNewFSM()
	for i, e := range entries {
		if _, p := z.apply(uint64(i+1), e); p != nil {
			tb.Fatalf("seed entry %d: %v", i+1, p)
		}
	}
	snap, err := z.f.Snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	var sink fzSink
	persist(snap, &sink)
	return sink.Bytes()
}

func FuzzSnapshotRestore(f *testing.F) {
	prelude := fzPrelude(f)
	f.Add(fzSnapshotOf(f, nil))
	f.Add(fzSnapshotOf(f, prelude))
	f.Add(fzSnapshotOf(f, prelude[:9]))
	f.Fuzz(func(t *testing.T, in []byte) {
		z := fzNewFSM()
		before := z.snapshot(t)
		var err error
		var panicked any
		var stack []byte
		alloc := fuzzbound.Alloc(func() {
			defer func() {
				if panicked = recover(); panicked != nil {
					stack = debug.Stack()
				}
			}()
			err = z.f.Restore(io.NopCloser(bytes.NewReader(in)))
		})
		if panicked != nil {
			t.Fatalf("Restore panicked: %v\n%s", panicked, stack)
		}
		if limit := fuzzbound.Limit(len(in)); alloc > limit {
			t.Fatalf("Restore of %d bytes allocated %d, limit %d", len(in), alloc, limit)
		}
		if err != nil {
			fzRejection(t, "Restore", err, ErrMalformedSnapshot)
			if !bytes.Equal(before, z.snapshot(t)) {
				t.Fatal("a failed Restore changed the state")
			}
			return
		}
		s1 := z.snapshot(t)
		c := fzNewFSM()
		if err := c.f.Restore(io.NopCloser(bytes.NewReader(s1))); err != nil {
			t.Fatalf("re-restore of the restored state's snapshot: %v", err)
		}
		if s2 := c.snapshot(t); !bytes.Equal(s1, s2) {
			t.Fatalf("restored state does not round-trip:\n%x\n%x", s1, s2)
		}
		_, _, _, applied := z.f.Counts()
		fzSameFuture(t, z, c, applied)
	})
}

// TestSnapshotElementSizes keeps checkSnapshotShape's least element sizes
// equal to the encoding of each element type's zero value, and checks that
// every element of a real snapshot takes at least that many bytes (so a
// change of encoder options that shortens them fails here).
func TestSnapshotElementSizes(t *testing.T) {
	least := map[string]int{}
	for _, c := range []struct {
		field string
		v     any
		min   int
	}{
		{"n", &Node{}, minNodeBytes},
		{"lh", &Holder{}, minHolderBytes},
		{"lw", &Waiter{}, minWaiterBytes},
		{"s", &Session{}, minSessionBytes},
		{"h", &Handle{}, minHandleBytes},
		{"r", &sessionResult{Result: &Result{}}, minResultBytes},
	} {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.SetSortMapKeys(true)
		if err := enc.Encode(c.v); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != c.min {
			t.Errorf("a zero %T encodes to %d bytes; its least size is %d", c.v, buf.Len(), c.min)
		}
		least[c.field] = c.min
	}
	snap := fzSnapshotOf(t, fzPrelude(t))
	r := bytes.NewReader(snap)
	d := msgpack.NewDecoder(r)
	counted := map[string]int{}
	var elements func(field string) error
	elements = func(field string) error {
		min, ok := least[field]
		if !ok {
			return d.Skip()
		}
		n, err := d.DecodeArrayLen()
		for range n {
			start := r.Len()
			if field == "n" {
				err = mapEntries(d, elements)
			} else {
				err = d.Skip()
			}
			if err != nil {
				return err
			}
			if size := start - r.Len(); size < min {
				t.Errorf("an element of %q takes %d bytes, under its least size %d", field, size, min)
			}
			counted[field]++
		}
		return err
	}
	if err := mapEntries(d, elements); err != nil {
		t.Fatal(err)
	}
	for field := range least {
		if counted[field] == 0 {
			t.Errorf("the prelude's snapshot has no element of %q to measure", field)
		}
	}
}

// fzImageBytes encodes a snapshot image as Snapshot does.
func fzImageBytes(tb testing.TB, img *snapshotImage) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// fzRaw builds msgpack bytes: a map of the given keys and raw values.
func fzRaw(tb testing.TB, kv ...any) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		if err := enc.EncodeString(kv[i].(string)); err != nil {
			tb.Fatal(err)
		}
		if err := enc.Encode(kv[i+1]); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

// fzRawArray is an array32 of n raw elements, cycling through elems.
func fzRawArray(n int, elems ...[]byte) msgpack.RawMessage {
	b := []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for i := range n {
		b = append(b, elems[i%len(elems)]...)
	}
	return b
}

// Restore refuses every snapshot image of a state the FSM could not have
// reached, with an error wrapping ErrMalformedSnapshot, and keeps the state
// it had.
func TestRestoreRejectsInconsistentImages(t *testing.T) {
	prelude := fzPrelude(t)
	good := fzSnapshotOf(t, prelude)
	var base snapshotImage
	if err := msgpack.Unmarshal(good, &base); err != nil {
		t.Fatal(err)
	}
	node := func(img *snapshotImage, path string) *Node {
		for _, n := range img.Nodes {
			if n.Path == path {
				return n
			}
		}
		t.Fatalf("no node %s in the prelude", path)
		return nil
	}
	images := map[string]func(img *snapshotImage){
		"version":              func(img *snapshotImage) { img.Version = snapshotVersion + 1 },
		"other cell":           func(img *snapshotImage) { img.Cell = "other" },
		"nil node":             func(img *snapshotImage) { img.Nodes = append(img.Nodes, nil) },
		"nil session":          func(img *snapshotImage) { img.Sessions = append(img.Sessions, nil) },
		"nil handle":           func(img *snapshotImage) { img.Handles = append(img.Handles, nil) },
		"nil result":           func(img *snapshotImage) { img.Results[0].Result = nil },
		"duplicate node":       func(img *snapshotImage) { img.Nodes = append(img.Nodes, img.Nodes[1]) },
		"duplicate session":    func(img *snapshotImage) { img.Sessions = append(img.Sessions, img.Sessions[0]) },
		"duplicate handle":     func(img *snapshotImage) { img.Handles = append(img.Handles, img.Handles[0]) },
		"duplicate result":     func(img *snapshotImage) { img.Results = append(img.Results, img.Results[0]) },
		"orphan node":          func(img *snapshotImage) { img.Nodes = append(img.Nodes, &Node{Path: "/ls/c/none/x"}) },
		"node under a file":    func(img *snapshotImage) { img.Nodes = append(img.Nodes, &Node{Path: "/ls/c/a/b"}) },
		"node outside root":    func(img *snapshotImage) { img.Nodes = append(img.Nodes, &Node{Path: "/ls/x", Dir: true}) },
		"root a file":          func(img *snapshotImage) { node(img, "/ls/c").Dir = false },
		"root ephemeral":       func(img *snapshotImage) { node(img, "/ls/c").Ephemeral = true },
		"no root":              func(img *snapshotImage) { img.Nodes = img.Nodes[1:] },
		"handle of no session": func(img *snapshotImage) { img.Handles[0].Session = 99 },
		"result of no session": func(img *snapshotImage) { img.Results[0].Session = 99 },
		"result at its ack":    func(img *snapshotImage) { img.Results[0].Seq = 0 },
		"session id 0":         func(img *snapshotImage) { img.Sessions[0].ID = 0 },
		"session id ahead":     func(img *snapshotImage) { img.Sessions[0].ID = img.Applied + 1 },
		"handle id ahead":      func(img *snapshotImage) { img.Handles[0].ID = img.Applied + 1 },
		"lock mode":            func(img *snapshotImage) { node(img, "/ls/c/a").LockMode = 3 },
		"free lock held":       func(img *snapshotImage) { node(img, "/ls/c/a").LockMode = LockFree },
		"shared lock unheld":   func(img *snapshotImage) { node(img, "/ls/c/l").LockMode = LockShared },
		"exclusive held twice": func(img *snapshotImage) {
			a := node(img, "/ls/c/a")
			a.Holders = append(a.Holders, Holder{Handle: fzHABob, Session: fzBob})
			a.Waiters = nil
		},
		"holder not a handle":  func(img *snapshotImage) { node(img, "/ls/c/a").Holders[0].Handle = 99 },
		"holder wrong session": func(img *snapshotImage) { node(img, "/ls/c/a").Holders[0].Session = fzBob },
		"holder on other node": func(img *snapshotImage) { node(img, "/ls/c/a").Holders[0].Handle = fzHD },
		"waiter mode":          func(img *snapshotImage) { node(img, "/ls/c/a").Waiters[0].Mode = LockFree },
		"waiter holds":         func(img *snapshotImage) { node(img, "/ls/c/a").Waiters[0].Handle = fzHA },
	}
	inputs := map[string][]byte{
		"empty":            {},
		"trailing byte":    append(append([]byte(nil), good...), 0xc0),
		"not a map":        {0x90},
		"str32 bomb":       {0x83, 0xa1, 'v', 0x02, 0xa1, 'c', 0xa1, 'c', 0xa1, 'k', 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"array32 4G nodes": {0x83, 0xa1, 'v', 0x02, 0xa1, 'c', 0xa1, 'c', 0xa1, 'n', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"unknown field":    fzRaw(t, "v", 2, "c", fzCell, "x", 1),
		"repeated field":   fzRaw(t, "v", 2, "c", fzCell, "c", fzCell),
		"integer field":    {0x81, 0x01, 0x02},
		"dense nodes":      fzRaw(t, "v", 2, "c", fzCell, "n", fzRawArray(1000, []byte{0x90, 0x90})),
	}
	for name, mutate := range images {
		var img snapshotImage
		if err := msgpack.Unmarshal(good, &img); err != nil {
			t.Fatal(err)
		}
		mutate(&img)
		inputs[name] = fzImageBytes(t, &img)
	}
	z := fzNewFSM()
	for i, e := range prelude[:9] {
		z.apply(uint64(i+1), e)
	}
	before := z.snapshot(t)
	for name, in := range inputs {
		err := z.f.Restore(io.NopCloser(bytes.NewReader(in)))
		if !errors.Is(err, ErrMalformedSnapshot) {
			t.Errorf("%s: Restore returned %v", name, err)
		}
		if !bytes.Equal(before, z.snapshot(t)) {
			t.Fatalf("%s: a rejected snapshot changed the state", name)
		}
	}
	if err := z.f.Restore(io.NopCloser(bytes.NewReader(good))); err != nil {
		t.Fatalf("the unmodified snapshot: %v", err)
	}
	if !bytes.Equal(good, z.snapshot(t)) {
		t.Fatal("the unmodified snapshot did not restore to itself")
	}
}

// DecodeCommand's rejections wrap ErrMalformedCommand.
func TestDecodeCommandRejectionsTyped(t *testing.T) {
	good := fzEncode(t, Command{Time: fzTime, Payload: &EpochArgs{}})
	for name, in := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{commandVersion + 1}, good[1:]...),
		"bound":     {commandVersion, 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"trailing":  append(append([]byte(nil), good...), 0xc0),
		"not a map": {commandVersion, 0x92, 0x01, 0x02},
	} {
		if c, err := DecodeCommand(in); c != nil || !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("%s: DecodeCommand returned %v, %v", name, c, err)
		}
	}
}

// Restore of large snapshots stays within the allocation bound
// (docs/testplan.md#allocation-bound),
// 64 x the input + 1 MiB: a valid snapshot of many nodes, sessions,
// handles and remembered results, and hostile ones of the densest elements
// codec.CheckBounds lets through (which the count check must refuse before they
// are decoded, or which are decoded and then refused).
func TestRestoreAllocationBound(t *testing.T) {
	const n = 10000
	z := fzNewFSM()
	index := uint64(0)
	apply := func(c Command) *Result {
		index++
		r, p := z.apply(index, fzEncode(t, c))
		if p != nil || r.(*Result).Err != nil {
			t.Fatalf("entry %d (%+v): %v %+v", index, c, p, r)
		}
		return r.(*Result)
	}
	sess := apply(Command{Time: fzTime, Payload: &CreateSessionArgs{}}).Session
	apply(Command{Time: fzTime, Session: sess, Payload: &OpenArgs{Path: "/ls/c/d", Flags: FlagRead | FlagCreate | FlagDirectory}})
	for i := range n {
		c := Command{Time: fzTime, Session: sess, Payload: &OpenArgs{Path: fmt.Sprintf("/ls/c/d/%d", i), Flags: FlagRead | FlagWrite | FlagCreate, EventMask: 1}}
		if i < 1000 { // remembered results (more would only slow the test)
			c.Seq = uint64(i + 1)
		}
		apply(c)
	}
	for range n / 10 {
		apply(Command{Time: fzTime, Payload: &CreateSessionArgs{}})
	}
	valid := z.snapshot(t)

	// Padding in the key field makes the hostile arrays pass the count check.
	pad := func(field string, elems msgpack.RawMessage, per int) []byte {
		count := int(binary.BigEndian.Uint32(elems[1:]))
		return fzRaw(t, "v", 2, "c", fzCell, field, elems, "k", make([]byte, count*per))
	}
	var locks []byte // a node of 16 one-byte holders and 16 one-byte waiters
	locks = append(locks, 0x82, 0xa2, 'l', 'h', 0xdc, 0, 16)
	locks = append(locks, bytes.Repeat([]byte{0x80}, 16)...)
	locks = append(locks, 0xa2, 'l', 'w', 0xdc, 0, 16)
	locks = append(locks, bytes.Repeat([]byte{0x80}, 16)...)
	for name, in := range map[string][]byte{
		"valid":                 valid,
		"empty nodes":           pad("n", fzRawArray(n, []byte{0x80}, []byte{0x81, 0xa0, 0xc0}), minNodeBytes),
		"nodes of locks":        pad("n", fzRawArray(n/4, locks), minNodeBytes+16*minHolderBytes+16*minWaiterBytes),
		"nodes of locks, short": pad("n", fzRawArray(n, locks), minNodeBytes),
		"empty sessions":        pad("s", fzRawArray(n, []byte{0x80}, []byte{0x81, 0xa0, 0xc0}), minSessionBytes),
		"empty handles":         pad("h", fzRawArray(n, []byte{0x80}, []byte{0x81, 0xa0, 0xc0}), minHandleBytes),
		"results with errors":   pad("r", fzRawArray(n, []byte{0x81, 0xa1, 'r', 0x81, 0xa1, 'e', 0x80}), minResultBytes),
		"empty nodes, unpadded": fzRaw(t, "v", 2, "c", fzCell, "n", fzRawArray(n, []byte{0x80}, []byte{0x81, 0xa0, 0xc0})),
		"empty-path nodes":      fzRaw(t, "v", 2, "c", fzCell, "n", fzRawArray(n, []byte{0x81, 0xa1, 'p', 0xa0})),
		"results, unpadded":     fzRaw(t, "v", 2, "c", fzCell, "r", fzRawArray(n, []byte{0x81, 0xa1, 'r', 0x80})),
	} {
		if err := codec.CheckBounds(in); err != nil {
			t.Fatalf("%s: codec.CheckBounds: %v", name, err)
		}
		r := fzNewFSM()
		var err error
		alloc := fuzzbound.Alloc(func() { err = r.f.Restore(io.NopCloser(bytes.NewReader(in))) })
		if (err == nil) != (name == "valid") {
			t.Fatalf("%s: Restore: %v", name, err)
		}
		if limit := fuzzbound.Limit(len(in)); alloc > limit {
			t.Errorf("%s: Restore of %d bytes allocated %d (%.1f x), limit %d", name, len(in), alloc, float64(alloc)/float64(len(in)), limit)
		} else {
			t.Logf("%s: Restore of %d bytes allocated %d (%.1f x)", name, len(in), alloc, float64(alloc)/float64(len(in)))
		}
	}
}
