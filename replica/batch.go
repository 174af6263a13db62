package replica

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Group commit. While one Raft entry proposed through Replica.Apply is in
// flight, the commands that arrive queue; when it has been applied, the
// queued ones go out together as one Batch entry, so a loaded master pays
// one log entry, one fsync per replica, one AppendEntries per follower and
// one state-machine apply for many commands. A command that finds nothing
// in flight goes at once, as its own entry, exactly as before batching
// existed.
//
// Every command, alone or in a batch, gets its own command index: the
// number it uses where a lone entry used its Raft index (session and
// handle ids, node instances, content, lock and ACL generations). It is
// max(previous command index + 1, the entry's Raft index), and the inner
// commands of a batch take consecutive ones. In a log without batches
// that is exactly the entry's Raft index, so such logs replay as they
// always did; after a batch the command indexes run ahead of the Raft
// indexes and stay unique and increasing, which is all the state relies on
// (generations grow, ids never repeat).

// BatchArgs: the commands, each encoded as Command.Encode writes it, are
// applied in order as if each were its own entry: each with its own
// envelope (time, request id and its de-duplication, caller, fence), its
// own command index and its own result, and their changes reported in
// order. The batch's own envelope carries only its type. A batch holds at
// least two commands, none of them a batch.
type BatchArgs struct {
	Commands [][]byte `msgpack:"b,omitempty"`
}

// CmdType returns CmdBatch.
func (*BatchArgs) CmdType() CmdType { return CmdBatch }

func (*BatchArgs) payload() {}

// maxBatchCommands bounds the commands of one batch: the state machine
// holds its lock for the whole batch, so a batch's apply stays short
// (well under a millisecond at a few microseconds per command).
const maxBatchCommands = 256

// batchOverhead bounds what a batch entry adds to its commands' bytes: the
// version byte, the envelope and the payload map's header, and a msgpack
// bin header (at most 5 bytes) per command.
const (
	batchOverhead        = 64
	batchPerCommandBytes = 5
)

// maxBatchBytes bounds a batch entry's encoding: no larger than one command
// may be (MaxCommandSize), so the Raft port's field and request limits
// (rafttransport_limits.go) and raft's MaxAppendEntries hold as they did.
const maxBatchBytes = MaxCommandSize

// commands decodes the batch's commands. A batch of fewer than two
// commands, or one holding a batch, is malformed: the master never
// writes one.
func (p *BatchArgs) commands() ([]*Command, error) {
	if len(p.Commands) < 2 || len(p.Commands) > maxBatchCommands {
		return nil, fmt.Errorf("%w: a batch of %d commands (2 to %d)", ErrMalformedCommand, len(p.Commands), maxBatchCommands)
	}
	out := make([]*Command, len(p.Commands))
	for i, b := range p.Commands {
		c, err := DecodeCommand(b)
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i, err)
		}
		if c.Type == CmdBatch {
			return nil, fmt.Errorf("%w: batch command %d is a batch", ErrMalformedCommand, i)
		}
		out[i] = c
	}
	return out, nil
}

// EncodeBatch returns the entry that applies the encoded commands (each as
// Command.Encode wrote it) in order. It fails with ErrMalformedCommand for
// fewer than two commands or more than maxBatchCommands, and with
// ErrTooLarge past maxBatchBytes.
func EncodeBatch(cmds [][]byte) ([]byte, error) {
	if len(cmds) < 2 || len(cmds) > maxBatchCommands {
		return nil, fmt.Errorf("%w: a batch of %d commands (2 to %d)", ErrMalformedCommand, len(cmds), maxBatchCommands)
	}
	c := Command{Payload: &BatchArgs{Commands: cmds}}
	return c.Encode()
}

// nextIndex returns the command index of the next command applied by the
// entry at Raft index index, and advances it.
func (f *FSM) nextIndex(index uint64) uint64 {
	f.lastIndex = max(f.lastIndex+1, index)
	return f.lastIndex
}

// applyBatch applies each command of a batch as if it were its own entry
// (f.mu held) and returns their results in order.
func (f *FSM) applyBatch(index uint64, p *BatchArgs) []*Result {
	cmds, err := p.commands()
	if err != nil {
		panic(fmt.Sprintf("lockcell replica: cannot apply entry %d: %v", index, err))
	}
	out := make([]*Result, len(cmds))
	for i, c := range cmds {
		out[i] = f.applyDedup(f.nextIndex(index), c)
	}
	return out
}

// snapshotLastIndex is the command index a snapshot stores besides its
// applied Raft index: 0 while they are equal (every log without batches),
// so such snapshots encode as they always did.
func (f *FSM) snapshotLastIndex() uint64 {
	if f.lastIndex > f.applied {
		return f.lastIndex
	}
	return 0
}

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
	res  *Result
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
		settleAll([]*pending{p}, nil, fmt.Errorf("%w: the replica is closed", ErrClosed))
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
// maxBatchCommands and maxBatchBytes (b.mu held). The first command
// always goes, alone if it is that large.
func (b *batcher) take() []*pending {
	n, size := 0, batchOverhead
	for n < len(b.queue) && n < maxBatchCommands {
		size += len(b.queue[n].data) + batchPerCommandBytes
		if n > 0 && size > maxBatchBytes {
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
		if data, err = EncodeBatch(cmds); err != nil {
			// take keeps batches within bounds; this is a bug, and the
			// commands were certainly not proposed.
			settleAll(batch, nil, fmt.Errorf("%w: %v", ErrNotLeader, err))
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
		settleAll(batch, nil, fmt.Errorf("%w: shut down with the command in flight", ErrClosed))
		return
	}
	resp := f.Response()
	if len(batch) == 1 {
		res, ok := resp.(*Result)
		if !ok {
			settleAll(batch, nil, fmt.Errorf("%w: apply returned %T", ErrUnknownOutcome, resp))
			return
		}
		settleAll(batch, []*Result{res}, nil)
		return
	}
	res, ok := resp.([]*Result)
	if !ok || len(res) != len(batch) {
		settleAll(batch, nil, fmt.Errorf("%w: batch apply returned %T", ErrUnknownOutcome, resp))
		return
	}
	settleAll(batch, res, nil)
}

func settleAll(batch []*pending, res []*Result, err error) {
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res[i]
		}
		close(p.done)
	}
}
