package master

import (
	"context"
	"testing"

	"lockcell/fsm"
	"lockcell/wire"
)

// A check that finds a cap reached only because a session that has just
// applied is still counted as a reservation (its call has not returned)
// waits for the reservation to be given back and then admits, so racing
// callers who together ask for exactly the cap all get in. A cap reached
// with no reservation out refuses at once.
func TestReservationAtTheCapWaitsForAppliedOnes(t *testing.T) {
	m := newTestMaster(t)
	m.cfg.Limits.SessionsPerPrincipal = 2
	caller := Caller{Principal: "p"}
	ctx := context.Background()
	create := func() {
		t.Helper()
		res, err := m.cons.Apply(ctx, &fsm.Command{Principal: caller.Principal, Time: m.now(), Payload: &fsm.CreateSessionArgs{}})
		if err != nil || res.Err != nil {
			t.Fatalf("create: %v %v", err, res.Err)
		}
	}
	waiting := func() int {
		m.reserved.mu.Lock()
		defer m.reserved.mu.Unlock()
		return m.reserved.waiting
	}

	releaseA, err := m.reserveSession(ctx, caller)
	if err != nil {
		t.Fatal(err)
	}
	create() // A's session applies: the state and the reservation both count it
	type reserved struct {
		release func()
		err     error
	}
	got := make(chan reserved, 1)
	go func() {
		release, err := m.reserveSession(ctx, caller)
		got <- reserved{release, err}
	}()
	eventually(t, "the second check waits or answers", func() bool { return waiting() == 1 || len(got) > 0 })
	select {
	case r := <-got:
		t.Fatalf("the check for the second of two places answered at once (%v): it counted the first session twice", r.err)
	default:
	}
	releaseA()
	b := <-got
	if b.err != nil {
		t.Fatalf("the second of two places, once the first settled: %v", b.err)
	}
	create()
	b.release()

	// Full, nothing out: refused at once.
	if _, err := m.reserveSession(ctx, caller); codeOf(err) != wire.CodeTooMany {
		t.Fatalf("a third session at a cap of two: %v; want TooMany", err)
	}
	if n := waiting(); n != 0 {
		t.Fatalf("%d checks still waiting", n)
	}
}
