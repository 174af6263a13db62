package master

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"lockcell/cell/wire"
	"lockcell/replica"
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
	fsm := replica.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	cons := &localConsensus{fsm: fsm}
	m := newTestMasterOn(t, cons, fsm)
	writer, wh := m.sessionWithFile(t)

	const sessions, perSession = 8, 250
	type watch struct{ session, handle uint64 }
	var watches []watch
	for range sessions {
		resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "w"})
		if err != nil {
			t.Fatal(err)
		}
		s := resp.(*wire.CreateSessionResponse).Session
		for j := range perSession {
			resp, err := m.call(s, uint64(j+1), wire.MethodOpen, &wire.OpenRequest{Path: "/ls/c/f", Flags: wire.OpenRead,
				EventMask: wire.MaskContentsModified})
			if err != nil {
				t.Fatal(err)
			}
			watches = append(watches, watch{s, resp.(*wire.OpenResponse).Handle})
		}
	}
	// apply applies a command straight to the state, as Raft would once
	// it committed, without the master's call path.
	apply := func(session uint64, p replica.Payload) *replica.Result {
		t.Helper()
		res, err := cons.Apply(context.Background(), &replica.Command{Session: session, Time: m.now(),
			Principal: AnonymousPrincipal, Admin: true, Payload: p})
		if err != nil || res.Err != nil {
			t.Fatalf("apply %T: %v %v", p, err, res.Err)
		}
		return res
	}
	contentGen := func() uint64 {
		var g uint64
		m.read(func(v replica.View) {
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
		apply(writer, &replica.SetContentsArgs{Handle: wh, Contents: []byte("two")})
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
	late := apply(watches[0].session, &replica.OpenArgs{Path: "/ls/c/f", Flags: replica.FlagRead,
		EventMask: wire.MaskContentsModified}).Handle
	gone := watches[1]
	apply(gone.session, &replica.CloseArgs{Handle: gone.handle})
	apply(writer, &replica.SetContentsArgs{Handle: wh, Contents: []byte("three")})
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
