package master

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A principal's concurrent writes pass its ration one per debt paid, not
// all together the moment its bucket is out of debt: four writes of 600
// bytes on a ration of 1,000 bytes a second (a full bucket to start)
// admit two at once (1,000 -> 400 -> -200), the third when its 200 bytes
// of debt are paid (0.2 s), the fourth 0.6 s after that. Were a write
// charged only once served, all four would pass at once.
func TestConcurrentWritesPassTheRationOneAtATime(t *testing.T) {
	clock := newFakeClock()
	r := newRations(1000, clock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var admitted atomic.Int32
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			err := r.take(ctx, "mallory", 600)
			if err == nil {
				admitted.Add(1)
			}
			errs <- err
		}()
	}
	// settled waits until want writes were admitted and the rest wait on
	// the clock, then checks it stays so.
	settled := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for admitted.Load() != want || clock.armed() != int(4-want) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes admitted, %d waiting on the clock; want %d and %d", admitted.Load(), clock.armed(), want, 4-want)
			}
			time.Sleep(time.Millisecond)
		}
		if got := admitted.Load(); got != want {
			t.Fatalf("%d writes admitted; want %d", got, want)
		}
	}
	settled(2)
	clock.Advance(199 * time.Millisecond)
	settled(2)
	clock.Advance(time.Millisecond)
	settled(3)
	clock.Advance(599 * time.Millisecond)
	settled(3)
	clock.Advance(time.Millisecond)
	settled(4)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// Another principal's bucket is its own: full, so it passes at once.
	if err := r.take(ctx, "bob", 600); err != nil {
		t.Fatal(err)
	}
	// A write given up while waiting is not charged.
	gone, stop := context.WithCancel(ctx)
	stop()
	if err := r.take(gone, "mallory", 600); err == nil {
		t.Fatal("a write whose caller gave up while in debt was admitted")
	}
	clock.Advance(600 * time.Millisecond) // mallory's debt paid: 0
	if err := r.take(ctx, "mallory", 1); err != nil {
		t.Fatalf("after its debt was paid: %v (the given-up write was charged)", err)
	}
}
