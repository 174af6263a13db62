package master

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The proof's rules, with a VerifyLeader the test answers by hand: the
// end-to-end case (a disk-stalled master must stop granting leases) is
// chaos.TestStaleReadProbe's disk-stalled round, on real processes.

// gatedVerify is a VerifyLeader that blocks until the test releases it
// with a verdict, counting the rounds started.
type gatedVerify struct {
	rounds  atomic.Int32
	verdict chan error
}

func (g *gatedVerify) verify(ctx context.Context) error {
	g.rounds.Add(1)
	select {
	case err := <-g.verdict:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestLeadershipProofSharesOneRound(t *testing.T) {
	g := &gatedVerify{verdict: make(chan error)}
	p := &leadershipProof{verify: g.verify, now: time.Now}
	notBefore := time.Now()
	const callers = 16
	var wg sync.WaitGroup
	starts := make(chan time.Time, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := p.since(context.Background(), notBefore)
			if err != nil {
				t.Errorf("since: %v", err)
			}
			starts <- v
		}()
	}
	for g.rounds.Load() == 0 { // wait for the round to begin
		time.Sleep(time.Millisecond)
	}
	g.verdict <- nil
	wg.Wait()
	close(starts)
	for v := range starts {
		if v.Before(notBefore) {
			t.Fatalf("proof began at %v, before the caller's bound %v", v, notBefore)
		}
	}
	if n := g.rounds.Load(); n != 1 {
		t.Fatalf("%d callers started %d rounds; want them to share 1", callers, n)
	}
	// A fresh enough proof is reused without a round.
	if _, err := p.since(context.Background(), notBefore); err != nil || g.rounds.Load() != 1 {
		t.Fatalf("reuse: err %v, rounds %d", err, g.rounds.Load())
	}
}

func TestLeadershipProofNeverVouchesWithAnOlderRound(t *testing.T) {
	g := &gatedVerify{verdict: make(chan error, 1)}
	p := &leadershipProof{verify: g.verify, now: time.Now}
	g.verdict <- nil
	first, err := p.since(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	later := first.Add(time.Millisecond)
	for !time.Now().After(later) {
		time.Sleep(time.Millisecond)
	}
	g.verdict <- nil
	v, err := p.since(context.Background(), later)
	if err != nil {
		t.Fatal(err)
	}
	if v.Before(later) || g.rounds.Load() != 2 {
		t.Fatalf("proof from %v for a caller needing %v or later (rounds %d)", v, later, g.rounds.Load())
	}
}

func TestLeadershipProofFailsClosed(t *testing.T) {
	g := &gatedVerify{verdict: make(chan error, 1)}
	p := &leadershipProof{verify: g.verify, now: time.Now}
	deposed := errors.New("deposed")
	g.verdict <- deposed
	if _, err := p.since(context.Background(), time.Now()); !errors.Is(err, deposed) {
		t.Fatalf("failed round: got %v, want %v", err, deposed)
	}
	// A round that never answers (a stuck leader loop) holds callers only
	// until their deadline, and they pile no new rounds on it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for k := 0; k < 3; k++ {
		if _, err := p.since(ctx, time.Now()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stuck round: got %v, want the caller's deadline", err)
		}
	}
	if n := g.rounds.Load(); n != 2 {
		t.Fatalf("%d rounds started; a stuck round must be waited on, not joined by more", n)
	}
	g.verdict <- nil // let the stuck round end
}

// The stale signal closes when the master goes unproven and a new one
// opens when a proof comes back, so KeepAlives parked in a later proven
// stretch are not ended by an earlier stale one.
func TestLeadershipProofStaleSignal(t *testing.T) {
	p := &leadershipProof{verify: func(context.Context) error { return nil }, now: time.Now}
	first := p.staleSignal()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	p.setStale(false)
	if closed(first) {
		t.Fatal("signal closed while proven")
	}
	p.setStale(true)
	p.setStale(true) // repeated: closes once
	if !closed(first) || !closed(p.staleSignal()) {
		t.Fatal("signal not closed while unproven")
	}
	p.setStale(false)
	if closed(p.staleSignal()) {
		t.Fatal("a proof came back but the signal stays closed")
	}
}

// TestReadProofIsBounded: a read whose round Raft never answers gives up
// after half a lease, as NotMaster (errStopped), however often the pooled
// timers bounding such waits have been used; a caller that leaves first
// gets its own context's error; and a timer that went back to the pool
// after a wait that ended early never cuts a later wait short.
func TestReadProofIsBounded(t *testing.T) {
	g := &gatedVerify{verdict: make(chan error)}
	p := &leadershipProof{verify: g.verify, now: time.Now}
	r := &reads{proof: p, bound: 50 * time.Millisecond} // half a lease of 100 ms
	for range 3 {
		start := time.Now()
		if err := r.verify(context.Background()); err != errStopped {
			t.Fatalf("a read Raft never vouches for: %v; want errStopped", err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("gave up after %v, before half a lease", d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.verify(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read whose caller left: %v; want context.Canceled", err)
	}

	g.verdict <- nil // the round all those reads waited for ends
	g.rounds.Store(0)

	// Waits that end well before their bound put their timers back.
	for range 8 {
		done := make(chan error, 1)
		go func() { _, err := p.sinceWithin(context.Background(), time.Now(), 20*time.Millisecond); done <- err }()
		for g.rounds.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		g.verdict <- nil
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		g.rounds.Store(0)
	}
	time.Sleep(40 * time.Millisecond) // past those bounds: a timer left running would have fired by now
	done := make(chan error, 1)
	go func() { _, err := p.sinceWithin(context.Background(), time.Now(), time.Hour); done <- err }()
	for g.rounds.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a wait bounded by an hour ended at once: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.verdict <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
