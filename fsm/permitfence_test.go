package fsm

import (
	"strings"
	"testing"
)

// A semaphore holder's sequencer names LockPermit: the reads that check
// sequencers (CheckSequencer) accept it exactly while some holder holds
// that generation, whatever the other holders do, and refuse it on a node
// that is not a semaphore; a write fenced by it (carried Replicated, as
// LockShared) applies exactly while that holder holds, and a command that
// carries LockPermit itself is refused, as a replica built before the
// mode refuses it. A Shared sequencer of a semaphore holder (an older
// build's) stays valid at the cell; an Exclusive one never is.
func TestPermitFence(t *testing.T) {
	h := newFSMT(t)
	s0, s1 := h.session(), h.session()
	h0, h1 := h.semOpen(s0, "sem", 2, 0), h.semOpen(s1, "sem", 2, 0)
	r0, _ := h.acquire(s0, h0, LockShared, false)
	r1, _ := h.acquire(s1, h1, LockShared, false)
	wantOK(t, "permit 0", r0)
	wantOK(t, "permit 1", r1)
	if r0.LockGen == r1.LockGen {
		t.Fatalf("two permits share generation %d", r0.LockGen)
	}
	var f0, f1 Fence
	var err error
	if f0, err = h.f.HeldLock(s0, h0); err != nil {
		t.Fatal(err)
	}
	if f1, err = h.f.HeldLock(s1, h1); err != nil {
		t.Fatal(err)
	}
	for i, fc := range []Fence{f0, f1} {
		if fc.Mode != LockPermit || fc.Generation != []uint64{r0.LockGen, r1.LockGen}[i] {
			t.Fatalf("holder %d's sequencer claim %+v, want mode permit at its own generation", i, fc)
		}
		if ok, r := h.f.FenceValidFor(&fc, "p", false); !ok {
			t.Fatalf("holder %d's permit: %s", i, r)
		}
	}
	if v := (View{h.f}); v.SequencerMode(fsmtPath("sem"), LockShared) != LockPermit {
		t.Fatal("SequencerMode of a semaphore is not LockPermit")
	}
	shared, excl := f0, f0
	shared.Mode, excl.Mode = LockShared, LockExclusive
	if ok, r := h.f.FenceValid(&shared); !ok {
		t.Fatalf("a shared sequencer of a semaphore holder (an older build's): %s", r)
	}
	if ok, _ := h.f.FenceValid(&excl); ok {
		t.Fatal("an exclusive sequencer of a semaphore holder is valid")
	}

	// A permit on a plain file, even one locked shared at that generation
	// (which command indexes rule out, so it is made up here): refused.
	sp := h.session()
	hp := h.mustOpen(sp, "plain", fsmtRWC)
	rp, _ := h.acquire(sp, hp, LockShared, false)
	wantOK(t, "plain shared", rp)
	if v := (View{h.f}); v.SequencerMode(fsmtPath("plain"), LockShared) != LockShared {
		t.Fatal("SequencerMode of a plain file is not its lock mode")
	}
	fp := Fence{Path: fsmtPath("plain"), Mode: LockPermit, Generation: rp.LockGen}
	if ok, r := h.f.FenceValid(&fp); ok || !strings.Contains(r, "not a semaphore") {
		t.Fatalf("a permit sequencer of a plain file: valid %v (%s)", ok, r)
	}

	// Fenced writes: the replicated fence applies while its holder holds.
	set := func(s, hd uint64, fc *Fence) *Result {
		return h.do(s, Command{Fence: fc, Payload: &SetContentsArgs{Handle: hd, Contents: []byte("x")}})
	}
	wantOK(t, "write fenced by permit 0", set(s0, h0, f0.Replicated()))
	wantOK(t, "write fenced by permit 1", set(s1, h1, f1.Replicated()))
	if r := set(s0, h0, &f0); r.Err == nil || r.Err.Kind != KindStaleSequencer {
		t.Fatalf("a command carrying LockPermit itself: %+v, want stale_sequencer as an older replica answers", r.Err)
	}
	txnFence := func(s uint64, fc Fence) *Result {
		rf := fc.Replicated()
		return h.txn(s, []TxnCheck{{Kind: TxnCheckSequencer, Path: rf.Path, Mode: rf.Mode, Gen: rf.Generation}},
			txnPath(TxnOpSet, "sem", "t"))
	}
	wantOK(t, "txn fenced by permit 1", txnFence(s1, f1))

	// Holder 0 lets go: its permit is refused everywhere, holder 1's is not.
	wantOK(t, "release 0", h.release(s0, h0))
	if ok, _ := h.f.FenceValidFor(&f0, "p", false); ok {
		t.Fatal("a released permit is still valid")
	}
	if r := set(s0, h0, f0.Replicated()); r.Err == nil || r.Err.Kind != KindStaleSequencer {
		t.Fatalf("a write fenced by a released permit: %+v", r.Err)
	}
	if r := txnFence(s0, f0); r.Err == nil || r.Err.Kind != KindStaleSequencer {
		t.Fatalf("a txn fenced by a released permit: %+v", r.Err)
	}
	if ok, r := h.f.FenceValid(&f1); !ok {
		t.Fatalf("the other holder's permit after the release: %s", r)
	}
	wantOK(t, "write fenced by permit 1 after 0 let go", set(s1, h1, f1.Replicated()))
	if (*Fence)(nil).Replicated() != nil || f1.Replicated().Mode != LockShared || excl.Replicated().Mode != LockExclusive {
		t.Fatal("Replicated maps more than a permit's mode")
	}
}
