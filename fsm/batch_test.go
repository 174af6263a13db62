package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// bgGen draws commands against the fuzz prelude's state and what earlier
// commands created, with request ids that are sometimes retries or stale.
type bgGen struct {
	sessions []uint64            // live or once-live sessions
	handles  []uint64            // every handle id an open returned, and the prelude's
	seq      map[uint64]uint64   // session -> last request id issued
	last     map[uint64]*Command // session -> its last request, for retries
	gens     []uint64            // content generations seen
	now      int64
}

func newBGGen() *bgGen {
	return &bgGen{
		sessions: []uint64{fzAlice, fzBob},
		handles:  []uint64{fzHRoot, fzHEveryF, fzHA, fzHD, fzHABob, fzHEph},
		seq:      map[uint64]uint64{fzAlice: 20, fzBob: 20},
		last:     map[uint64]*Command{},
		gens:     []uint64{0, fzLockGenA},
		now:      fzTime + 2e9,
	}
}

func (g *bgGen) draw(rt *rapid.T) Command {
	g.now += rapid.Int64Range(0, 3e9).Draw(rt, "dt")
	s := rapid.SampledFrom(g.sessions).Draw(rt, "session")
	if c := g.last[s]; c != nil && rapid.IntRange(0, 9).Draw(rt, "retry") == 0 {
		return *c // a retry of the session's last request, as it was sent
	}
	h := rapid.SampledFrom(g.handles).Draw(rt, "handle")
	path := rapid.SampledFrom([]string{"/ls/c/a", "/ls/c/d/x", "/ls/c/y", "/ls/c/d", "/ls/c/d/e"}).Draw(rt, "path")
	var p Payload
	switch rapid.IntRange(0, 11).Draw(rt, "kind") {
	case 0:
		return Command{Time: g.now, Client: "n", Principal: "dave", Payload: &CreateSessionArgs{Host: "h", PID: 1}}
	case 1:
		return Command{Time: g.now, Payload: &EpochArgs{}}
	case 2:
		return Command{Time: g.now, Payload: &GrantArgs{Path: path}}
	case 3:
		return Command{Time: g.now, Session: s, Payload: &CloseSessionArgs{Expired: rapid.Bool().Draw(rt, "expired")}}
	case 4, 5:
		flags := FlagRead | FlagWrite
		if rapid.Bool().Draw(rt, "create") {
			flags |= FlagCreate
		}
		if rapid.IntRange(0, 3).Draw(rt, "eph") == 0 {
			flags |= FlagEphemeral
		}
		p = &OpenArgs{Path: path, Flags: flags, LockDelay: rapid.SampledFrom([]int64{0, 1e9}).Draw(rt, "ld"),
			EventMask: rapid.SampledFrom([]uint32{0, 0x3f}).Draw(rt, "mask"), Contents: []byte("c")}
	case 6:
		p = &SetContentsArgs{Handle: h, Contents: []byte(fmt.Sprint(g.now)), HasIfGen: rapid.Bool().Draw(rt, "cas"),
			IfGen: rapid.SampledFrom(g.gens).Draw(rt, "ifgen")}
	case 7, 8:
		p = &AcquireArgs{Handle: h, Mode: rapid.SampledFrom([]uint8{LockExclusive, LockShared}).Draw(rt, "mode"),
			Wait: rapid.Bool().Draw(rt, "wait")}
	case 9:
		p = &ReleaseArgs{Handle: h}
	case 10:
		p = &CloseArgs{Handle: h}
	case 11:
		p = &CancelWaitArgs{Handle: h, WaitSeq: g.seq[s]}
	}
	g.seq[s]++
	ack := g.seq[s] - 1
	if rapid.IntRange(0, 3).Draw(rt, "lag") == 0 {
		ack = ack / 2 // an acknowledgement that lags behind
	}
	c := Command{Time: g.now, Session: s, Seq: g.seq[s], Ack: ack, Principal: map[uint64]string{fzAlice: "alice", fzBob: "bob"}[s],
		Payload: p}
	if c.Principal == "" {
		c.Principal = "dave"
	}
	g.last[s] = &c
	return c
}

// learn takes ids and generations from a result into the pools.
func (g *bgGen) learn(r *Result) {
	if r.Session != 0 {
		g.sessions = append(g.sessions, r.Session)
		g.seq[r.Session] = 0
	}
	if r.Handle != 0 {
		g.handles = append(g.handles, r.Handle)
	}
	if r.Stat.ContentGen != 0 {
		g.gens = append(g.gens, r.Stat.ContentGen)
	}
}

// bgFSM is an FSM whose observer's changes are kept in apply order.
type bgFSM struct {
	f       *FSM
	changes []Change
}

func newBGFSM(t testing.TB) *bgFSM {
	z := &bgFSM{f: NewFSM(fzCell, slogDiscard())}
	z.f.SetObserver(func(_ uint64, ch []Change) { z.changes = append(z.changes, ch...) })
	for i, e := range fzPrelude(t) {
		z.f.ApplyEntry(uint64(i+1), e)
	}
	z.changes = nil
	return z
}

// bgImage is the state's snapshot with the two log positions taken out,
// since those are what one-by-one and batched application differ in.
func bgImage(t testing.TB, f *FSM) *snapshotImage {
	t.Helper()
	b, err := f.snapshotBytes()
	if err != nil {
		t.Fatal(err)
	}
	img, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	img.Applied, img.LastIndex = 0, 0
	return img
}

func (f *FSM) snapshotBytes() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf bytes.Buffer
	err := f.writeStateLocked(&buf)
	return buf.Bytes(), err
}

// TestBatchEqualsOneByOne: applying commands in batch entries gives every
// command the result, the changes (in order) and the state that applying
// each as its own entry gives, when each lone entry's Raft index is the
// command index the batch gave it. Batches of every size meet retries,
// stale request ids, sessions created and expired inside the batch, and
// Raft indexes with gaps (entries that never reach the state machine).
// A replica restored from the batched state's snapshot then goes on
// numbering where the batched one does.
func TestBatchEqualsOneByOne(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		one, batched := newBGFSM(t), newBGFSM(t)
		gen := newBGGen()
		raftIndex := uint64(len(fzPrelude(t)))
		for range rapid.IntRange(1, 12).Draw(rt, "entries") {
			raftIndex += 1 + uint64(rapid.IntRange(0, 2).Draw(rt, "gap"))
			n := rapid.IntRange(1, 6).Draw(rt, "batch")
			cmds := make([]Command, n)
			enc := make([][]byte, n)
			for i := range cmds {
				cmds[i] = gen.draw(rt)
				enc[i] = fzEncode(t, cmds[i])
			}
			first := max(batched.f.lastIndex+1, raftIndex)
			var got []*Result
			if n == 1 {
				got = []*Result{batched.f.ApplyEntry(raftIndex, enc[0]).(*Result)}
			} else {
				b, err := EncodeBatch(enc)
				if err != nil {
					rt.Fatal(err)
				}
				got = batched.f.ApplyEntry(raftIndex, b).([]*Result)
			}
			if len(got) != n {
				rt.Fatalf("a batch of %d answered %d results", n, len(got))
			}
			for i := range cmds {
				want := one.f.ApplyEntry(first+uint64(i), enc[i]).(*Result)
				if !reflect.DeepEqual(got[i], want) {
					rt.Fatalf("command %d (%s) of the entry at %d: batched %+v, alone %+v", i, cmds[i].Type, raftIndex, got[i], want)
				}
				gen.learn(want)
			}
			if batched.f.lastIndex != one.f.lastIndex || batched.f.applied != raftIndex {
				rt.Fatalf("command index %d (applied %d), one by one %d", batched.f.lastIndex, batched.f.applied, one.f.lastIndex)
			}
		}
		if !reflect.DeepEqual(batched.changes, one.changes) {
			rt.Fatalf("changes differ:\nbatched %+v\nalone   %+v", batched.changes, one.changes)
		}
		if a, b := bgImage(t, batched.f), bgImage(t, one.f); !reflect.DeepEqual(a, b) {
			rt.Fatalf("states differ:\nbatched %+v\nalone   %+v", a, b)
		}
		fsmtCheckInvariants(t, batched.f)

		// A replica restored from the batched state numbers on alike.
		snap, err := batched.f.snapshotBytes()
		if err != nil {
			rt.Fatal(err)
		}
		restored := NewFSM(fzCell, slogDiscard())
		if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			rt.Fatalf("restore: %v", err)
		}
		next := fzEncode(t, Command{Time: gen.now, Client: "n", Principal: "erin", Payload: &CreateSessionArgs{}})
		l := &logEntry{Index: raftIndex + 1, Data: next}
		if a, b := applyLog(batched.f, l).(*Result), applyLog(restored, l).(*Result); !reflect.DeepEqual(a, b) || a.Err != nil || a.Session <= one.f.lastIndex {
			rt.Fatalf("after restore: %+v, the original %+v (last command index %d)", b, a, one.f.lastIndex)
		}
	})
}

// TestLogWithoutBatchesKeepsRaftIndexes: with no batch in the log every
// id and generation is still the entry's Raft index, and a snapshot does
// not carry a command index (so it encodes as before batching).
func TestLogWithoutBatchesKeepsRaftIndexes(t *testing.T) {
	z := newBGFSM(t)
	n := uint64(len(fzPrelude(t)))
	if z.f.lastIndex != n || z.f.snapshotLastIndex() != 0 {
		t.Fatalf("last command index %d, snapshot's %d, after %d entries", z.f.lastIndex, z.f.snapshotLastIndex(), n)
	}
	// A gap (a configuration entry) and the next open's id is its index.
	c := Command{Time: fzTime, Session: fzAlice, Seq: 30, Ack: 29, Principal: "alice",
		Payload: &OpenArgs{Path: "/ls/c/new", Flags: FlagRead | FlagWrite | FlagCreate}}
	r := z.f.ApplyEntry(n+3, fzEncode(t, c)).(*Result)
	if r.Err != nil || r.Handle != n+3 || r.Stat.ContentGen != n+3 {
		t.Fatalf("open at %d: %+v", n+3, r)
	}
}

// TestBatchRefusesMalformed: a batch entry of fewer than two commands, too
// many, or holding a batch does not decode into commands; EncodeBatch
// refuses the same, and Apply refuses to propose a batch.
func TestBatchRefusesMalformed(t *testing.T) {
	one := fzEncode(t, Command{Time: fzTime, Payload: &EpochArgs{}})
	for _, n := range []int{0, 1, MaxBatchCommands + 1} {
		cmds := make([][]byte, n)
		for i := range cmds {
			cmds[i] = one
		}
		if _, err := EncodeBatch(cmds); !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("EncodeBatch of %d: %v", n, err)
		}
		if _, err := (&BatchArgs{Commands: cmds}).commands(); !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("a batch of %d decoded: %v", n, err)
		}
	}
	inner, err := EncodeBatch([][]byte{one, one})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&BatchArgs{Commands: [][]byte{one, inner}}).commands(); !errors.Is(err, ErrMalformedCommand) {
		t.Errorf("a nested batch decoded: %v", err)
	}
	if _, err := (&BatchArgs{Commands: [][]byte{one, {0xff}}}).commands(); !errors.Is(err, ErrMalformedCommand) {
		t.Errorf("a batch with garbage decoded: %v", err)
	}
	c, err := DecodeCommand(inner)
	if err != nil || c.Type != CmdBatch || len(c.Payload.(*BatchArgs).Commands) != 2 {
		t.Fatalf("DecodeCommand(batch) = %+v, %v", c, err)
	}
}
