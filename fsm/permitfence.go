package fsm

import "fmt"

// Permit sequencers.
//
// A semaphore holder's sequencer names the mode LockPermit: its holders
// hold at once, each at a generation of its own, so a resource server
// must not fence one by another's higher generation (sequencer.Permit).
// The mode lives in sequencers and in the reads that check them
// (View.FenceValidFor, View.FenceValid, View.HeldLock), never in entries
// or snapshots: a command carries a permit's fence as LockShared
// (Fence.Replicated), which is what every replica, of this build or an
// older one, already checks against the holder's own generation. A
// command carrying LockPermit itself is refused by every replica alike,
// as a replica built before the mode refuses it, so none can diverge.
//
// LockShared names a semaphore holder as exactly as LockPermit does:
// generations are command indexes, unique in the cell, so a permit's
// generation is never any plain lock's. That is also why a Shared
// sequencer of a semaphore holder (issued by a build before the mode
// existed) stays valid at the cell while that holder holds: the cell's
// check is per holder whatever the mode says. Only a Guard fences it
// less well (by the highest-generation rule, refusing concurrent holders,
// never admitting a lost one); GetSequencer gives the holder a Permit
// one.

// LockPermit is the lock mode of a semaphore holder's sequencer (the
// number of sequencer.Permit). It is never stored in an entry or a
// snapshot; see Fence.Replicated.
const LockPermit uint8 = 3

// Replicated is the fence as a command carries it: a permit's fence as
// LockShared, which every replica checks against the holder's own
// generation; any other fence unchanged. Nil stays nil.
func (fc *Fence) Replicated() *Fence {
	if fc == nil || fc.Mode != LockPermit {
		return fc
	}
	r := *fc
	r.Mode = LockShared
	return &r
}

// readFenceReason is fenceReasonOf for reads, which also know LockPermit:
// a permit fence is valid exactly while some holder of the semaphore n
// holds that generation, and never on a node that is not a semaphore.
func readFenceReason(fc *Fence, n *Node) string {
	if fc.Mode != LockPermit {
		return fenceReasonOf(fc, n)
	}
	if n != nil && n.SemLimit == 0 {
		return fmt.Sprintf("%s is not a semaphore: a permit sequencer names a semaphore's holder", fc.Path)
	}
	return fenceReasonOf(fc.Replicated(), n)
}

// sequencerMode is the mode a sequencer names for a holder of n's lock
// held in mode: LockPermit on a semaphore.
func sequencerMode(n *Node, mode uint8) uint8 {
	if n != nil && n.SemLimit != 0 {
		return LockPermit
	}
	return mode
}

// SequencerMode is the mode a sequencer for a lock at path granted in
// mode names: LockPermit when path is a semaphore now, else mode. The
// master signs an Acquire's grant with it after the fact; were the name
// re-created since, the generation no longer matches and the sequencer
// is refused whatever its mode.
func (v View) SequencerMode(path string, mode uint8) uint8 {
	return sequencerMode(v.f.nodes[path], mode)
}
