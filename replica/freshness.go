package replica

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Follower reads of bounded staleness (docs/flows.md, "Flow: a follower
// read"). A follower may answer a read from its own state only if it can
// show that the state holds every write acknowledged more than the
// caller's bound ago. raft's LastContact cannot show it: heartbeats renew
// it but carry no commit index, and travel apart from the appends, so a
// follower whose appends are stuck (a slow disk, the pipeline hang of
// nopipeline.go) keeps a fresh LastContact over an old state.
//
// What can show it is the order of the leader's appends. The leader sends
// a follower one AppendEntries at a time (pipelining is off, nopipeline.go),
// and reads its commit index into the next request only after the answer
// to the previous one came back. So if request k of a term arrived here at
// local time t_k, request k+1 carries a commit index C that the leader
// held after t_k: every write the leader acknowledged before t_k (it
// applies a write, so commits it, before acknowledging) is at an index at
// most C. Once this replica has applied C, its state holds all of them,
// and its age, as the reads count it, is the time since t_k, on this
// replica's own monotonic clock: no clock is compared with another's.
//
// Two more conditions make it whole. A new leader's commit index can lag
// what its predecessor committed until it commits an entry of its own
// term, so a proof counts only once C reaches the first entry of the
// leader's term this replica saw. And a write acknowledged by a successor
// leader: the leader sending request k+1 still leads, so it heard from a
// quorum within its leader lease, and voters refuse a candidate for a
// heartbeat timeout after they last heard their leader; the lease being at
// most the heartbeat timeout (raft refuses other settings), no successor
// was elected, nor acknowledged a write, before t_k. That is the same
// timing rule raft's own leader lease rests on (master.Consensus.IsLeader).

// proofRing is how many recent proofs a replica keeps: the newest whose
// commit index it has applied answers, so a read does not fail in the
// moment between an append's arrival and its apply.
const proofRing = 4

// readProof says: every write acknowledged before at is at a Raft index
// at most commit.
type readProof struct {
	at     time.Time
	commit uint64
}

// commitWatch records, from the AppendEntries this replica receives as a
// follower, the proofs above. Its lock is a leaf.
type commitWatch struct {
	now         func() time.Time
	currentTerm func() uint64 // raft's term; 0 before raft runs

	mu        sync.Mutex
	term      uint64    // the term of the requests below
	lastRecv  time.Time // arrival of the newest commit-carrying request of term
	termStart uint64    // the first index of term seen in an append (0: none yet)
	proofs    [proofRing]readProof
	n         int // proofs held, newest at proofs[(next-1)%proofRing]
	next      int
}

func newCommitWatch() *commitWatch { return &commitWatch{now: time.Now} }

// observe records one AppendEntries request as it arrives, before raft
// handles it.
func (w *commitWatch) observe(req *raft.AppendEntriesRequest) {
	if req.LeaderCommitIndex == 0 {
		return // a heartbeat: contact, but no commit index
	}
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.currentTerm != nil && req.Term < w.currentTerm() {
		return // raft refuses a deposed leader's request
	}
	if req.Term != w.term {
		if req.Term < w.term {
			return
		}
		w.term, w.termStart, w.n, w.next = req.Term, 0, 0, 0
		w.lastRecv = now
		w.noteTermStart(req)
		return // no earlier request of this term to order it after
	}
	w.noteTermStart(req)
	if w.termStart != 0 && req.LeaderCommitIndex >= w.termStart {
		w.proofs[w.next] = readProof{at: w.lastRecv, commit: req.LeaderCommitIndex}
		w.next = (w.next + 1) % proofRing
		w.n = min(w.n+1, proofRing)
	}
	w.lastRecv = now
}

// noteTermStart records the first entry of the leader's own term that
// this replica was sent. Seeing a later one first (the start came in a
// snapshot) only makes the proofs wait longer: it is never too low.
func (w *commitWatch) noteTermStart(req *raft.AppendEntriesRequest) {
	if w.termStart != 0 {
		return
	}
	for _, e := range req.Entries {
		if e.Term == req.Term {
			w.termStart = e.Index
			return
		}
	}
}

// best returns the newest proof that covered accepts (its commit index is
// applied), and whether there is one.
func (w *commitWatch) best(covered func(commit uint64) bool) (readProof, bool) {
	w.mu.Lock()
	ps := make([]readProof, 0, proofRing)
	for i := 1; i <= w.n; i++ {
		ps = append(ps, w.proofs[(w.next-i+proofRing)%proofRing])
	}
	w.mu.Unlock()
	for _, p := range ps { // newest first
		if covered(p.commit) {
			return p, true
		}
	}
	return readProof{}, false
}

// watchedConsumer forwards the wrapped transport's incoming RPCs to raft,
// showing each AppendEntries to the commit watch first.
type watchedConsumer struct {
	once sync.Once
	out  chan raft.RPC
	done chan struct{}
}

// consumer returns the one channel raft reads (it asks on every loop).
func (t *tracked) consumer() <-chan raft.RPC {
	t.wc.once.Do(func() {
		in := t.Transport.Consumer()
		t.wc.out = make(chan raft.RPC)
		go func() {
			for {
				select {
				case rpc := <-in:
					if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && t.watch != nil {
						t.watch.observe(req)
					}
					select {
					case t.wc.out <- rpc:
					case <-t.wc.done:
						return
					}
				case <-t.wc.done:
					return
				}
			}
		}()
	})
	return t.wc.out
}

// maxTailScan bounds the log entries a read looks through for commands
// between the applied state and a proof's commit index.
const maxTailScan = 64

// covers reports whether the state machine, applied up to Raft index
// applied, holds the state at Raft index commit: it has applied commit,
// or every entry after applied up to commit is committed here and none of
// them is a command (a term's no-op, a configuration change, a barrier
// never reach the state machine, and one may be the last entry for long
// in a quiet cell).
func (r *Replica) covers(applied, commit uint64) bool {
	if applied >= commit {
		return true
	}
	if commit-applied > maxTailScan || r.raft.CommitIndex() < commit {
		return false
	}
	var l raft.Log
	for i := applied + 1; i <= commit; i++ {
		if err := r.store.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return false
		}
	}
	return true
}

// ReadProof reports how old, at most, this replica's state at Raft index
// applied is: every write the cell acknowledged more than age ago is in
// it. ok is false when the replica cannot show it (it leads, has heard no
// commit index of the current leader's term, or has not applied any it
// heard). applied must be the index of a state the caller holds (one
// view's), so the answer holds for that state.
func (r *Replica) ReadProof(applied uint64) (age time.Duration, ok bool) {
	if r.raft.State() == raft.Leader {
		return 0, false // a leader's reads prove themselves (master.reads.verify)
	}
	p, ok := r.watch.best(func(commit uint64) bool { return r.covers(applied, commit) })
	if !ok {
		return 0, false
	}
	return time.Since(p.at), true
}

// close ends the forwarding goroutine (the transport is closing).
func (c *watchedConsumer) close() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
}

// setTerm gives the watch raft's current term, once raft runs.
func (w *commitWatch) setTerm(cur func() uint64) {
	w.mu.Lock()
	w.currentTerm = cur
	w.mu.Unlock()
}
