package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"lockcell/fsm"
)

// Group commit on the node: the batcher's bounds, and a real cell. The
// batch entry's format and apply are fsm's (fsm/batch_test.go).

// TestBatcherTakeBounds: a batch stops at fsm.MaxBatchCommands and before
// fsm.MaxBatchBytes, and a command too large to share an entry goes alone.
func TestBatcherTakeBounds(t *testing.T) {
	queue := func(sizes ...int) *batcher {
		b := &batcher{}
		for _, s := range sizes {
			b.queue = append(b.queue, &pending{data: make([]byte, s)})
		}
		return b
	}
	var small []int
	for range fsm.MaxBatchCommands + 10 {
		small = append(small, 40)
	}
	b := queue(small...)
	if n := len(b.take()); n != fsm.MaxBatchCommands {
		t.Fatalf("first batch of small commands: %d", n)
	}
	if n := len(b.take()); n != 10 || len(b.queue) != 0 {
		t.Fatalf("second batch: %d, left %d", n, len(b.queue))
	}
	big := fsm.MaxCommandSize - 100
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
			if _, err := fsm.EncodeBatch(cmds); err != nil {
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
	res, err := leader.Apply(ctx, &fsm.Command{Time: time.Now().UnixNano(), Principal: "alice", Admin: true, Client: "t", Payload: &fsm.CreateSessionArgs{}})
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
			r, err := leader.Apply(ctx, &fsm.Command{Time: time.Now().UnixNano(), Session: sess, Seq: uint64(i + 1), Principal: "alice", Admin: true,
				Payload: &fsm.OpenArgs{Path: fmt.Sprintf("/ls/c/f%d", i), Flags: fsm.FlagRead | fsm.FlagWrite | fsm.FlagCreate, Contents: []byte{byte(i)}}})
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
		hd, err := leader.FSM().LookupHandle(sess, h)
		if err != nil || hd.Handle.Path != fmt.Sprintf("/ls/c/f%d", i) {
			t.Fatalf("caller %d got handle %d: %+v %v", i, h, hd, err)
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
