package selfcheck

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// A hand-made history where a read returns a value overwritten before the
// read began: the checker must call it a violation and name the read and
// the overwriting write. The same history without the stale read, and a
// history with a read concurrent with the write (either answer is fine),
// are linearizable.
func TestCheckFindsStaleRead(t *testing.T) {
	const f = "/ls/t/f"
	init := Op{Session: 0, Seq: 1, Kind: KindWrite, Object: f, Value: "a", Gen: 10, Call: 1 * ms, Return: 2 * ms}
	read1 := Op{Session: 1, Seq: 1, Kind: KindRead, Object: f, Value: "a", Gen: 10, Cached: true, Call: 3 * ms, Return: 4 * ms}
	over := Op{Session: 0, Seq: 2, Kind: KindWrite, Object: f, Value: "b", Gen: 12, Call: 5 * ms, Return: 6 * ms}
	stale := Op{Session: 1, Seq: 2, Kind: KindRead, Object: f, Value: "a", Gen: 10, Cached: true, Hit: true, Call: 7 * ms, Return: 8 * ms}
	fresh := Op{Session: 1, Seq: 3, Kind: KindRead, Object: f, Value: "b", Gen: 12, Call: 9 * ms, Return: 10 * ms}

	good := Check([]Op{init, read1, over, fresh}, 10*time.Second)
	if good.Verdict != Linearizable || good.Ops != 4 || len(good.Failures) != 0 {
		t.Fatalf("a good history: %+v", good)
	}
	// Concurrent with the write, the old value is a fine answer.
	conc := stale
	conc.Call = 5500 * time.Microsecond
	if r := Check([]Op{init, read1, over, conc, fresh}, 10*time.Second); r.Verdict != Linearizable {
		t.Fatalf("a read concurrent with the write that returns the old value: %+v", r)
	}

	bad := Check([]Op{init, read1, over, stale, fresh}, 10*time.Second)
	if bad.Verdict != Violation || len(bad.Failures) != 1 {
		t.Fatalf("a stale read: %+v", bad)
	}
	fl := bad.Failures[0]
	if fl.Object != f || fl.Stuck != stale {
		t.Fatalf("failure names %v on %s; want the stale read %v", fl.Stuck, fl.Object, stale)
	}
	if len(fl.Witnesses) == 0 || fl.Witnesses[0] != over {
		t.Fatalf("witnesses %v; want the overwriting write %v first", fl.Witnesses, over)
	}
	if !strings.Contains(fl.Reason, "stale read") || !strings.Contains(fl.Reason, "generation 12") {
		t.Fatalf("reason %q", fl.Reason)
	}
	if n := len(fl.Linearized); n == 0 || fl.Linearized[n-1].Op != over || !strings.Contains(fl.Linearized[n-1].State, `"b" gen 12`) {
		t.Fatalf("linearized prefix %+v; want it to end with the overwrite", fl.Linearized)
	}

	// An unknown write may or may not have happened: a read of it, or of
	// what it would have overwritten, is fine; a failed read says nothing.
	lost := Op{Session: 0, Seq: 3, Kind: KindWrite, Object: f, Value: "c", Call: 11 * ms, Unknown: true, Error: "timeout"}
	seen := Op{Session: 1, Seq: 4, Kind: KindRead, Object: f, Value: "c", Gen: 14, Call: 12 * ms, Return: 13 * ms}
	if r := Check([]Op{init, over, fresh, lost, seen}, 10*time.Second); r.Verdict != Linearizable || r.Unknown != 1 {
		t.Fatalf("a read of an unknown write: %+v", r)
	}
}

// The lock: two sessions holding it at once is a violation naming both
// grants; a grant after a release, with a growing lock generation, is
// not; a lock generation that goes back is.
func TestCheckFindsTwoHolders(t *testing.T) {
	const l = "/ls/t/lock"
	a1 := Op{Session: 0, Seq: 1, Kind: KindAcquire, Object: l, Call: 1 * ms, Return: 2 * ms}
	h1 := Op{Session: 0, Seq: 2, Kind: KindHolder, Object: l, Holder: 0, Gen: 20, Call: 3 * ms, Return: 4 * ms}
	r1 := Op{Session: 0, Seq: 3, Kind: KindRelease, Object: l, Call: 5 * ms, Return: 6 * ms}
	a2 := Op{Session: 1, Seq: 1, Kind: KindAcquire, Object: l, Call: 1 * ms, Return: 7 * ms}
	h2 := Op{Session: 1, Seq: 2, Kind: KindHolder, Object: l, Holder: 1, Gen: 25, Call: 8 * ms, Return: 9 * ms}
	if r := Check([]Op{a1, h1, r1, a2, h2}, 10*time.Second); r.Verdict != Linearizable {
		t.Fatalf("a hand-off: %+v", r)
	}
	back := h2
	back.Gen = 15
	if r := Check([]Op{a1, h1, r1, a2, back}, 10*time.Second); r.Verdict != Violation {
		t.Fatalf("a lock generation going back: %+v", r)
	}
	early := a2
	early.Return = 3500 * time.Microsecond // granted while session 0 held it
	r := Check([]Op{a1, h1, r1, early}, 10*time.Second)
	if r.Verdict != Violation || len(r.Failures) != 1 {
		t.Fatalf("two holders: %+v", r)
	}
	fl := r.Failures[0]
	if fl.Stuck != early && fl.Stuck != h1 {
		t.Fatalf("failure names %v; want the second grant or the holder read it contradicts", fl.Stuck)
	}
	if fl.Stuck == early && (len(fl.Witnesses) == 0 || fl.Witnesses[0] != a1 || !strings.Contains(fl.Reason, "two holders")) {
		t.Fatalf("witnesses %v, reason %q; want session 0's grant", fl.Witnesses, fl.Reason)
	}
}
