package replica

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// Group commit (the batch entry's format and apply are fsm's, batch.go
// there): while one Raft entry proposed through Replica.Apply is in
// flight, the commands that arrive queue and go out together as one
// batch entry once it has been applied.

// GroupCommitStats count what Replica.Apply proposed since the replica
// started.
type GroupCommitStats struct {
	// Commands counts the commands proposed.
	Commands uint64
	// Entries counts the Raft entries that carried them: one per lone
	// command, one per batch.
	Entries uint64
	// Batches counts the entries that were batches.
	Batches uint64
}

// GroupCommitStats reports the group commit's counts.
func (r *Replica) GroupCommitStats() GroupCommitStats {
	b := r.batcher
	return GroupCommitStats{Commands: b.commands.Load(), Entries: b.entries.Load(), Batches: b.batches.Load()}
}

// pending is one command waiting for its outcome.
type pending struct {
	data []byte
	done chan struct{} // closed once res or err is set
	res  *fsm.Result
	err  error
}

// maxInFlight is how many entries the batcher keeps in flight at once.
// One makes the batches largest: everything that arrives during a Raft
// round goes in the next entry. Two was measured (docs/performance.md)
// and was no faster on the 2-core machine, with batches a third smaller.
const maxInFlight = 1

// batcher groups the commands proposed while entries are in flight. At
// most maxInFlight entries it proposed are in flight at a time, each
// carried by a goroutine (run) that exists only while it has one, and
// stops when the queue is empty or the replica closes.
type batcher struct {
	done  <-chan struct{} // the replica's: closed when it closes
	apply func(data []byte) raft.ApplyFuture

	mu       sync.Mutex
	inflight int
	queue    []*pending
	closed   bool // no run starts any more
	// running counts run goroutines (up to maxInFlight), so Close can
	// wait for the last to settle its commands.
	running sync.WaitGroup

	commands, entries, batches atomic.Uint64
}

func newBatcher(r *raft.Raft, done <-chan struct{}) *batcher {
	b := &batcher{done: done}
	b.apply = func(data []byte) raft.ApplyFuture { return r.Apply(data, 5*time.Second) }
	return b
}

// submit queues p, or proposes it at once when nothing is in flight.
func (b *batcher) submit(p *pending) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		settleAll([]*pending{p}, nil, fmt.Errorf("%w: the replica is closed", fsm.ErrClosed))
		return
	}
	if b.inflight >= maxInFlight {
		b.queue = append(b.queue, p)
		b.mu.Unlock()
		return
	}
	b.inflight++
	b.running.Add(1)
	b.mu.Unlock()
	go b.run([]*pending{p})
}

// close waits for the last run to settle its commands (ErrClosed once the
// replica's done channel is closed) and refuses new ones.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.running.Wait()
}

// run proposes batch, waits for its outcome and hands each command its
// result, then does the same with what queued meanwhile, until nothing
// has.
func (b *batcher) run(batch []*pending) {
	defer b.running.Done()
	for {
		b.propose(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// take removes from the queue the next batch: the longest prefix within
// fsm.MaxBatchCommands and fsm.MaxBatchBytes (b.mu held). The first command
// always goes, alone if it is that large.
func (b *batcher) take() []*pending {
	n, size := 0, fsm.BatchOverhead
	for n < len(b.queue) && n < fsm.MaxBatchCommands {
		size += len(b.queue[n].data) + fsm.BatchPerCommandBytes
		if n > 0 && size > fsm.MaxBatchBytes {
			break
		}
		n++
	}
	batch := b.queue[:n:n]
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = append([]*pending(nil), b.queue[n:]...)
	}
	return batch
}

// propose sends batch as one entry (a lone command unwrapped) and settles
// every command in it: one outcome for the entry, so when it is unknown,
// every command's is.
func (b *batcher) propose(batch []*pending) {
	data := batch[0].data
	if len(batch) > 1 {
		cmds := make([][]byte, len(batch))
		for i, p := range batch {
			cmds[i] = p.data
		}
		var err error
		if data, err = fsm.EncodeBatch(cmds); err != nil {
			// take keeps batches within bounds; this is a bug, and the
			// commands were certainly not proposed.
			settleAll(batch, nil, fmt.Errorf("%w: %v", fsm.ErrNotLeader, err))
			return
		}
		b.batches.Add(1)
	}
	b.entries.Add(1)
	b.commands.Add(uint64(len(batch)))
	f := b.apply(data)
	// raft v1.8 can leave a future unanswered forever when it shuts down
	// with applied entries still queued for the FSM (hashicorp/raft#498),
	// so never wait on it alone; the waiter goroutine ends when raft
	// answers or shuts down (Shutdown answers every future it holds).
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		if err != nil {
			settleAll(batch, nil, mapRaftErr(err))
			return
		}
	case <-b.done:
		settleAll(batch, nil, fmt.Errorf("%w: shut down with the command in flight", fsm.ErrClosed))
		return
	}
	resp := f.Response()
	if len(batch) == 1 {
		res, ok := resp.(*fsm.Result)
		if !ok {
			settleAll(batch, nil, fmt.Errorf("%w: apply returned %T", fsm.ErrUnknownOutcome, resp))
			return
		}
		settleAll(batch, []*fsm.Result{res}, nil)
		return
	}
	res, ok := resp.([]*fsm.Result)
	if !ok || len(res) != len(batch) {
		settleAll(batch, nil, fmt.Errorf("%w: batch apply returned %T", fsm.ErrUnknownOutcome, resp))
		return
	}
	settleAll(batch, res, nil)
}

func settleAll(batch []*pending, res []*fsm.Result, err error) {
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res[i]
		}
		close(p.done)
	}
}
