package sequencer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func seqOf(path string, gen uint64) []byte {
	return Sign(key, Sequencer{Cell: "c", Path: path, Mode: Exclusive, Generation: gen})
}

func TestSignParseVerify(t *testing.T) {
	s := Sequencer{Cell: "c", Path: "/ls/c/lock", Mode: Shared, Generation: 1 << 40}
	b := Sign(key, s)
	if got, err := Parse(b); err != nil || got != s {
		t.Fatalf("parse: %+v %v", got, err)
	}
	if got, err := Verify(key, b); err != nil || got != s {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if _, err := Verify([]byte("another key"), b); !errors.Is(err, ErrForged) {
		t.Fatalf("wrong key: %v", err)
	}
	for i := range b {
		alt := append([]byte(nil), b...)
		alt[i] ^= 0x40
		if _, err := Verify(key, alt); err == nil {
			t.Fatalf("byte %d altered still verifies", i)
		}
	}
	for n := range len(b) {
		if _, err := Parse(b[:n]); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrForged) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	txt := EncodeText(b)
	if back, err := DecodeText(txt); err != nil || !bytes.Equal(back, b) {
		t.Fatalf("text round trip: %v", err)
	}
	if _, err := DecodeText("!!not base64"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad text: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(seqOf("/ls/c/x", 7))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && (len(s.Path) > maxField || len(s.Cell) > maxField) {
			t.Fatalf("accepted over-long fields")
		}
	})
}

type checker struct {
	valid func([]byte) bool
	calls atomic.Int64
}

func (c *checker) CheckSequencer(_ context.Context, seq []byte) (bool, error) {
	c.calls.Add(1)
	return c.valid(seq), nil
}

func TestGuardFencesOlderGenerations(t *testing.T) {
	g := NewGuard(GuardConfig{})
	ctx := context.Background()
	if _, err := g.Check(ctx, seqOf("/ls/c/a", 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(ctx, seqOf("/ls/c/a", 5)); err != nil {
		t.Fatalf("same generation again: %v", err)
	}
	if _, err := g.Check(ctx, seqOf("/ls/c/a", 9)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(ctx, seqOf("/ls/c/a", 5)); !errors.Is(err, ErrStale) {
		t.Fatalf("older generation: %v", err)
	}
	if _, err := g.Check(ctx, seqOf("/ls/c/b", 1)); err != nil {
		t.Fatalf("another lock is independent: %v", err)
	}
	if _, err := g.Check(ctx, []byte{1, 2, 3}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
	// State persists and restores; restore never lowers a generation.
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var g2 Guard
	if err := json.Unmarshal(b, &g2); err != nil {
		t.Fatal(err)
	}
	if _, err := g2.Check(ctx, seqOf("/ls/c/a", 8)); !errors.Is(err, ErrStale) {
		t.Fatalf("restored guard accepts an older generation: %v", err)
	}
	g2.Restore(map[string]uint64{Sequencer{Cell: "c", Path: "/ls/c/a"}.Key(): 1})
	if _, err := g2.Check(ctx, seqOf("/ls/c/a", 8)); !errors.Is(err, ErrStale) {
		t.Fatal("restore lowered a generation")
	}
}

func TestGuardAsksTheCell(t *testing.T) {
	valid := seqOf("/ls/c/a", 10)
	ch := &checker{valid: func(b []byte) bool { return bytes.Equal(b, valid) }}
	g := NewGuard(GuardConfig{Checker: ch, Cell: "c"})
	ctx := context.Background()
	if _, err := g.Check(ctx, seqOf("/ls/c/a", 99)); !errors.Is(err, ErrStale) {
		t.Fatalf("a generation the cell denies: %v", err)
	}
	// The denied generation was not recorded: the valid, lower one passes.
	if _, err := g.Check(ctx, valid); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(ctx, valid); err != nil {
		t.Fatal(err)
	}
	if n := ch.calls.Load(); n != 2 {
		t.Fatalf("cache: %d calls to the cell, want 2", n)
	}
	other := Sign(key, Sequencer{Cell: "d", Path: "/ls/d/a", Mode: Exclusive, Generation: 1})
	if _, err := g.Check(ctx, other); !errors.Is(err, ErrStale) {
		t.Fatalf("another cell's sequencer: %v", err)
	}
}

// Do holds the fence across the protected write: with concurrent requests
// of many generations, the writes it lets through happen in
// non-decreasing generation order and every rejected one was older than
// an accepted one.
func TestGuardDoSerialisesPerLock(t *testing.T) {
	g := NewGuard(GuardConfig{})
	ctx := context.Background()
	var mu sync.Mutex
	var applied []uint64
	var wg sync.WaitGroup
	for gen := uint64(1); gen <= 200; gen++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Do(ctx, seqOf("/ls/c/a", gen), func(s Sequencer) error {
				mu.Lock()
				applied = append(applied, s.Generation)
				mu.Unlock()
				return nil
			})
		}()
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("write of generation %d applied after %d", applied[i], applied[i-1])
		}
	}
	if len(applied) == 0 || applied[len(applied)-1] != 200 {
		t.Fatalf("the newest generation was not applied: %v", applied)
	}
}

// A request waiting for its lock's fence gives up when its context ends,
// without running its action, and the fence works on once it is free.
func TestGuardFenceWaitEndsWithContext(t *testing.T) {
	g := NewGuard(GuardConfig{})
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), seqOf("/ls/c/l", 3), func(Sequencer) error {
			close(entered)
			<-release
			return nil
		})
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if _, err := g.Do(ctx, seqOf("/ls/c/l", 3), func(Sequencer) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do while the fence is held, context ended: %v (action ran: %v); want context.Canceled", err, ran)
	}
	if _, err := g.Do(context.Background(), seqOf("/ls/c/other", 1), nil); err != nil {
		t.Fatalf("another lock's fence, while this one is held: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), seqOf("/ls/c/l", 3), func(Sequencer) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do after the fence was freed: %v (action ran: %v)", err, ran)
	}
}
