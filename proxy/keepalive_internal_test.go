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

// A call whose client was told the latest lease the proxy has waits for
// the next batch until an eighth of the lease it was told before its end,
// not an eighth of the master's: a session created with the cell's 12 s
// base lease while the master grants 60 s would otherwise hear NotMaster
// 7.5 s early, with 4.5 s of its lease gone. With a newer lease, it is
// answered a quarter to a half of the master's lease before the told end,
// and never later than three quarters of a lease after it arrived.
func TestHoldEndsByTheLeaseTheClientWasTold(t *testing.T) {
	const ttl = 60 * time.Second
	k := &keeper{ttl: ttl}
	now := time.Unix(1_000_000, 0)
	s := &kaSession{toldEnd: now.Add(12 * time.Second), toldFor: 12 * time.Second, leaseEnd: now.Add(11800 * time.Millisecond)}
	c := &clientCall{s: s, arrived: now}
	if got, want := k.holdEndLocked(c), s.toldEnd.Add(-1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("told 12s, nothing newer: hold ends at +%v, want +%v", got.Sub(now), want.Sub(now))
	}
	s.toldEnd, s.toldFor, s.leaseEnd = now.Add(50*time.Second), 50*time.Second, now.Add(80*time.Second)
	for range 100 {
		end := k.holdEndLocked(c)
		if end.Before(s.toldEnd.Add(-ttl/2)) || end.After(s.toldEnd.Add(-ttl/4)) {
			t.Fatalf("told +50s, a newer lease: hold ends at +%v, want within [+20s, +35s]", end.Sub(now))
		}
	}
	s.toldEnd = now.Add(2 * ttl)
	if got := k.holdEndLocked(c); !got.Equal(now.Add(ttl * 3 / 4)) {
		t.Fatalf("told far ahead: hold ends at +%v, want three quarters of a lease", got.Sub(now))
	}
}
