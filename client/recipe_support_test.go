package client_test

import (
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A watched read is followed by news of the next change: a write, a lock
// taken and a lock freed by another client each reach WatchInvalidations
// before the change completes, and only a read that came back watched
// promises it. The watch's channel closes with stop, and with the Client.
func TestWatchInvalidations(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("watched")
	w := c.Client(t)
	other := c.Client(t)
	ho := open(t, ctx, other, name, rwc)
	h := open(t, ctx, w, name, client.Read)
	changed, stop := w.WatchInvalidations("watched") // relative, as Open
	defer stop()

	hear := func(what string, change func()) {
		t.Helper()
		_, _, watched, err := h.GetContentsAndStatWatched(ctx)
		for err == nil && !watched { // a change still in flight: not promised yet
			time.Sleep(10 * time.Millisecond)
			_, _, watched, err = h.GetContentsAndStatWatched(ctx)
		}
		if err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		select { // a wake left from an earlier change
		case <-changed:
		default:
		}
		change()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no invalidation heard", what)
		}
	}
	hear("a write", func() {
		if err := ho.SetContents(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	})
	hear("a lock taken", func() { acquire(t, ctx, ho) })
	hear("a lock freed", func() {
		if err := ho.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	stop()
	stop() // harmless
	waitClosed(t, changed, "after stop")
	again, stopAgain := w.WatchInvalidations(name)
	defer stopAgain()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, again, "after the Client's Close")
	late, stopLate := w.WatchInvalidations(name)
	defer stopLate()
	waitClosed(t, late, "watching on a closed Client")
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the watch's channel is still open", what)
		}
	}
}
