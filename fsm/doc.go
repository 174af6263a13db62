// Package fsm is lockcell's replicated state machine: the namespace,
// sessions, handles, locks, ACL files, quotas and the request
// de-duplication table; the commands of the Raft log and their codec;
// applying them (FSM.ApplyEntry); the read-only View the master reads
// through; and the snapshot, backup and restore encodings.
//
// It is deterministic: the state after a sequence of entries is a function
// of their bytes alone (no clock, no unsorted map walk, state errors as
// values), so every replica applying the same log holds the same state.
// It knows nothing of Raft or of the disk the log lives on: package replica
// (the node) feeds it committed entries, persists its snapshots and hands
// them back, and it imports neither hashicorp/raft nor badger
// (scripts/depcheck.sh). The master imports it, never the node.
package fsm
