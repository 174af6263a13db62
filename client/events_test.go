package client_test

import (
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// drain reads what ch holds now, without waiting.
func drain(ch <-chan client.Event) []client.Event {
	var out []client.Event
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

// next waits for the next event on ch.
func next(t *testing.T, ch <-chan client.Event, within time.Duration, what string) client.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the stream was closed", what)
		}
		return e
	case <-time.After(within):
		t.Fatalf("%s: no event within %v", what, within)
	}
	return client.Event{}
}

// A consumer that does not read its handle's events is never dropped on
// silently: each stream keeps its buffer of events, in order, with
// positions that only grow, and then one Overflow event; a re-read then
// returns the latest state, and the stream carries on once read. Handle
// events never reach Client.Events. Closing the handle closes its stream;
// a handle opened without WithEvents has a stream too, quiet until closed.
func TestEventsOverflowNeverSilent(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 90*time.Second)
	name := c.Name("busy")
	a := c.Client(t)
	w := c.Client(t)
	wh := open(t, ctx, w, name, rwc)
	// Five handles hear of every write; writes alone overflow each handle.
	const handles, writes = 5, 70
	if writes <= client.HandleEventBuffer+1 {
		t.Fatal("the test no longer overflows the buffers")
	}
	var hs []*client.Handle
	for range handles {
		hs = append(hs, open(t, ctx, a, name, client.Read, client.WithEvents(client.OnContentsModified)))
	}
	var last client.Stat
	for i := range writes {
		var err error
		if last, err = wh.SetContentsAndStat(ctx, fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Deliveries are asynchronous, and in order: once a's handle on
	// another file hears of a write made after them, a has heard of all.
	marker := open(t, ctx, a, c.Name("marker"), rwc, client.WithEvents(client.OnContentsModified))
	mw := open(t, ctx, w, c.Name("marker"), client.Write)
	if err := mw.SetContents(ctx, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if e := next(t, marker.Events(), 30*time.Second, "the marker"); e.Kind != client.ContentsModified {
		t.Fatalf("marker: %+v", e)
	}

	check := func(what string, evs []client.Event, keep int) {
		t.Helper()
		if len(evs) != keep+1 {
			t.Fatalf("%s: %d events, want %d kept and an overflow", what, len(evs), keep)
		}
		var prev client.Event
		for i, e := range evs[:keep] {
			if e.Kind != client.ContentsModified || e.Path != name || e.Epoch == 0 || e.Instance == 0 || e.ContentGen == 0 {
				t.Fatalf("%s: event %d is %+v", what, i, e)
			}
			if i > 0 && (e.Instance != prev.Instance || e.Epoch < prev.Epoch || e.ContentGen < prev.ContentGen) {
				t.Fatalf("%s: event %d at %+v went back from %+v", what, i, e, prev)
			}
			prev = e
		}
		o := evs[keep]
		if o.Kind != client.Overflow || o.Missed != client.ContentsModified || o.Path != name || o.ContentGen < prev.ContentGen {
			t.Fatalf("%s: last event %+v, want an overflow past %+v", what, o, prev)
		}
	}
	// Client.Events carries session events only.
	if sess := drain(a.Events()); len(sess) != 0 {
		t.Fatalf("Client.Events carried %d events (first %+v); handle events belong on Handle.Events", len(sess), sess[0])
	}
	for i, h := range hs {
		evs := drain(h.Events())
		check(fmt.Sprintf("handle %d", i), evs, client.HandleEventBuffer)
		if evs[client.HandleEventBuffer-1].ContentGen >= last.ContentGen {
			t.Fatalf("handle %d kept the last write's event, so nothing was lost: the test proves nothing", i)
		}
		// The re-read the overflow asks for sees the latest write.
		data, st, err := h.GetContentsAndStat(ctx)
		if err != nil || string(data) != fmt.Sprintf("v%d", writes-1) || st.ContentGen != last.ContentGen {
			t.Fatalf("handle %d re-read %q gen %d (%v), want v%d gen %d", i, data, st.ContentGen, err, writes-1, last.ContentGen)
		}
	}

	// Read, the streams carry on.
	st, err := wh.SetContentsAndStat(ctx, []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		e := next(t, h.Events(), 20*time.Second, fmt.Sprintf("handle %d after the overflow", i))
		if e.Kind != client.ContentsModified || e.ContentGen != st.ContentGen {
			t.Fatalf("handle %d after the overflow: %+v, want contents-modified at gen %d", i, e, st.ContentGen)
		}
	}
	if sess := drain(a.Events()); len(sess) != 0 {
		t.Fatalf("Client.Events carried %+v", sess)
	}

	hs[0].Close()
	waitUntil(t, 10*time.Second, "the closed handle's stream closed", func() bool {
		select {
		case _, ok := <-hs[0].Events():
			return !ok
		default:
			return false
		}
	})
	plain := open(t, ctx, a, name, client.Read)
	if plain.Events() == nil {
		t.Fatal("a handle opened without events has no stream")
	}
	if evs := drain(plain.Events()); len(evs) != 0 {
		t.Fatalf("a handle opened without events heard %+v", evs)
	}
	plain.Close()
	waitUntil(t, 10*time.Second, "the plain handle's stream closed", func() bool {
		select {
		case _, ok := <-plain.Events():
			return !ok
		default:
			return false
		}
	})
}

// Positions carry every kind of handle event: a lock granted carries the
// new lock generation, and the events of one node never go back.
func TestEventPositions(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("pos")
	a := c.Client(t)
	w := c.Client(t)
	wh := open(t, ctx, w, name, rwc)
	h := open(t, ctx, a, name, client.Read, client.WithEvents(client.OnContentsModified|client.OnLockAcquired))
	st1, err := wh.SetContentsAndStat(ctx, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, ctx, wh)
	st2, err := wh.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e1 := next(t, h.Events(), 20*time.Second, "contents")
	e2 := next(t, h.Events(), 20*time.Second, "lock")
	if e1.Kind != client.ContentsModified || e1.ContentGen != st1.ContentGen || e1.Instance != st1.Instance {
		t.Fatalf("contents event %+v, stat %+v", e1, st1)
	}
	if e2.Kind != client.LockAcquired || e2.LockGen != st2.LockGen || e2.ContentGen != st1.ContentGen || e2.Epoch != e1.Epoch {
		t.Fatalf("lock event %+v after %+v, stat %+v", e2, e1, st2)
	}
	if e2.LockGen <= e1.LockGen {
		t.Fatalf("the lock generation did not grow: %d then %d", e1.LockGen, e2.LockGen)
	}
}

// After a fail-over the session survives, every handle opened WithEvents
// hears a Reannounce carrying the new epoch and the last position it
// heard, and later events carry the new epoch.
func TestReannounceAfterFailover(t *testing.T) {
	const lease = 5 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := testCtx(t, 90*time.Second)
	name := c.Name("re")
	a := c.Client(t)
	ev := watchEvents(a)
	w := c.Client(t)
	wh := open(t, ctx, w, name, rwc)
	h := open(t, ctx, a, name, client.Read, client.WithEvents(client.OnContentsModified))
	st, err := wh.SetContentsAndStat(ctx, []byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	before := next(t, h.Events(), 20*time.Second, "the write before the fail-over")
	if before.ContentGen != st.ContentGen {
		t.Fatalf("event %+v, stat %+v", before, st)
	}
	waitUntil(t, 2*lease, "a fresh KeepAlive", func() bool {
		end, jeopardy := a.LeaseEnd()
		return !jeopardy && time.Until(end) > lease*3/4
	})
	c.StopMaster()
	re := next(t, h.Events(), 40*time.Second, "the re-announce")
	if re.Kind != client.Reannounce || re.Path != name || re.Epoch <= before.Epoch ||
		re.Instance != before.Instance || re.ContentGen != before.ContentGen {
		t.Fatalf("after the fail-over: %+v, before %+v", re, before)
	}
	waitUntil(t, 10*time.Second, "the fail-over event", func() bool { return ev.has(client.MasterFailover) })
	if ev.has(client.Reannounce) {
		t.Fatal("Client.Events got a Reannounce; it belongs on handle streams")
	}
	st, err = wh.SetContentsAndStat(ctx, []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		e := next(t, h.Events(), 20*time.Second, "the write after the fail-over")
		if e.Kind == client.Reannounce { // a recovery from jeopardy may add one
			continue
		}
		if e.Kind != client.ContentsModified || e.ContentGen != st.ContentGen || e.Epoch < re.Epoch {
			t.Fatalf("after the fail-over: %+v, stat %+v, re-announce %+v", e, st, re)
		}
		break
	}
}

// A session that comes back from jeopardy re-announces its handles too:
// the application cannot know whether anything was missed meanwhile.
func TestReannounceAfterJeopardy(t *testing.T) {
	const lease = 2 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := testCtx(t, 60*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer = cut.Dial
	a := c.ClientWith(t, cfg)
	ev := watchEvents(a)
	h := open(t, ctx, a, c.Name("j"), rwc, client.WithEvents(client.OnContentsModified))
	cut.Cut()
	waitUntil(t, lease+10*time.Second, "jeopardy", func() bool { return ev.has(client.Jeopardy) })
	if evs := drain(h.Events()); len(evs) != 0 {
		t.Fatalf("events before the session was safe again: %+v", evs)
	}
	cut.Heal()
	re := next(t, h.Events(), 20*time.Second, "the re-announce after jeopardy")
	if re.Kind != client.Reannounce || re.Path != h.Name() || re.Epoch == 0 {
		t.Fatalf("after jeopardy: %+v", re)
	}
	waitUntil(t, 10*time.Second, "the Safe event", func() bool { return ev.has(client.Safe) })
}
