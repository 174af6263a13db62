package master

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Applying a write to a node that thousands of handles watch does no work
// for them on the apply path: with the sessions' lock held (so no event
// can be queued), the write's apply returns all the same, and nothing is
// queued until the lock is released. The events the fan-out queues then
// mean what they meant when made on the apply path: each carries the
// node's position just after its own write (not the state the fan-out
// reads later), a session hears of the writes in order, a handle opened
// after a write does not hear of it, and one closed before a write does
// not hear of that write.
func TestApplyDoesNoWorkForWatchers(t *testing.T) {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	cons := &localConsensus{fsm: sm}
	m := newTestMasterOn(t, cons, sm)
	writer, wh := m.sessionWithFile(t)

	const sessions, perSession = 8, 250
	type watch struct{ session, handle uint64 }
	var watches []watch
	for range sessions {
		s, ids := watchingSession(t, m, perSession)
		for _, id := range ids {
			watches = append(watches, watch{s, id})
		}
	}
	// apply applies a command straight to the state, as Raft would once
	// it committed, without the master's call path.
	apply := func(session uint64, p fsm.Payload) *fsm.Result {
		t.Helper()
		res, err := cons.Apply(context.Background(), &fsm.Command{Session: session, Time: m.now(),
			Principal: AnonymousPrincipal, Admin: true, Payload: p})
		if err != nil || res.Err != nil {
			t.Fatalf("apply %T: %v %v", p, err, res.Err)
		}
		return res
	}
	contentGen := func() uint64 {
		var g uint64
		m.read(func(v fsm.View) {
			hv, err := v.LookupHandle(writer, wh)
			if err != nil {
				t.Fatal(err)
			}
			g = hv.Stat.ContentGen
		})
		return g
	}

	var unlock sync.Once
	m.sess.mu.Lock()
	release := func() { unlock.Do(m.sess.mu.Unlock) }
	defer release()
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		apply(writer, &fsm.SetContentsArgs{Handle: wh, Contents: []byte("two")})
	}()
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		release() // let the apply finish before the master stops
		<-applied
		t.Fatal("the apply of a write waited for the sessions' lock: the apply path queues the watchers' events itself")
	}
	gen1 := contentGen()
	for _, w := range watches {
		for _, ev := range m.sess.leases[w.session].events {
			if ev.Kind == wire.EventContents {
				t.Fatalf("session %d had an event queued while the sessions' lock was held: %+v", w.session, ev)
			}
		}
	}
	// Between the writes, still holding the lock: a handle opens, one
	// closes.
	late := apply(watches[0].session, &fsm.OpenArgs{Path: "/ls/c/f", Flags: fsm.FlagRead,
		EventMask: wire.MaskContentsModified}).Handle
	gone := watches[1]
	apply(gone.session, &fsm.CloseArgs{Handle: gone.handle})
	apply(writer, &fsm.SetContentsArgs{Handle: wh, Contents: []byte("three")})
	gen2 := contentGen()
	release()

	byHandle := func() map[uint64][]uint64 {
		m.sess.mu.Lock()
		defer m.sess.mu.Unlock()
		out := map[uint64][]uint64{}
		for s := range sessions {
			l := m.sess.leases[watches[s*perSession].session]
			var last uint64
			for _, ev := range l.events {
				if ev.Seq <= last {
					t.Fatalf("events out of order: %d after %d", ev.Seq, last)
				}
				last = ev.Seq
				if ev.Kind == wire.EventContents {
					if ev.Pos == nil {
						t.Fatalf("event without a position: %+v", ev)
					}
					out[ev.Handle] = append(out[ev.Handle], ev.Pos.ContentGen)
				}
			}
		}
		return out
	}
	eventually(t, "the fan-out queues every event", func() bool {
		got := byHandle()
		for _, w := range watches {
			if w != gone && len(got[w.handle]) < 2 {
				return false
			}
		}
		return len(got[late]) > 0
	})
	got := byHandle()
	for _, w := range watches {
		g := got[w.handle]
		switch {
		case w == gone:
			// Closed after the first write: it may have heard of it, as a
			// handle closed just after a change always could; never of
			// the second.
			if len(g) > 1 || len(g) == 1 && g[0] != gen1 {
				t.Fatalf("the handle closed between the writes heard %v; want at most the first write (%d)", g, gen1)
			}
		default:
			if len(g) != 2 || g[0] != gen1 || g[1] != gen2 {
				t.Fatalf("handle %d heard of writes at content generations %v; want [%d %d], each write's own", w.handle, g, gen1, gen2)
			}
		}
	}
	if g := got[late]; len(g) != 1 || g[0] != gen2 {
		t.Fatalf("the handle opened between the writes heard %v; want only the second write (%d)", g, gen2)
	}
}

// A session whose queue holds an overflow event not yet sent costs the
// fan-out nothing per handle: the worker passes over it whole, lists none
// of its handles and queues it nothing more, while a session beside it
// hears every write. Once the session has acknowledged its events (the
// overflow among them), it hears the next write on every handle again.
func TestFanoutPassesOverOverflowingSessions(t *testing.T) {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	cons := &localConsensus{fsm: sm}
	m := newTestMasterOn(t, cons, sm)
	writer, wh := m.sessionWithFile(t)
	const crowd, few = 250, 10
	deaf, _ := watchingSession(t, m, crowd)
	hearing, hearingIDs := watchingSession(t, m, few)
	queued := func(session uint64) (n int, last wire.Event) {
		m.sess.mu.Lock()
		defer m.sess.mu.Unlock()
		evs := m.sess.leases[session].events
		if len(evs) > 0 {
			last = evs[len(evs)-1]
		}
		return len(evs), last
	}
	contents := func(session uint64) map[uint64]int {
		m.sess.mu.Lock()
		defer m.sess.mu.Unlock()
		out := map[uint64]int{}
		for _, ev := range m.sess.leases[session].events {
			if ev.Kind == wire.EventContents {
				out[ev.Handle]++
			}
		}
		return out
	}
	// Fill the deaf session's queue until it ends in an overflow.
	for i := 0; !m.sess.overflowPending(deaf); i++ {
		if i > maxPendingEvents/crowd+2 {
			t.Fatalf("after %d writes of %d events each the session has no overflow queued", i, crowd)
		}
		writeAndWait(t, m, writer, wh, hearing, hearingIDs)
	}
	n0, last0 := queued(deaf)
	if last0.Kind != wire.EventOverflow {
		t.Fatalf("the deaf session's queue ends in %+v; want its overflow", last0)
	}
	before := m.currentFanout().listed.Load()
	const more = 20
	for range more {
		writeAndWait(t, m, writer, wh, hearing, hearingIDs)
	}
	if got := m.currentFanout().listed.Load() - before; got != more*few {
		t.Fatalf("the worker listed %d handles for %d writes; want only the hearing session's %d a write", got, more, few)
	}
	if n, last := queued(deaf); n != n0 || last.Seq != last0.Seq {
		t.Fatalf("the deaf session's queue went from %d events (last %d) to %d (last %d); want it untouched", n0, last0.Seq, n, last.Seq)
	}
	// It acknowledges everything, the overflow with it: it hears again.
	if _, err := m.call(deaf, 0, wire.MethodKeepAlive, &wire.KeepAliveRequest{AckEvent: last0.Seq, Prompt: true}); err != nil {
		t.Fatal(err)
	}
	if m.sess.overflowPending(deaf) {
		t.Fatal("an acknowledged overflow still passes the session over")
	}
	before = m.currentFanout().listed.Load()
	writeAndWait(t, m, writer, wh, hearing, hearingIDs)
	eventually(t, "the session that acknowledged hears the next write on every handle", func() bool {
		return len(contents(deaf)) == crowd
	})
	if got := m.currentFanout().listed.Load() - before; got != crowd+few {
		t.Fatalf("the worker listed %d handles for a write; want both sessions' %d", got, crowd+few)
	}
}

// watchingSession creates a session with n handles on /ls/c/f asking for
// content events, and returns it with the handles' ids.
func watchingSession(t *testing.T, m *testMaster, n int) (session uint64, ids []uint64) {
	t.Helper()
	resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	session = resp.(*wire.CreateSessionResponse).Session
	for j := range n {
		resp, err := m.call(session, uint64(j+1), wire.MethodOpen, &wire.OpenRequest{Path: "/ls/c/f", Flags: wire.OpenRead,
			EventMask: wire.MaskContentsModified})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.(*wire.OpenResponse).Handle)
	}
	return session, ids
}

// writeAndWait writes to the file once and waits until the fan-out is
// done with the write: the hearing session has an event of it on every
// handle. The hearing session then acknowledges all, so it never
// overflows.
func writeAndWait(t *testing.T, m *testMaster, writer, wh, hearing uint64, ids []uint64) {
	t.Helper()
	var gen uint64
	if _, err := m.call(writer, 1_000_000+writeSeq.Add(1), wire.MethodSetContents, &wire.SetContentsRequest{Handle: wh, Contents: []byte(time.Now().String())}); err != nil {
		t.Fatal(err)
	}
	m.read(func(v fsm.View) {
		hv, err := v.LookupHandle(writer, wh)
		if err != nil {
			t.Fatal(err)
		}
		gen = hv.Stat.ContentGen
	})
	var last uint64
	eventually(t, "the hearing session hears the write on every handle", func() bool {
		m.sess.mu.Lock()
		defer m.sess.mu.Unlock()
		heard := map[uint64]bool{}
		for _, ev := range m.sess.leases[hearing].events {
			if ev.Kind == wire.EventContents && ev.Pos != nil && ev.Pos.ContentGen == gen {
				heard[ev.Handle] = true
			}
			last = ev.Seq
		}
		for _, id := range ids {
			if !heard[id] {
				return false
			}
		}
		return true
	})
	if _, err := m.call(hearing, 0, wire.MethodKeepAlive, &wire.KeepAliveRequest{AckEvent: last, Prompt: true}); err != nil {
		t.Fatal(err)
	}
}

// writeSeq numbers writeAndWait's writes (their request ids).
var writeSeq atomic.Uint64

// currentFanout is the term's fan-out.
func (m *testMaster) currentFanout() *fanout {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fan
}
