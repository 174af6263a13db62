package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// eventLog records every event of a stream, for tests that look at more
// than the kinds.
type eventLog struct {
	mu  sync.Mutex
	evs []client.Event
}

func logEvents(ch <-chan client.Event) *eventLog {
	l := &eventLog{}
	go func() {
		for ev := range ch {
			l.mu.Lock()
			l.evs = append(l.evs, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) all() []client.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]client.Event(nil), l.evs...)
}

// first returns the first event of kind k, and whether there is one.
func (l *eventLog) first(k client.EventKind) (client.Event, bool) {
	for _, e := range l.all() {
		if e.Kind == k {
			return e, true
		}
	}
	return client.Event{}, false
}

// nextKind waits for the next event of kind k on ch, skipping others.
func nextKind(t *testing.T, ch <-chan client.Event, k client.EventKind, within time.Duration, what string) client.Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the stream was closed before a %v", what, k)
			}
			if e.Kind == k {
				return e
			}
		case <-deadline:
			t.Fatalf("%s: no %v within %v", what, k, within)
		}
	}
}

// A Client with RenewSession outlives its session: cut off past lease and
// grace, it hears Jeopardy then Expired (every lock context ended first,
// with ErrLockLost), and once it reaches the cell again, Renewed with a
// new session id, after every open handle was re-opened in it. Meanwhile
// another session took the lock it held: the renewed handle does not hold
// it, its lock context stays ended, and Acquire is needed (and works). A
// call made during the renewal waits for it and succeeds; a handle whose
// node was deleted meanwhile hears ReopenFailed and fails with
// ErrHandleInvalid; an ephemeral node is created again. No handle event
// reaches Client.Events, and Client.Close closes the handle streams.
func TestRenewSessionAfterExpiry(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 90*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout, cfg.RenewSession = cut.Dial, 1500*time.Millisecond, 10*time.Second, true
	a := c.ClientWith(t, cfg)
	sessEvents := logEvents(a.Events())
	old := a.Session()
	other := c.Client(t)
	f := open(t, ctx, a, c.Name("f"), rwc, client.WithContents([]byte("x")), client.WithEvents(client.OnContentsModified))
	lk := open(t, ctx, a, c.Name("lock"), rwc, client.WithLockDelay(100*time.Millisecond))
	eph := open(t, ctx, a, c.Name("alive-a"), rwc|client.Ephemeral)
	open(t, ctx, other, c.Name("gone"), rwc)
	gone := open(t, ctx, a, c.Name("gone"), client.Read|client.Write) // without Create: not re-created
	acquire(t, ctx, lk)
	held, err := lk.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := lk.LockContext()

	cut.Cut()
	waitUntil(t, 15*time.Second, "Expired", func() bool { _, ok := sessEvents.first(client.Expired); return ok })
	if done, _ := ended(lctx); !done {
		t.Fatal("the lock context was live when Expired was delivered")
	}
	if cause := context.Cause(lk.LockContext()); !errors.Is(cause, client.ErrLockLost) || !errors.Is(cause, client.ErrSessionExpired) {
		t.Fatalf("LockContext's cause after Expired: %v, want ErrLockLost and ErrSessionExpired", cause)
	}
	lost := nextKind(t, lk.Events(), client.LockLost, 5*time.Second, "the lock's handle")
	if lost.LockGen != held.LockGen || lost.Path != lk.Name() {
		t.Fatalf("LockLost %+v, want generation %d", lost, held.LockGen)
	}

	// While a is away, the cell expires its session: another session
	// takes the lock, and a node a has open is deleted.
	olk := open(t, ctx, other, c.Name("lock"), rwc)
	acquire(t, ctx, olk)
	ost, err := olk.GetStat(ctx)
	if err != nil || ost.LockGen <= held.LockGen {
		t.Fatalf("the other session's grant: %+v %v, want a generation past %d", ost, err, held.LockGen)
	}
	if err := open(t, ctx, other, c.Name("gone"), client.Write).Delete(ctx); err != nil {
		t.Fatal(err)
	}

	// Calls made during the renewal wait for it: a read, and a write
	// that never reached the old session (it runs once, in the new one).
	during, wrote := make(chan error, 1), make(chan error, 1)
	go func() {
		_, _, err := f.GetContentsAndStat(ctx)
		during <- err
	}()
	go func() { wrote <- f.SetContents(ctx, []byte("during")) }()
	cut.Heal()
	renewed := nextKindLog(t, sessEvents, client.Renewed, 20*time.Second)
	if renewed.Session == old || renewed.Session == 0 || a.Session() != renewed.Session {
		t.Fatalf("Renewed %+v; old session %d, Session() %d", renewed, old, a.Session())
	}
	if err := <-during; err != nil {
		t.Fatalf("a read made during the renewal: %v, want it to wait and succeed", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("a write made during the renewal: %v, want it to wait and succeed", err)
	}
	if data, _, err := open(t, ctx, other, c.Name("f"), client.Read).GetContentsAndStat(ctx); err != nil || string(data) != "during" {
		t.Fatalf("f after the renewal: %q %v, want the write made during it", data, err)
	}

	// The session stream: Jeopardy, Expired, Renewed, in that order, and
	// no handle event.
	var kinds []client.EventKind
	for _, e := range sessEvents.all() {
		if e.Path != "" {
			t.Fatalf("a handle event on Client.Events: %+v", e)
		}
		if e.Kind != client.MasterFailover {
			kinds = append(kinds, e.Kind)
		}
	}
	if len(kinds) < 3 || kinds[0] != client.Jeopardy || kinds[len(kinds)-2] != client.Expired || kinds[len(kinds)-1] != client.Renewed {
		t.Fatalf("session events %v, want jeopardy ... expired, renewed", kinds)
	}

	// The handles work in the new session.
	if re := nextKind(t, f.Events(), client.Reopened, 5*time.Second, "f"); re.Session != renewed.Session || re.Instance == 0 {
		t.Fatalf("f's Reopened %+v", re)
	}
	if err := f.SetContents(ctx, []byte("y")); err != nil {
		t.Fatalf("write after the renewal: %v", err)
	}
	if e := nextKind(t, f.Events(), client.ContentsModified, 10*time.Second, "f after the renewal"); e.Path != f.Name() {
		t.Fatalf("f's event after the renewal: %+v", e)
	}
	nextKind(t, eph.Events(), client.Reopened, 5*time.Second, "the ephemeral handle")
	if h, err := other.Open(ctx, c.Name("alive-a"), client.Read); err != nil {
		t.Fatalf("the ephemeral node after the renewal: %v, want it created again", err)
	} else {
		h.Close()
	}
	failed := nextKind(t, gone.Events(), client.ReopenFailed, 5*time.Second, "the deleted node's handle")
	if !errors.Is(failed.Err, client.ErrNotFound) || !errors.Is(failed.Err, client.ErrHandleInvalid) {
		t.Fatalf("ReopenFailed's Err %v, want ErrNotFound and ErrHandleInvalid", failed.Err)
	}
	if _, err := gone.GetStat(ctx); !errors.Is(err, client.ErrHandleInvalid) {
		t.Fatalf("a call on the handle that was not re-opened: %v, want ErrHandleInvalid", err)
	}

	// The lock did not carry over.
	nextKind(t, lk.Events(), client.Reopened, 5*time.Second, "the lock's handle")
	if done, _ := ended(lk.LockContext()); !done {
		t.Fatal("the renewed handle's lock context is live: a lost lock was hidden")
	}
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); ok || err != nil {
		t.Fatalf("TryAcquire while the other session holds it: %v %v, want false", ok, err)
	}
	if err := olk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(t, ctx, lk)
	st, err := lk.GetStat(ctx)
	if err != nil || st.LockGen <= ost.LockGen {
		t.Fatalf("re-acquired at %+v (%v), want a generation past %d", st, err, ost.LockGen)
	}
	if done, cause := ended(lk.LockContext()); done {
		t.Fatalf("lock context after the re-acquire ended: %v", cause)
	}

	if err := a.Close(); err != nil {
		t.Fatalf("close the renewed client: %v", err)
	}
	waitUntil(t, 5*time.Second, "the handle streams closed by Client.Close", func() bool {
		for {
			select {
			case _, ok := <-f.Events():
				if !ok {
					return true
				}
			default:
				return false
			}
		}
	})
}

// nextKindLog waits for the first event of kind k in l.
func nextKindLog(t *testing.T, l *eventLog, k client.EventKind, within time.Duration) client.Event {
	t.Helper()
	var e client.Event
	waitUntil(t, within, k.String(), func() bool {
		var ok bool
		e, ok = l.first(k)
		return ok
	})
	return e
}

// Without RenewSession, Expired is final, as before: the handle that held
// a lock hears LockLost and its stream closes, calls fail at once with
// ErrSessionExpired once the cell is reachable again, the session id
// stays, and no Renewed comes.
func TestExpiryWithoutRenewIsFinal(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 60*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, 1500*time.Millisecond, 5*time.Second
	a := c.ClientWith(t, cfg)
	sessEvents := logEvents(a.Events())
	old := a.Session()
	lk := open(t, ctx, a, c.Name("lock"), rwc)
	acquire(t, ctx, lk)
	cut.Cut()
	lost := nextKind(t, lk.Events(), client.LockLost, 15*time.Second, "the lock's handle")
	if lost.Path != lk.Name() || lost.LockGen == 0 {
		t.Fatalf("LockLost %+v", lost)
	}
	if cause := context.Cause(lk.LockContext()); !errors.Is(cause, client.ErrLockLost) {
		t.Fatalf("lock context's cause %v, want ErrLockLost", cause)
	}
	waitUntil(t, 5*time.Second, "the handle's stream closed at the expiry", func() bool {
		select {
		case _, ok := <-lk.Events():
			return !ok
		default:
			return false
		}
	})
	cut.Heal()
	start := time.Now()
	if _, err := lk.GetStat(ctx); !errors.Is(err, client.ErrSessionExpired) || time.Since(start) > 2*time.Second {
		t.Fatalf("a call after the expiry: %v after %v, want ErrSessionExpired at once", err, time.Since(start))
	}
	nextKindLog(t, sessEvents, client.Expired, 5*time.Second)
	if a.Session() != old {
		t.Fatalf("session %d (was %d): want the same session", a.Session(), old)
	}
	if _, ok := sessEvents.first(client.Renewed); ok {
		t.Fatal("a Client without RenewSession renewed its session")
	}
}
