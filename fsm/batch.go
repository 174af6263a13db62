package fsm

import "fmt"

// Group commit. While one Raft entry proposed through the node (replica.Replica.Apply) is in
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

// MaxBatchCommands bounds the commands of one batch: the state machine
// holds its lock for the whole batch, so a batch's apply stays short
// (well under a millisecond at a few microseconds per command).
const MaxBatchCommands = 256

// BatchOverhead bounds what a batch entry adds to its commands' bytes: the
// version byte, the envelope and the payload map's header, and a msgpack
// bin header (at most 5 bytes) per command.
const (
	BatchOverhead        = 64
	BatchPerCommandBytes = 5
)

// MaxBatchBytes bounds a batch entry's encoding: no larger than one command
// may be (MaxCommandSize), so the Raft port's field and request limits
// (the node's rafttransport_limits.go) and raft's MaxAppendEntries hold as they did.
const MaxBatchBytes = MaxCommandSize

// commands decodes the batch's commands. A batch of fewer than two
// commands, or one holding a batch, is malformed: the master never
// writes one.
func (p *BatchArgs) commands() ([]*Command, error) {
	if len(p.Commands) < 2 || len(p.Commands) > MaxBatchCommands {
		return nil, fmt.Errorf("%w: a batch of %d commands (2 to %d)", ErrMalformedCommand, len(p.Commands), MaxBatchCommands)
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
// fewer than two commands or more than MaxBatchCommands, and with
// ErrTooLarge past MaxBatchBytes.
func EncodeBatch(cmds [][]byte) ([]byte, error) {
	if len(cmds) < 2 || len(cmds) > MaxBatchCommands {
		return nil, fmt.Errorf("%w: a batch of %d commands (2 to %d)", ErrMalformedCommand, len(cmds), MaxBatchCommands)
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
