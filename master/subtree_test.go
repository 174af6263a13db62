package master

import (
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// subtreeSetup makes a session with the directory /ls/c/d open and a file
// /ls/c/d/e/f below it, and returns the session, the directory's handle
// and the file's.
func subtreeSetup(t *testing.T, m *testMaster) (sess, dir, file uint64) {
	t.Helper()
	resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sess = resp.(*wire.CreateSessionResponse).Session
	open := func(seq uint64, path string, flags uint32) uint64 {
		resp, err := m.call(sess, seq, wire.MethodOpen, &wire.OpenRequest{Path: path, Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate | flags})
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		return resp.(*wire.OpenResponse).Handle
	}
	dir = open(1, "/ls/c/d", wire.OpenDirectory)
	open(2, "/ls/c/d/e", wire.OpenDirectory)
	file = open(3, "/ls/c/d/e/f", 0)
	return sess, dir, file
}

func (m *testMaster) watchSubtree(t *testing.T, sess uint64, req *wire.WatchSubtreeRequest) (*wire.WatchSubtreeResponse, error) {
	t.Helper()
	resp, err := m.call(sess, 0, wire.MethodWatchSubtree, req)
	if err != nil {
		return nil, err
	}
	return resp.(*wire.WatchSubtreeResponse), nil
}

// A WatchSubtree call that finds nothing after its position waits, and a
// change applied at any moment after the call began (before it looked,
// while it looked, or while it waits) ends the wait with that change: the
// wait channel is taken in the view that found nothing, so there is no
// seam where a change goes unseen. A wait that runs out answers no change
// and the position after the last applied entry (progress), which a
// later call resumes from without missing the next change; changes
// outside the directory move that position on but are not reported.
func TestWatchSubtreeWaitsWithoutASeam(t *testing.T) {
	m := newTestMaster(t)
	sess, dir, file := subtreeSetup(t, m)
	now, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, Now: true})
	if err != nil || len(now.Changes) != 0 {
		t.Fatalf("Now: %+v, %v", now, err)
	}
	for i := range 20 {
		type answer struct {
			r   *wire.WatchSubtreeResponse
			err error
		}
		got := make(chan answer, 1)
		from := now.Next
		go func() {
			r, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: from, WaitMillis: 60_000})
			got <- answer{r, err}
		}()
		if i%2 == 0 { // half the writes once the call is counted (maybe waiting), half at once
			eventually(t, "the call is in progress", func() bool { return m.polls.inProgress() == 1 })
		}
		if _, err := m.call(sess, uint64(10+i), wire.MethodSetContents, &wire.SetContentsRequest{Handle: file, Contents: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		var a answer
		select {
		case a = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("write %d: the waiting call never heard of it", i)
		}
		if a.err != nil || len(a.r.Changes) != 1 || a.r.Changes[0].Path != "/ls/c/d/e/f" || a.r.Changes[0].Kind != wire.SubtreeContents {
			t.Fatalf("write %d: %+v, %v", i, a.r, a.err)
		}
		now.Next = a.r.Next
	}

	// A wait that runs out: no change, the progress position.
	got := make(chan *wire.WatchSubtreeResponse, 1)
	go func() {
		r, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: now.Next, WaitMillis: 1000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	eventually(t, "the call is in progress", func() bool { return m.polls.inProgress() == 1 })
	// A change elsewhere wakes it, and it waits on.
	if _, err := m.call(sess, 98, wire.MethodOpen, &wire.OpenRequest{Path: "/ls/c/other", Flags: wire.OpenRead | wire.OpenCreate}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the call waits", func() bool { m.clock.Advance(time.Second); return len(got) == 1 })
	idle := <-got
	if len(idle.Changes) != 0 || idle.Compacted || idle.Next.Index <= now.Next.Index {
		t.Fatalf("idle wait: %+v after %+v, want no change and a later position", idle, now.Next)
	}
	if _, err := m.call(sess, 99, wire.MethodSetContents, &wire.SetContentsRequest{Handle: file, Contents: []byte("z")}); err != nil {
		t.Fatal(err)
	}
	r, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: idle.Next})
	if err != nil || len(r.Changes) != 1 {
		t.Fatalf("after the progress position: %+v, %v", r, err)
	}
	m.read(func(v fsm.View) {
		if n := v.HistoryStats().Waiting; n != 0 {
			t.Errorf("%d directories still waited on once every call ended", n)
		}
	})
}

// Calls in progress are bounded per session, each refused past it with
// TooMany, and counted down as they end; a file handle, or a position the
// history does not reach, is answered as such.
func TestWatchSubtreeBoundsAndAnswers(t *testing.T) {
	m := newTestMaster(t)
	sess, dir, file := subtreeSetup(t, m)
	done := make(chan error, maxSubtreePollsPerSession)
	for range maxSubtreePollsPerSession {
		go func() {
			_, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: wire.SubtreePos{Index: 1 << 40}, WaitMillis: 60_000})
			done <- err
		}()
	}
	// Each of those is answered Compacted at once (a position ahead of
	// the log), so park them on a real position instead.
	for range maxSubtreePollsPerSession {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	now, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, Now: true})
	if err != nil {
		t.Fatal(err)
	}
	for range maxSubtreePollsPerSession {
		go func() {
			_, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: now.Next, WaitMillis: 60_000})
			done <- err
		}()
	}
	eventually(t, "every call waits", func() bool { return m.polls.inProgress() == maxSubtreePollsPerSession })
	if _, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: now.Next, WaitMillis: 60_000}); codeOf(err) != wire.CodeTooMany {
		t.Fatalf("a call past the session's bound: %v, want TooMany", err)
	}
	if _, err := m.call(sess, 50, wire.MethodSetContents, &wire.SetContentsRequest{Handle: file, Contents: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	for range maxSubtreePollsPerSession {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the calls are counted down", func() bool { return m.polls.inProgress() == 0 })
	m.read(func(v fsm.View) {
		if n := v.HistoryStats().Waiting; n != 0 {
			t.Errorf("%d directories still waited on once every call ended", n)
		}
	})

	if _, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: file}); codeOf(err) != wire.CodeNotDir {
		t.Fatalf("a file handle: %v, want NotDir", err)
	}
	r, err := m.watchSubtree(t, sess, &wire.WatchSubtreeRequest{Handle: dir, After: wire.SubtreePos{Index: 1 << 40}})
	if err != nil || !r.Compacted || r.Next != now.Next && r.Next.Index < now.Next.Index {
		t.Fatalf("a position ahead of the log: %+v, %v, want Compacted and the current position", r, err)
	}
}
