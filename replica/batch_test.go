package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
		z.f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: e})
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
				got = []*Result{batched.f.Apply(&raft.Log{Index: raftIndex, Type: raft.LogCommand, Data: enc[0]}).(*Result)}
			} else {
				b, err := EncodeBatch(enc)
				if err != nil {
					rt.Fatal(err)
				}
				got = batched.f.Apply(&raft.Log{Index: raftIndex, Type: raft.LogCommand, Data: b}).([]*Result)
			}
			if len(got) != n {
				rt.Fatalf("a batch of %d answered %d results", n, len(got))
			}
			for i := range cmds {
				want := one.f.Apply(&raft.Log{Index: first + uint64(i), Type: raft.LogCommand, Data: enc[i]}).(*Result)
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
		l := &raft.Log{Index: raftIndex + 1, Type: raft.LogCommand, Data: next}
		if a, b := batched.f.Apply(l).(*Result), restored.Apply(l).(*Result); !reflect.DeepEqual(a, b) || a.Err != nil || a.Session <= one.f.lastIndex {
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
	r := z.f.Apply(&raft.Log{Index: n + 3, Type: raft.LogCommand, Data: fzEncode(t, c)}).(*Result)
	if r.Err != nil || r.Handle != n+3 || r.Stat.ContentGen != n+3 {
		t.Fatalf("open at %d: %+v", n+3, r)
	}
}

// TestBatchRefusesMalformed: a batch entry of fewer than two commands, too
// many, or holding a batch does not decode into commands; EncodeBatch
// refuses the same, and Apply refuses to propose a batch.
func TestBatchRefusesMalformed(t *testing.T) {
	one := fzEncode(t, Command{Time: fzTime, Payload: &EpochArgs{}})
	for _, n := range []int{0, 1, maxBatchCommands + 1} {
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

// TestBatcherTakeBounds: a batch stops at maxBatchCommands and before
// maxBatchBytes, and a command too large to share an entry goes alone.
func TestBatcherTakeBounds(t *testing.T) {
	queue := func(sizes ...int) *batcher {
		b := &batcher{}
		for _, s := range sizes {
			b.queue = append(b.queue, &pending{data: make([]byte, s)})
		}
		return b
	}
	var small []int
	for range maxBatchCommands + 10 {
		small = append(small, 40)
	}
	b := queue(small...)
	if n := len(b.take()); n != maxBatchCommands {
		t.Fatalf("first batch of small commands: %d", n)
	}
	if n := len(b.take()); n != 10 || len(b.queue) != 0 {
		t.Fatalf("second batch: %d, left %d", n, len(b.queue))
	}
	big := MaxCommandSize - 100
	b = queue(big, 200, 300, big)
	for i, want := range []int{1, 2, 1} {
		batch := b.take()
		if len(batch) != want {
			t.Fatalf("batch %d: %d commands, want %d", i, len(batch), want)
		}
		if len(batch) > 1 {
			var cmds [][]byte
			for _, p := range batch {
				cmds = append(cmds, p.data)
			}
			// The bound is conservative: EncodeBatch of what take
			// grouped always fits.
			if _, err := EncodeBatch(cmds); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
	}
}

// TestGroupCommitOnRealCell: on a real three-replica cell (Raft, badger,
// TCP), a lone command goes as its own entry; many concurrent ones are
// grouped into fewer entries, each caller gets its own result, and every
// replica ends in the same state.
func TestGroupCommitOnRealCell(t *testing.T) {
	const n = 3
	addrs := freeAddrs(t, n)
	var peers []Peer
	for i := range n {
		peers = append(peers, Peer{ID: fmt.Sprint(i + 1), RaftAddr: addrs[i]})
	}
	reps := make([]*Replica, n)
	defer closeAll(reps)
	for i := range n {
		r, err := Open(Config{ID: peers[i].ID, Cell: "c", Dir: t.TempDir(), RaftAddr: addrs[i], Peers: peers,
			Timings: testTimings(), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		reps[i] = r
	}
	leader := waitApply(t, reps, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A lone command: one entry, no batch.
	before := leader.GroupCommitStats()
	res, err := leader.Apply(ctx, &Command{Time: time.Now().UnixNano(), Principal: "alice", Admin: true, Client: "t", Payload: &CreateSessionArgs{}})
	if err != nil || res.Err != nil {
		t.Fatalf("CreateSession: %+v %v", res, err)
	}
	sess := res.Session
	if after := leader.GroupCommitStats(); after.Entries != before.Entries+1 || after.Batches != before.Batches {
		t.Fatalf("a lone command: %+v, then %+v", before, after)
	}

	// Concurrent opens: each creates its own file and gets its own handle.
	const clients = 64
	before = leader.GroupCommitStats()
	handles := make([]uint64, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := leader.Apply(ctx, &Command{Time: time.Now().UnixNano(), Session: sess, Seq: uint64(i + 1), Principal: "alice", Admin: true,
				Payload: &OpenArgs{Path: fmt.Sprintf("/ls/c/f%d", i), Flags: FlagRead | FlagWrite | FlagCreate, Contents: []byte{byte(i)}}})
			switch {
			case err != nil:
				errs <- err
			case r.Err != nil || !r.Created || r.Handle == 0:
				errs <- fmt.Errorf("open %d: %+v", i, r)
			default:
				handles[i] = r.Handle
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for i, h := range handles {
		if seen[h] {
			t.Fatalf("handle %d given twice", h)
		}
		seen[h] = true
		// Each caller's handle is on its own file.
		v := leader.FSM()
		v.mu.RLock()
		hd := v.handles[h]
		v.mu.RUnlock()
		if hd == nil || hd.Path != fmt.Sprintf("/ls/c/f%d", i) {
			t.Fatalf("caller %d got handle %d: %+v", i, h, hd)
		}
	}
	after := leader.GroupCommitStats()
	if cmds, entries := after.Commands-before.Commands, after.Entries-before.Entries; cmds != clients || entries >= cmds || after.Batches == before.Batches {
		t.Fatalf("%d concurrent commands went as %d entries (%d batches)", cmds, entries, after.Batches-before.Batches)
	}
	t.Logf("%d concurrent commands: %d entries", clients, after.Entries-before.Entries)

	// Every replica applies the same log to the same state.
	if err := leader.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	target, want, err := leader.FSM().StateHash()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		for {
			idx, _, err := r.FSM().StateHash()
			if err != nil {
				t.Fatal(err)
			}
			if idx >= target {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("replica %s stuck at %d < %d", r.ID(), idx, target)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
		if _, got, err := r.FSM().StateHash(); err != nil || got != want {
			t.Fatalf("replica %s's state differs from the leader's (%v)", r.ID(), err)
		}
	}
}
