package cell_test

import (
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// Handles opened WithEvents hear of changes made by other clients:
// contents modified, child added and removed, lock acquired, conflicting
// lock requests, and deletion (handle invalid). Handles that did not ask
// hear nothing. Handle events arrive on the handles' own streams, never
// on Client.Events.
func TestHandleEvents(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	watcher, quiet, actor := c.Client(t), c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, actor, c.Name("d"), rw|client.Directory).Close()
	mustOpen(t, ctx, actor, c.Name("d/f"), rw).Close()
	sess := collectEvents(watcher)
	qev := collectEvents(quiet)
	wd := mustOpen(t, ctx, watcher, c.Name("d"), client.Read|client.Directory, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
	wf := mustOpen(t, ctx, watcher, c.Name("d/f"), rw, client.WithEvents(client.OnContentsModified|client.OnLockAcquired|client.OnConflictingLock|client.OnHandleInvalid))
	ev := collectHandleEvents(wd, wf)
	qh := mustOpen(t, ctx, quiet, c.Name("d/f"), client.Read)
	qhev := collectHandleEvents(qh)

	f := mustOpen(t, ctx, actor, c.Name("d/f"), rw)
	if err := f.SetContents(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, client.ContentsModified, 10*time.Second)
	mustOpen(t, ctx, actor, c.Name("d/g"), rw).Close()
	ev.waitFor(t, client.ChildAdded, 10*time.Second)
	if ok, err := f.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ev.waitFor(t, client.LockAcquired, 10*time.Second)
	other := mustOpen(t, ctx, quiet, c.Name("d/f"), client.Read|client.Write)
	if ok, err := other.TryAcquire(ctx, client.Exclusive); ok || err != nil {
		t.Fatal(ok, err)
	}
	ev.waitFor(t, client.ConflictingLock, 10*time.Second)
	f.Release(ctx)
	if err := f.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, client.HandleInvalid, 10*time.Second)
	ev.waitFor(t, client.ChildRemoved, 10*time.Second)
	ev.mu.Lock()
	for _, e := range ev.evs {
		switch e.Kind {
		case client.ChildAdded:
			if e.Path != c.Name("d") || e.Child != "g" {
				t.Errorf("child added: %+v", e)
			}
		case client.ChildRemoved:
			if e.Path != c.Name("d") || e.Child != "f" {
				t.Errorf("child removed: %+v", e)
			}
		case client.ContentsModified, client.LockAcquired, client.ConflictingLock, client.HandleInvalid:
			if e.Path != c.Name("d/f") {
				t.Errorf("%v on %q", e.Kind, e.Path)
			}
		}
	}
	ev.mu.Unlock()
	if k := qhev.kinds(); len(k) != 0 {
		t.Fatalf("a handle that asked for no events got %v", k)
	}
	for _, l := range []*eventLog{sess, qev} {
		for _, k := range l.kinds() {
			if k != client.MasterFailover {
				t.Fatalf("Client.Events carried %v; handle events belong on Handle.Events", l.kinds())
			}
		}
	}
}

// collectHandleEvents records the events of the handles' own streams, in
// one log, until they close.
func collectHandleEvents(hs ...*client.Handle) *eventLog {
	l := &eventLog{cond: make(chan struct{}, 1)}
	for _, h := range hs {
		go func() {
			for ev := range h.Events() {
				l.mu.Lock()
				l.evs = append(l.evs, ev)
				l.mu.Unlock()
				select {
				case l.cond <- struct{}{}:
				default:
				}
			}
		}()
	}
	return l
}

// Raw watchers that never take their events cannot make the master hold
// more queued events than its budgets: one principal's sessions, each
// with a hundred handles watching a file, fill the principal's share and
// no more, while an honest watcher of another principal still hears of
// every write; a second such principal fills the process's budget, and
// then the honest watcher is told it missed events (an Overflow) rather
// than left to guess. The master keeps its leadership throughout.
func TestEventBudgetBoundsRawWatchers(t *testing.T) {
	const perPrincipal, total = 64 << 10, 100 << 10
	set := fixtures.TestCerts(t, "bob", "mallory", "eve")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: time.Minute,
		SessionLimits: master.Limits{EventBytes: total, EventBytesPerPrincipal: perPrincipal}})
	ctx := ctxT(t, 3*time.Minute)
	mi := c.WaitForMaster(30 * time.Second)
	m := c.Server(mi).Master()
	_, epoch := m.Serving()
	name := c.Name("f")
	writer := c.Client(t) // the admin
	hw := mustOpen(t, ctx, writer, name, client.Read|client.Write|client.Create, client.WithContents([]byte("v0")))

	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	ev := collectHandleEvents(mustOpen(t, ctx, bob, name, client.Read, client.WithEvents(client.OnContentsModified)))

	// watchers opens, for user, four raw sessions of a hundred handles
	// each watching the file; they never send a KeepAlive.
	watchers := func(user string) {
		var wg sync.WaitGroup
		for range 4 {
			r := dialRawSession(t, ctx, c.Addrs()[mi], set.ClientTLS(t, user))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					var open wire.OpenResponse
					if st, err := r.try(ctx, wire.MethodOpen, &wire.OpenRequest{Path: name, Flags: wire.OpenRead,
						EventMask: wire.MaskContentsModified}, &open); err != nil || st.Code != wire.CodeOK {
						t.Errorf("%s's open: %+v %v", user, st, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	write := func(v string) {
		if err := hw.SetContents(ctx, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	heard := func(k client.EventKind) int {
		n := 0
		for _, x := range ev.kinds() {
			if x == k {
				n++
			}
		}
		return n
	}

	// mallory's 400 watchers could queue 400 events a write: her share
	// holds about 240.
	watchers("mallory")
	write("v1")
	deadline := time.Now().Add(30 * time.Second)
	for heard(client.ContentsModified) < 1 || m.EventStats().OverPrincipal == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("bob heard %v; master %+v", ev.kinds(), m.EventStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := m.EventStats(); st.QueuedBytes-st.ForcedBytes > perPrincipal+int64(len(name))+1024 || st.OverProcess != 0 || heard(client.Overflow) != 0 {
		t.Fatalf("after mallory's watchers heard of a write: %+v, bob heard %v; want mallory held to her share of %d bytes and bob not crowded out",
			st, ev.kinds(), perPrincipal)
	}

	// eve's watchers fill what is left of the process's budget; a second
	// session of bob's, made after them, then finds no room (the fan-out
	// takes a change's watchers session by session, oldest first).
	watchers("eve")
	bob2 := c.ClientWith(t, c.ClientConfigAs("bob"))
	ev2 := collectHandleEvents(mustOpen(t, ctx, bob2, name, client.Read, client.WithEvents(client.OnContentsModified)))
	write("v2")
	ev2.waitFor(t, client.Overflow, 30*time.Second)
	st := m.EventStats()
	if st.PeakBytes > total || st.QueuedBytes-st.ForcedBytes > total || st.OverProcess == 0 {
		t.Fatalf("the master's queued events: %+v; want at most %d bytes of handle events, and drops over the process's budget", st, total)
	}
	t.Logf("queued events: %d bytes (%d of them overflows), peak %d; dropped %d over a principal's share, %d over the process's budget",
		st.QueuedBytes, st.ForcedBytes, st.PeakBytes, st.OverPrincipal, st.OverProcess)
	if ok, e := m.Serving(); !ok || e != epoch {
		t.Fatalf("the master serves %v at epoch %d; it served epoch %d before the watchers came", ok, e, epoch)
	}
}
