package master

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// gatedConsensus is localConsensus whose VerifyLeader, once armed, is a
// gatedVerify: it waits for the test's verdict, counting the rounds.
type gatedConsensus struct {
	localConsensus
	gatedVerify
	armed atomic.Bool
}

func (g *gatedConsensus) VerifyLeader(ctx context.Context) error {
	if !g.armed.Load() {
		return nil
	}
	return g.verify(ctx)
}

// Linearizable reads share rounds of contact with a quorum: reads that
// arrive while a round is in flight are answered by the one round after
// it, never by the round in flight, which began before they arrived.
func TestConcurrentReadsShareLeadershipRounds(t *testing.T) {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	cons := &gatedConsensus{localConsensus: localConsensus{fsm: sm}, gatedVerify: gatedVerify{verdict: make(chan error)}}
	m := newTestMasterOn(t, cons, sm)
	clock := m.clock
	sess, handle := m.sessionWithFile(t)
	read := func() error {
		resp, err := m.call(sess, 0, wire.MethodGetContentsAndStat, &wire.HandleRequest{Handle: handle})
		if err == nil && string(resp.(*wire.ContentsResponse).Contents) != "one" {
			t.Errorf("read %q, want \"one\"", resp.(*wire.ContentsResponse).Contents)
		}
		return err
	}
	waitRounds := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for cons.rounds.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d rounds began; waiting for %d", cons.rounds.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	cons.armed.Store(true)
	// After the writes above: their commits proved leadership up to now.
	clock.Advance(time.Millisecond)
	first := make(chan error, 1)
	go func() { first <- read() }()
	waitRounds(1)
	// The reads below arrive after the round in flight began.
	clock.Advance(time.Millisecond)
	const later = 32
	var wg sync.WaitGroup
	var done atomic.Int32
	errs := make(chan error, later)
	for range later {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := read()
			done.Add(1)
			errs <- err
		}()
	}
	cons.verdict <- nil // the first round succeeds
	if err := <-first; err != nil {
		t.Fatalf("the first read: %v", err)
	}
	waitRounds(2)
	if n := done.Load(); n != 0 {
		t.Fatalf("%d reads were answered by a round that began before they arrived", n)
	}
	cons.verdict <- nil // the second round answers every later read
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d later reads answered by the second round; %d rounds began (one each?)", done.Load(), later, cons.rounds.Load())
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a later read: %v", err)
		}
	}
	if n := cons.rounds.Load(); n != 2 {
		t.Fatalf("%d reads took %d rounds; want 2 (the one in flight and one after it)", 1+later, n)
	}
	// A failed round fails the reads it was to answer: a deposed master
	// answers none of them.
	clock.Advance(time.Millisecond)
	failed := make(chan error, 1)
	go func() { failed <- read() }()
	waitRounds(3)
	cons.verdict <- fsm.ErrNotLeader
	if err := <-failed; codeOf(err) != wire.CodeNotMaster {
		t.Fatalf("a read after its round failed: %v; want NotMaster", err)
	}
}
