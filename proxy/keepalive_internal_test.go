package proxy

import (
	"testing"
	"time"
)

// A batch is held to the next half-lease tick unless a client that has
// heard the proxy's latest lease needs a newer one sooner: then it comes
// back a quarter lease before that client's lease ends, and at once (a
// millisecond: 0 would mean no bound) for a session told the cell's
// base lease while the master grants a longer one.
func TestBatchHoldEndsBeforeAClientNeedsItsLease(t *testing.T) {
	k := &keeper{}
	const ttl = 60 * time.Second
	now := time.Unix(999_990, 0).Add(7 * time.Second) // 7 s past a tick (a multiple of 30 s)
	tick := k.holdFor(now, ttl)
	if tick != 23*time.Second {
		t.Fatalf("holdFor %v, want to the next half-lease tick, 23s", tick)
	}
	if got := k.holdUntilNeeded(now, ttl, time.Time{}); got != tick {
		t.Fatalf("no client waiting on it: hold %v, want %v", got, tick)
	}
	// Told a lease from the last answer, a lease from now: no cut.
	if got := k.holdUntilNeeded(now, ttl, now.Add(ttl)); got != tick {
		t.Fatalf("a client told a whole lease: hold %v, want %v", got, tick)
	}
	// Told 30 s: back by 15 s, a quarter lease before.
	if got := k.holdUntilNeeded(now, ttl, now.Add(30*time.Second)); got != 15*time.Second {
		t.Fatalf("a client told 30s: hold %v, want 15s", got)
	}
	// A new session told the base lease, 12 s, under a 60 s lease.
	if got := k.holdUntilNeeded(now, ttl, now.Add(12*time.Second)); got != time.Millisecond {
		t.Fatalf("a new session told 12s: hold %v, want 1ms", got)
	}
}
