package fsm

import "testing"

// TestIdleCloseOnlyOfSessionsWithoutHandles: the master's idle close
// (CloseSessionArgs.Idle) is decided by the state when it applies. A
// session with an open handle (here one holding a lock, with an
// ephemeral file) is refused with KindCanceled and keeps everything; once
// the handle is closed (the ephemeral file goes with it), the same
// command closes the session, and that changes nothing else.
func TestIdleCloseOnlyOfSessionsWithoutHandles(t *testing.T) {
	h := newFSMT(t)
	v := View{h.f} // read between applies, on this goroutine
	s := h.session()
	other := h.session()
	fh := h.mustOpen(s, "eph", fsmtRWC|FlagEphemeral)
	if r := h.do(s, Command{Payload: &AcquireArgs{Handle: fh, Mode: LockExclusive}}); r.Err != nil || !r.Granted {
		t.Fatalf("acquire: %+v", r)
	}
	r := h.raw(Command{Session: s, Payload: &CloseSessionArgs{Idle: true}})
	if r.Err == nil || r.Err.Kind != KindCanceled {
		t.Fatalf("idle close of a session holding a handle: %+v, want KindCanceled", r.Err)
	}
	if !v.SessionExists(s) || v.SessionHandles(s) != 1 || !v.Exists(fsmtPath("eph")) {
		t.Fatal("a refused idle close changed the session")
	}
	if _, err := v.HeldLock(s, fh); err != nil {
		t.Fatalf("a refused idle close took the session's lock: %v", err)
	}

	if r := h.do(s, Command{Payload: &CloseArgs{Handle: fh}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if v.Exists(fsmtPath("eph")) {
		t.Fatal("the ephemeral file outlived its last handle")
	}
	if r := h.raw(Command{Session: s, Payload: &CloseSessionArgs{Idle: true}}); r.Err != nil {
		t.Fatalf("idle close of a session without handles: %v", r.Err)
	}
	if v.SessionExists(s) || !v.SessionExists(other) {
		t.Fatal("the idle close did not end exactly its session")
	}
	fsmtCheckInvariants(t, h.f)
}
