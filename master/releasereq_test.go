package master

import (
	"testing"
	"time"
)

// The rate limit of RequestRelease: one ask per session and lock per
// interval, refused asks not counted, other sessions and locks apart, and
// a table that forgets asks older than the interval once it grows, so it
// holds about one interval's asks however many came before.
func TestReleaseAsksLimitPerSessionAndLock(t *testing.T) {
	var r releaseAsks
	t0 := time.Unix(1000, 0)
	if _, ok := r.allow(1, "/ls/c/a", t0); !ok {
		t.Fatal("first ask refused")
	}
	wait, ok := r.allow(1, "/ls/c/a", t0.Add(300*time.Millisecond))
	if ok || wait != releaseInterval-300*time.Millisecond {
		t.Fatalf("second ask within the interval: ok=%v wait=%v; want refused with %v to wait", ok, wait, releaseInterval-300*time.Millisecond)
	}
	if _, ok := r.allow(2, "/ls/c/a", t0.Add(time.Millisecond)); !ok {
		t.Fatal("another session's ask refused")
	}
	if _, ok := r.allow(1, "/ls/c/b", t0.Add(time.Millisecond)); !ok {
		t.Fatal("an ask about another lock refused")
	}
	// The refused ask did not move the interval's start.
	if _, ok := r.allow(1, "/ls/c/a", t0.Add(releaseInterval)); !ok {
		t.Fatal("an ask one interval after the first refused")
	}

	// Many sessions, one interval apart: the table stays bounded.
	now := t0
	for i := range 10 * minSweep {
		if i%minSweep == 0 {
			now = now.Add(releaseInterval)
		}
		if _, ok := r.allow(uint64(100+i), "/ls/c/a", now); !ok {
			t.Fatalf("session %d's first ask refused", 100+i)
		}
	}
	if n := len(r.last); n > 2*minSweep+1 {
		t.Fatalf("%d asks kept after %d intervals of %d asks each; want at most %d", n, 10, minSweep, 2*minSweep+1)
	}
}
