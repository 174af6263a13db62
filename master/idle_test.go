package master

import (
	"slices"
	"testing"
	"time"
)

// TestIdleCallsFindOnlyQuietSessions: the master's memory of sessions'
// calls names a session idle only once it has been seen with a lease for
// the timeout and made no call for as long, and never while a call of it
// is in progress, however long that call takes; calls of sessions it
// holds no entry for (no lease: a bogus id) are not remembered; a new
// term starts every clock afresh.
func TestIdleCallsFindOnlyQuietSessions(t *testing.T) {
	const timeout = time.Minute
	var ic idleCalls
	t0 := time.Unix(1000, 0)
	live := []uint64{1, 2, 3}
	if got := ic.idle(live, t0, timeout); len(got) != 0 {
		t.Fatalf("sessions first seen now are idle: %v", got)
	}
	if e := ic.begin(99, t0); e != nil {
		t.Fatal("a call of a session without a lease made an entry")
	}
	// 2 calls and is answered; 3 calls and its call stays in progress.
	ic.end(ic.begin(2, t0.Add(30*time.Second)), t0.Add(31*time.Second))
	long := ic.begin(3, t0.Add(10*time.Second))

	if got := ic.idle(live, t0.Add(timeout-time.Second), timeout); len(got) != 0 {
		t.Fatalf("idle before the timeout: %v", got)
	}
	if got := ic.idle(live, t0.Add(timeout), timeout); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("idle at the timeout: %v, want [1]", got)
	}
	later := t0.Add(10 * timeout)
	got := ic.idle(live, later, timeout)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("idle long after: %v, want [1 2] (3 has a call in progress)", got)
	}
	ic.end(long, later)
	if got := ic.idle(live, later.Add(timeout-time.Second), timeout); slices.Contains(got, 3) {
		t.Fatalf("3 is idle less than a timeout after its long call ended: %v", got)
	}

	// A session without a lease is forgotten; a new term forgets all.
	ic.idle([]uint64{1}, later, timeout)
	if ic.calls[2] != nil {
		t.Fatal("the entry of a session without a lease was kept")
	}
	ic.forgetAll()
	if got := ic.idle([]uint64{1}, later.Add(timeout), timeout); len(got) != 0 {
		t.Fatalf("after a new term a session is idle at once: %v", got)
	}
}

// BenchmarkIdleCallsBeginEnd is what noting a call costs Dispatch while
// the idle timeout is on: begin and end on the leaf mutex, from parallel
// callers on a table of 100,000 sessions.
func BenchmarkIdleCallsBeginEnd(b *testing.B) {
	var ic idleCalls
	live := make([]uint64, 100000)
	for i := range live {
		live[i] = uint64(i + 1)
	}
	now := time.Now()
	ic.idle(live, now, time.Minute)
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			i++
			ic.end(ic.begin(i%100000+1, now), now)
		}
	})
}
