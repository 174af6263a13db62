package sequencer

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func permitOf(path string, gen uint64) []byte {
	return Sign(key, Sequencer{Cell: "c", Path: path, Mode: Permit, Generation: gen})
}

// A Permit sequencer is the same bytes as any other but for its mode
// byte, so sequencers of other modes (and golden files) are unchanged;
// the next unknown mode is still refused as malformed.
func TestPermitSignParse(t *testing.T) {
	s := Sequencer{Cell: "c", Path: "/ls/c/sem", Mode: Permit, Generation: 12}
	b := Sign(key, s)
	if got, err := Verify(key, b); err != nil || got != s {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if got := s.String(); got != "/ls/c/sem permit generation 12 (cell c)" {
		t.Fatalf("String = %q", got)
	}
	excl := Sign(key, Sequencer{Cell: "c", Path: "/ls/c/sem", Mode: Exclusive, Generation: 12})
	body, exclBody := b[:len(b)-TagSize], excl[:len(excl)-TagSize]
	diff := 0
	for i := range body {
		if body[i] != exclBody[i] {
			diff++
			if body[i] != byte(Permit) || exclBody[i] != byte(Exclusive) {
				t.Fatalf("byte %d: %d vs %d, want only the mode byte to differ", i, body[i], exclBody[i])
			}
		}
	}
	if len(body) != len(exclBody) || diff != 1 {
		t.Fatalf("bodies differ in length (%d, %d) or in %d bytes", len(body), len(exclBody), diff)
	}
	unknown := Sign(key, Sequencer{Cell: "c", Path: "/ls/c/sem", Mode: Permit + 1, Generation: 12})
	if _, err := Parse(unknown); !errors.Is(err, ErrMalformed) {
		t.Fatalf("mode %d: %v, want ErrMalformed", Permit+1, err)
	}
}

// Two holders of one semaphore write through one guard in any order: the
// lower generation is not fenced by the higher, and neither raises the
// lock's highest generation, so an exclusive holder of the same name
// later is fenced as before.
func TestGuardPermitHoldersBothAccepted(t *testing.T) {
	ck := &checker{valid: func([]byte) bool { return true }}
	g := NewGuard(GuardConfig{Checker: ck})
	ctx := context.Background()
	ran := 0
	for _, gen := range []uint64{12, 10, 12, 10, 11} {
		if _, err := g.Do(ctx, permitOf("/ls/c/sem", gen), func(s Sequencer) error {
			if s.Mode != Permit || s.Generation != gen {
				t.Fatalf("fn got %+v", s)
			}
			ran++
			return nil
		}); err != nil {
			t.Fatalf("permit generation %d: %v", gen, err)
		}
	}
	if ran != 5 {
		t.Fatalf("fn ran %d times, want 5", ran)
	}
	if h := g.Highest(Sequencer{Cell: "c", Path: "/ls/c/sem"}); h != 0 {
		t.Fatalf("permits raised the highest generation to %d", h)
	}
	// An exclusive sequencer of a higher generation does not fence permits.
	if _, err := g.Check(ctx, seqOf("/ls/c/sem", 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(ctx, permitOf("/ls/c/sem", 10)); err != nil {
		t.Fatalf("permit after a higher exclusive generation: %v", err)
	}
	// Concurrently too (under -race).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Check(ctx, permitOf("/ls/c/sem", uint64(10+i%3))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// A permit the cell no longer vouches for is refused as stale, whatever
// the other holders do; the others are still admitted.
func TestGuardPermitRefusedWhenCellSaysInvalid(t *testing.T) {
	lost := permitOf("/ls/c/sem", 10)
	ck := &checker{valid: func(b []byte) bool { return !bytes.Equal(b, lost) }}
	g := NewGuard(GuardConfig{Checker: ck})
	ctx := context.Background()
	ran := false
	if _, err := g.Do(ctx, lost, func(Sequencer) error { ran = true; return nil }); !errors.Is(err, ErrStale) || ran {
		t.Fatalf("lost permit: err %v, fn ran %v; want ErrStale and no run", err, ran)
	}
	if _, err := g.Check(ctx, permitOf("/ls/c/sem", 12)); err != nil {
		t.Fatalf("held permit: %v", err)
	}
}

// Without a Checker a guard cannot tell a held permit from a lost one: it
// refuses every Permit sequencer with ErrNeedsChecker (not ErrStale: the
// holder may well still hold), and still fences other modes locally.
func TestGuardPermitNeedsChecker(t *testing.T) {
	g := NewGuard(GuardConfig{})
	ctx := context.Background()
	ran := false
	_, err := g.Do(ctx, permitOf("/ls/c/sem", 12), func(Sequencer) error { ran = true; return nil })
	if !errors.Is(err, ErrNeedsChecker) || errors.Is(err, ErrStale) || ran {
		t.Fatalf("err %v, fn ran %v; want ErrNeedsChecker only and no run", err, ran)
	}
	if _, err := g.Check(ctx, seqOf("/ls/c/lock", 3)); err != nil {
		t.Fatalf("exclusive without a checker: %v", err)
	}
}

// A permit's confirmation is never cached, whatever CacheTTL says: the
// cell is asked on each request, so a permit lost between two requests is
// refused on the next one.
func TestGuardPermitNotCached(t *testing.T) {
	var mu sync.Mutex
	held := true
	ck := &checker{valid: func([]byte) bool { mu.Lock(); defer mu.Unlock(); return held }}
	g := NewGuard(GuardConfig{Checker: ck, CacheTTL: time.Hour})
	ctx := context.Background()
	seq := permitOf("/ls/c/sem", 12)
	for i := range 3 {
		if _, err := g.Check(ctx, seq); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := ck.calls.Load(); n != 3 {
		t.Fatalf("the cell was asked %d times for 3 requests, want 3", n)
	}
	mu.Lock()
	held = false
	mu.Unlock()
	if _, err := g.Check(ctx, seq); !errors.Is(err, ErrStale) {
		t.Fatalf("after the permit was lost: %v, want ErrStale", err)
	}
	// An exclusive sequencer is still cached as before.
	excl := seqOf("/ls/c/lock", 4)
	mu.Lock()
	held = true
	mu.Unlock()
	before := ck.calls.Load()
	for range 3 {
		if _, err := g.Check(ctx, excl); err != nil {
			t.Fatal(err)
		}
	}
	if n := ck.calls.Load() - before; n != 1 {
		t.Fatalf("exclusive: the cell was asked %d times, want 1 (cached)", n)
	}
}
