package cell_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"lockcell/audit"
	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/fsm"
	"lockcell/wire"
)

// idleCell is a one-replica cell whose master closes sessions idle for
// timeout.
func idleCell(t *testing.T, replicas int, timeout time.Duration) *fixtures.Cell {
	return fixtures.NewCell(t, replicas, fixtures.Options{Configure: func(cfg *cell.Config) {
		cfg.SessionLimits.IdleSessionTimeout = timeout
	}})
}

// waitEvent waits (with a deadline) for an event of kind on c's session
// stream, returning it; the events before it are returned too.
func waitEvent(t *testing.T, c *client.Client, kind client.EventKind, within time.Duration) (client.Event, []client.Event) {
	t.Helper()
	var seen []client.Event
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("events closed before %v (saw %v)", kind, seen)
			}
			if ev.Kind == kind {
				return ev, seen
			}
			seen = append(seen, ev)
		case <-deadline:
			t.Fatalf("no %v event within %v (saw %v)", kind, within, seen)
		}
	}
}

// TestIdleSessionIsClosedAndReplaced, through a real cell whose idle
// timeout is scaled down to 600 ms: a session with no open handle that
// makes no call is found idle by the master after the timeout (no
// sooner); its client is told IdleClosed at once, not Expired, and the
// session is closed once its lease, no longer extended, has run out,
// through the log (audited as idle_close_session, counted); a session
// holding an open handle, idle as long, is never closed; the idle
// client's next call works, in a new session (Renewed), and is not
// refused.
func TestIdleSessionIsClosedAndReplaced(t *testing.T) {
	const timeout = 600 * time.Millisecond
	c := idleCell(t, 1, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder := c.Client(t)
	h, err := holder.Open(ctx, c.Name("kept"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	holderSession := holder.Session()

	start := time.Now()
	idle := c.Client(t) // Dial's CreateSession is its last call
	idleSession := idle.Session()
	ev, before := waitEvent(t, idle, client.IdleClosed, 10*time.Second)
	if took := time.Since(start); took < timeout {
		t.Fatalf("the idle session was closed after %v, before its timeout %v", took, timeout)
	}
	if ev.Session != idleSession {
		t.Fatalf("IdleClosed names session %d, the client's was %d", ev.Session, idleSession)
	}
	for _, e := range before {
		if e.Kind == client.Expired {
			t.Fatalf("an idle close was delivered as Expired: %v", before)
		}
	}
	m := c.Server(c.WaitForMaster(10 * time.Second))
	exists := func(id uint64) bool {
		ok := false
		_ = m.Replica().FSM().Read(func(v fsm.View) error { ok = v.SessionExists(id); return nil })
		return ok
	}
	// The client hears at once; the master closes the session once the
	// lease it stopped extending has run out (master/idle.go).
	pollUntil(t, 10*time.Second, "the idle close, once the lease ran out", func() bool {
		return m.Master().Stats().IdleClosed >= 1 && !exists(idleSession)
	})
	// The close is audited as a session end of its own kind.
	if err := m.Replica().Audit().Flush(); err != nil {
		t.Fatal(err)
	}
	page, err := m.Replica().Audit().Read(audit.Query{MaxRecords: 10000, MaxBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(`"session":` + strconv.FormatUint(idleSession, 10))
	found := false
	for _, l := range page.Lines {
		found = found || bytes.Contains(l, []byte(`"idle_close_session"`)) && bytes.Contains(l, want)
	}
	if !found {
		t.Fatalf("no idle_close_session record of session %d in the audit trail", idleSession)
	}

	// The holder was as idle, but holds a handle: it stays, however long.
	time.Sleep(2 * timeout) // a span to stay alive through, not a synchronisation
	if !exists(holderSession) || holder.Session() != holderSession {
		t.Fatalf("the session holding an open handle was closed (state has it: %v)", exists(holderSession))
	}
	if err := h.SetContents(ctx, []byte("still here")); err != nil {
		t.Fatalf("the holder's handle after idling: %v", err)
	}

	// The idle client's next call runs in a new session.
	f, err := idle.Open(ctx, c.Name("after-idle"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatalf("the first call after the idle close: %v", err)
	}
	if err := f.SetContents(ctx, []byte("v")); err != nil {
		t.Fatal(err)
	}
	renewed, _ := waitEvent(t, idle, client.Renewed, 5*time.Second)
	if s := idle.Session(); s == idleSession || renewed.Session != s || !exists(s) {
		t.Fatalf("after the idle close the client is in session %d (Renewed says %d), was %d", s, renewed.Session, idleSession)
	}
	// With a handle open now, the new session is kept.
	time.Sleep(2 * timeout)
	if !exists(idle.Session()) {
		t.Fatalf("the new session, holding a handle, was closed")
	}
}

// TestIdleClockRestartsAtFailover: when a session last called is master
// memory, so a new master starts every idle clock afresh: an idle session
// of a three-replica cell whose master is stopped half a timeout in is
// closed by the successor, no sooner than a whole timeout after the old
// master stopped (later than the old master would have), and its client
// goes on in a new session.
func TestIdleClockRestartsAtFailover(t *testing.T) {
	const timeout = time.Second
	c := idleCell(t, 3, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idle := c.Client(t)
	old := idle.Session()
	time.Sleep(timeout / 2) // into the old master's timeout, not a synchronisation
	stopped := time.Now()
	c.StopMaster()
	ev, _ := waitEvent(t, idle, client.IdleClosed, 15*time.Second)
	if since := time.Since(stopped); since < timeout || ev.Session != old {
		t.Fatalf("session %d closed %v after the old master stopped (event names %d); the new master must wait a whole timeout %v",
			old, since, ev.Session, timeout)
	}
	h, err := idle.Open(ctx, c.Name("after-failover"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatalf("the first call after the idle close: %v", err)
	}
	h.Close()
	if idle.Session() == old {
		t.Fatal("the call ran without a new session")
	}
}

// TestIdleClosedSessionIsToldSo: a session closed for idleness is told so
// (wire.IsSessionIdleClosed), not given a plain expiry, on a KeepAlive and
// on a call that come after the close, as a client that missed the
// answer to its parked KeepAlive, or whose call raced the close, sends
// them; a raw session, so nothing but the master's answers is tested.
func TestIdleClosedSessionIsToldSo(t *testing.T) {
	const timeout = 400 * time.Millisecond
	c := idleCell(t, 1, timeout) // lease 2 s: the idle drain begins first, so the close at its end is an idle close
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := c.Server(c.WaitForMaster(10 * time.Second))
	r := dialRawSession(t, ctx, m.ClientAddr(), nil)
	exists := func() bool {
		ok := false
		_ = m.Replica().FSM().Read(func(v fsm.View) error { ok = v.SessionExists(r.session); return nil })
		return ok
	}
	for deadline := time.Now().Add(10 * time.Second); exists(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("session %d still open %v after its last call (idle timeout %v)", r.session, 10*time.Second, timeout)
		}
	}
	st := r.call(ctx, wire.MethodKeepAlive, &wire.KeepAliveRequest{}, &wire.KeepAliveResponse{})
	if !wire.IsSessionIdleClosed(st.Err()) {
		t.Fatalf("a KeepAlive after the idle close: %+v, want %q", st, wire.SessionIdleClosedMsg)
	}
	var open wire.OpenResponse
	st = r.call(ctx, wire.MethodOpen, &wire.OpenRequest{Path: c.Name("x"), Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate}, &open)
	if !wire.IsSessionIdleClosed(st.Err()) {
		t.Fatalf("a call after the idle close: %+v, want %q", st, wire.SessionIdleClosedMsg)
	}
}
