package cell_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/client/recipe"
	"lockcell/fixtures"
	"lockcell/wire"
)

// eventLog records a client's events for later assertions.
type eventLog struct {
	mu   sync.Mutex
	evs  []client.Event
	cond chan struct{}
}

func collectEvents(cl *client.Client) *eventLog {
	l, _ := collectEventsUntilClosed(cl)
	return l
}

func (l *eventLog) kinds() []client.EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []client.EventKind
	for _, e := range l.evs {
		out = append(out, e.Kind)
	}
	return out
}

func (l *eventLog) has(k client.EventKind) bool {
	for _, x := range l.kinds() {
		if x == k {
			return true
		}
	}
	return false
}

func (l *eventLog) waitFor(t *testing.T, k client.EventKind, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !l.has(k) {
		select {
		case <-l.cond:
		case <-deadline.C:
			t.Fatalf("no %v event within %v; got %v", k, d, l.kinds())
		}
	}
}

// A client that stops reaching the cell (its KeepAlives blocked) loses its
// session: its ephemeral files vanish, its locks are released, and a
// waiter gets the lock no earlier than the holder's lock-delay after the
// expiry; the client itself goes jeopardy -> expired and its calls fail
// with ErrSessionExpired.
func TestSessionExpiryReleasesWithLockDelay(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 120*time.Second)
	cut := fixtures.NewCutter()
	cfgA := c.ClientConfig()
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	evA := collectEvents(a)
	b := c.Client(t)
	watcher := c.Client(t)
	const delay = 2 * time.Second
	const rw = client.Read | client.Write | client.Create

	mustOpen(t, ctx, a, c.Name("a-alive"), rw|client.Ephemeral, client.WithContents([]byte("a")))
	lockA := mustOpen(t, ctx, a, c.Name("lock"), rw, client.WithLockDelay(delay))
	if ok, err := lockA.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("a acquires: %v %v", ok, err)
	}
	lockB := mustOpen(t, ctx, b, c.Name("lock"), rw)
	got := make(chan time.Time, 1)
	go func() {
		if err := lockB.Acquire(ctx, client.Exclusive); err != nil {
			t.Errorf("b acquire: %v", err)
		}
		got <- time.Now()
	}()
	pollUntil(t, 10*time.Second, "b queued", func() bool { s, _ := lockB.GetStat(ctx); return s.LockWaiters == 1 })

	cut.Cut()
	// The ephemeral file vanishes with the session.
	pollUntil(t, 20*time.Second, "ephemeral file deleted", func() bool {
		_, err := watcher.Open(ctx, c.Name("a-alive"), client.Read)
		return errors.Is(err, client.ErrNotFound)
	})
	st, err := lockB.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gotAt time.Time
	if st.LockHolders == 1 && st.LockDelayUntil.IsZero() {
		t.Fatalf("lock changed hands without lock-delay: %+v", st)
	}
	gotAt = <-got
	st2, err := lockB.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st2.LockDelayUntil.IsZero() {
		t.Fatalf("no lock-delay recorded after the holder's session expired: %+v", st2)
	}
	if gotAt.Before(st2.LockDelayUntil) {
		t.Fatalf("b got the lock at %v, before the lock-delay ended at %v", gotAt, st2.LockDelayUntil)
	}
	if st2.LockHolders != 1 || st2.LockGen <= st.LockGen && st.LockHolders == 1 {
		t.Fatalf("after hand-off: %+v (before %+v)", st2, st)
	}
	// The cut-off client: jeopardy, then expired; calls fail typed.
	evA.waitFor(t, client.Jeopardy, 10*time.Second)
	evA.waitFor(t, client.Expired, 10*time.Second)
	cut.Heal()
	if _, err := lockA.GetStat(ctx); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("call after expiry: %v", err)
	}
	if _, err := a.Open(ctx, c.Name("x"), rw); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("open after expiry: %v", err)
	}
}

// A clean Close of the session (and a clean Release) hands the lock on at
// once: no lock-delay.
func TestCleanReleaseHasNoLockDelay(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second, DefaultLockDelay: time.Minute})
	ctx := ctxT(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	la := mustOpen(t, ctx, a, c.Name("l"), rw)
	lb := mustOpen(t, ctx, b, c.Name("l"), rw)
	if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- lb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "b queued", func() bool { s, _ := lb.GetStat(ctx); return s.LockWaiters == 1 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// With a one-minute lock-delay, getting the lock inside this test's
	// deadline proves the clean close imposed none.
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	st, _ := lb.GetStat(ctx)
	if !st.LockDelayUntil.IsZero() {
		t.Fatalf("clean close imposed a lock-delay: %+v", st)
	}
}

// The master dies while clients hold locks: every client hears of the
// fail-over (and, if the election outlasted its local lease, jeopardy then
// safe), keeps its session, its handles and its locks; no lock changes
// hands; the new master finishes its KeepAlive-only recovery.
func TestMasterFailoverKeepsSessionsAndLocks(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create
	type holder struct {
		cl      *client.Client
		ev      *eventLog
		h       *client.Handle
		session uint64
		gen     uint64
	}
	var hs []holder
	for i := range 4 {
		cl := c.Client(t)
		ev := collectEvents(cl)
		h := mustOpen(t, ctx, cl, c.Name("lock"+string(rune('0'+i))), rw)
		if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatal(ok, err)
		}
		st, err := h.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, holder{cl, ev, h, cl.Session(), st.LockGen})
	}
	old := c.StopMaster()
	for _, x := range hs {
		x.ev.waitFor(t, client.MasterFailover, 30*time.Second)
	}
	for i, x := range hs {
		st, err := x.h.GetStat(ctx)
		if err != nil {
			t.Fatalf("client %d after fail-over: %v", i, err)
		}
		if st.LockGen != x.gen || st.LockHolders != 1 || x.cl.Session() != x.session {
			t.Fatalf("client %d: lock gen %d->%d holders %d session %d->%d", i, x.gen, st.LockGen, st.LockHolders, x.session, x.cl.Session())
		}
		// The lock is still this handle's: another client cannot take it.
		other := c.Client(t)
		oh := mustOpen(t, ctx, other, x.h.Name(), client.Read|client.Write)
		if ok, err := oh.TryAcquire(ctx, client.Exclusive); ok || err != nil {
			t.Fatalf("lock %d changed hands after fail-over: %v %v", i, ok, err)
		}
		oh.Close()
		if err := x.h.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		kinds := x.ev.kinds()
		for j, k := range kinds {
			if k == client.Jeopardy && !containsAfter(kinds, j, client.Safe) {
				t.Fatalf("client %d: jeopardy without safe: %v", i, kinds)
			}
			if k == client.Expired {
				t.Fatalf("client %d expired in a fail-over: %v", i, kinds)
			}
		}
	}
	m := c.WaitForMaster(10 * time.Second)
	if m == old {
		t.Fatal("master did not change")
	}
	pollUntil(t, 10*time.Second, "recovery finished", func() bool {
		rec, _ := c.Server(m).Master().Recovering()
		return !rec
	})
}

func containsAfter(ks []client.EventKind, i int, k client.EventKind) bool {
	for _, x := range ks[i+1:] {
		if x == k {
			return true
		}
	}
	return false
}

// The cell unreachable for longer than lease + grace: the client reports
// Expired, calls fail with ErrSessionExpired, and its locks are free on the
// cell after the lock-delay.
func TestUnreachableLongerThanGraceExpires(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 120*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, 1500*time.Millisecond, time.Second
	a := c.ClientWith(t, cfg)
	ev := collectEvents(a)
	const rw = client.Read | client.Write | client.Create
	la := mustOpen(t, ctx, a, c.Name("l"), rw, client.WithLockDelay(500*time.Millisecond))
	if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	cut.Cut()
	ev.waitFor(t, client.Jeopardy, 10*time.Second)
	ev.waitFor(t, client.Expired, 10*time.Second)
	// Cut off the whole time: nothing may have called the session safe.
	for _, k := range ev.kinds() {
		if k == client.Safe {
			t.Fatalf("safe while cut off: %v", ev.kinds())
		}
	}
	if _, err := la.GetStat(ctx); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("call after expiry: %v", err)
	}
	b := c.Client(t)
	lb := mustOpen(t, ctx, b, c.Name("l"), rw)
	if err := lb.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatalf("lock not freed after expiry: %v", err)
	}
	cut.Heal()
	if _, err := la.GetStat(ctx); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("call after heal: %v", err)
	}
}

// KeepAlive for unknown and expired sessions, and calls with a stale
// epoch, get clear typed errors.
func TestKeepAliveUnknownSessionAndStaleEpoch(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	m := c.Server(c.WaitForMaster(10 * time.Second))
	call := func(h wire.Header, req any) wire.Status {
		t.Helper()
		st, err := fixtures.RawCall(ctx, m.ClientAddr(), &h, req)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := call(wire.Header{Method: wire.MethodKeepAlive, Session: 1 << 50}, &wire.KeepAliveRequest{}); st.Code != wire.CodeUnknownSession {
		t.Fatalf("keepalive of an unknown session: %+v", st)
	}
	cl := c.Client(t)
	id := cl.Session()
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if st := call(wire.Header{Method: wire.MethodKeepAlive, Session: id}, &wire.KeepAliveRequest{}); st.Code != wire.CodeSessionExpired {
		t.Fatalf("keepalive of a closed session: %+v", st)
	}
	live := c.Client(t)
	_, epoch := m.IsMaster()
	st := call(wire.Header{Method: wire.MethodGetStat, Session: live.Session(), Epoch: epoch + 7}, &wire.HandleRequest{Handle: 1})
	if st.Code != wire.CodeBadEpoch || st.Epoch != epoch {
		t.Fatalf("stale epoch: %+v", st)
	}
}

// The election recipe (client.Campaign): candidates open the election's
// file and Acquire; the winner writes its identity as contents, which
// everyone reads as the leader; when the winner's session ends cleanly,
// the next candidate wins and takes over at once, also after the file's
// creator has gone.
func TestElectionRecipe(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 120*time.Second)
	name := c.Name("leader")
	type win struct {
		id string
		cl *client.Client
	}
	won := make(chan win, 3)
	for _, id := range []string{"alpha", "beta", "gamma"} {
		cl := c.Client(t)
		go func() {
			_, err := recipe.Campaign(ctx, cl, name, []byte(id), client.WithLockDelay(200*time.Millisecond))
			if err != nil {
				if !errors.Is(err, client.ErrClosed) && ctx.Err() == nil {
					t.Errorf("%s: %v", id, err)
				}
				return
			}
			won <- win{id, cl}
		}()
	}
	observer := c.Client(t)
	seen := map[string]bool{}
	for range 3 {
		w := <-won
		if seen[w.id] {
			t.Fatalf("%s won twice", w.id)
		}
		seen[w.id] = true
		leader, err := recipe.Leader(ctx, observer, name)
		if err != nil || string(leader) != w.id {
			t.Fatalf("observer sees leader %q (%v), want %q", leader, err, w.id)
		}
		select {
		case other := <-won:
			t.Fatalf("%s won while %s leads", other.id, w.id)
		default:
		}
		w.cl.Close() // the leader's session ends
	}
}

// Operators can list live sessions: who, lease remaining, handles, locks.
func TestListSessions(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	cfg := c.ClientConfig()
	cfg.ClientName = "holder"
	a := c.ClientWith(t, cfg)
	h := mustOpen(t, ctx, a, c.Name("l"), client.Read|client.Write|client.Create)
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	b := c.Client(t)
	list, err := admin.New(b).Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		if s.ID == a.Session() {
			found = true
			if s.Client != "holder" || s.Handles != 1 || len(s.Locks) != 1 || s.Locks[0] != c.Name("l") ||
				s.Lease <= 0 || s.Lease > 5*time.Second {
				t.Fatalf("session info %+v", s)
			}
		}
	}
	if !found || len(list) < 2 {
		t.Fatalf("sessions %+v", list)
	}
}

// Close ends a session without an Expired event: the master answers the
// KeepAlive parked at Close time as "expired or closed", and the client
// used to pass that on to the application as an expiry it never had
// (found by safety.TestSessionsSurviveShortFailovers: 3 to 5 clean closes
// in 10). Each client closes while its first KeepAlive is parked.
func TestCloseIsNotAnExpiry(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	const clients = 12
	for i := range clients {
		cl, err := client.Dial(ctx, c.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		ev, closed := collectEventsUntilClosed(cl)
		if err := cl.Close(); err != nil {
			t.Fatalf("client %d: close: %v", i, err)
		}
		<-closed // Close closes the event channel
		for _, k := range ev.kinds() {
			if k == client.Expired {
				t.Fatalf("client %d: Expired after a clean Close (events %v)", i, ev.kinds())
			}
		}
	}
}
