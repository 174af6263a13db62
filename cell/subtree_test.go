package cell_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
)

// change is what a subtree event says of a node: its name, what happened
// and the generation it happened at.
type change struct {
	path string
	kind client.SubtreeKind
	gen  uint64
}

// subtreeReader collects a watch's events and remembers the last position
// given, as a program saving it to resume from would.
type subtreeReader struct {
	t    *testing.T
	w    *client.SubtreeWatch
	mu   sync.Mutex
	got  []client.SubtreeEvent
	last client.Position
}

// next reads one event (Progress included) within d.
func (r *subtreeReader) next(d time.Duration) (client.SubtreeEvent, bool) {
	r.t.Helper()
	select {
	case ev, ok := <-r.w.Events():
		if !ok {
			return ev, false
		}
		if !r.last.Less(ev.Position) {
			r.t.Errorf("position %s after %s: positions must strictly increase", ev.Position, r.last)
		}
		r.last = ev.Position
		if ev.Kind != client.Progress {
			r.mu.Lock()
			r.got = append(r.got, ev)
			r.mu.Unlock()
		}
		return ev, true
	case <-time.After(d):
		r.t.Fatalf("no subtree event within %v (after %d)", d, len(r.got))
		return client.SubtreeEvent{}, false
	}
}

// until reads until cond holds of the changes got so far.
func (r *subtreeReader) until(what string, d time.Duration, cond func(got []client.SubtreeEvent) bool) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for !cond(r.got) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting until %s (got %d events)", what, len(r.got))
		}
		if _, ok := r.next(time.Until(deadline) + time.Second); !ok {
			r.t.Fatalf("the watch ended waiting until %s: %v", what, r.w.Err())
		}
	}
}

func changesOf(evs []client.SubtreeEvent) []change {
	out := make([]change, len(evs))
	for i, e := range evs {
		out[i] = change{e.Path, e.Kind, e.Generation}
	}
	return out
}

// A subtree watch hears every change below its directory at any depth,
// with strictly increasing positions and the generation each change made:
// a create (the instance), a write (the content generation), a lock grant
// (the lock generation), a transaction's two creates (one entry, two
// ordinals) and a delete (the instance deleted). Changes outside the
// directory are not heard.
func TestSubtreeWatchSeesEveryChangeBelow(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	watcher, actor := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, actor, c.Name("d"), rw|client.Directory).Close()
	mustOpen(t, ctx, actor, c.Name("d/e"), rw|client.Directory).Close()
	dir := mustOpen(t, ctx, watcher, c.Name("d"), client.Read|client.Directory)
	w, err := dir.WatchSubtree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &subtreeReader{t: t, w: w}

	f := mustOpen(t, ctx, actor, c.Name("d/e/f"), rw)
	created, err := f.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.SetContentsAndStat(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	mustOpen(t, ctx, actor, c.Name("outside"), rw).Close()
	if ok, err := f.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	locked, err := f.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.Release(ctx)
	res, err := actor.Txn(ctx).Then(client.OpCreate(c.Name("d/e/t1"), []byte("a")), client.OpCreate(c.Name("d/t2"), []byte("b"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	want := []change{
		{c.Name("d/e/f"), client.NodeCreated, created.Instance},
		{c.Name("d/e/f"), client.NodeContentsChanged, st.ContentGen},
		{c.Name("d/e/f"), client.NodeLockAcquired, locked.LockGen},
		{c.Name("d/e/t1"), client.NodeCreated, res.Generation},
		{c.Name("d/t2"), client.NodeCreated, res.Generation},
		{c.Name("d/e/f"), client.NodeDeleted, created.Instance},
	}
	r.until("every change is heard", 20*time.Second, func(got []client.SubtreeEvent) bool { return len(got) >= len(want) })
	got := changesOf(r.got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("heard\n%v\nwant\n%v", got, want)
	}
	if a, b := r.got[3].Position, r.got[4].Position; a.Index != b.Index || a.Ord+1 != b.Ord {
		t.Errorf("a transaction's changes at %s and %s: want one entry, consecutive ordinals", a, b)
	}
	if p, err := client.ParsePosition(r.got[2].Position.String()); err != nil || p != r.got[2].Position {
		t.Errorf("ParsePosition(%q) = %v, %v", r.got[2].Position, p, err)
	}
	// Closing the handle ends the watch.
	dir.Close()
	for range w.Events() {
	}
	if !errors.Is(w.Err(), client.ErrClosed) {
		t.Fatalf("watch ended with %v, want ErrClosed", w.Err())
	}
}

// A watcher restarted across a master fail-over misses nothing and sees
// nothing twice: writers change files under a directory while a watcher
// reads; the watcher's process goes (its client closed) with a saved
// position, the master is stopped, and a new client resumes from the
// position. What the two watchers heard together is every acknowledged
// write, each once (and nothing that was never attempted).
func TestSubtreeWatchResumesAcrossFailover(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create
	writer := c.Client(t)
	mustOpen(t, ctx, writer, c.Name("w"), rw|client.Directory).Close()
	const files = 4
	var fh []*client.Handle
	for i := range files {
		fh = append(fh, mustOpen(t, ctx, writer, c.Name(fmt.Sprintf("w/x/f%d", i)), rw, client.WithParents()))
	}

	first := c.ClientWith(t, c.ClientConfig())
	dir := mustOpen(t, ctx, first, c.Name("w"), client.Read|client.Directory)
	w, err := dir.WatchSubtree(ctx, client.WithKinds(client.NodeContentsChanged))
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked, tried := map[change]bool{}, map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				tried[fh[i].Name()] = true
				mu.Unlock()
				st, err := fh[i].SetContentsAndStat(ctx, []byte(fmt.Sprint(n)))
				if err != nil {
					continue // not acknowledged: it may or may not have applied
				}
				mu.Lock()
				acked[change{fh[i].Name(), client.NodeContentsChanged, st.ContentGen}] = true
				mu.Unlock()
			}
		}()
	}

	r1 := &subtreeReader{t: t, w: w}
	r1.until("some writes are heard", 20*time.Second, func(got []client.SubtreeEvent) bool { return len(got) >= 20 })
	saved := r1.last.String() // to disk, as it were
	first.Close()             // the watcher's process goes

	c.StopMaster()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	// Writes go on through the fail-over, then stop.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		more := len(acked) - n
		mu.Unlock()
		if more >= 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes after the fail-over", more)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	second := c.Client(t)
	from, err := client.ParsePosition(saved)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := mustOpen(t, ctx, second, c.Name("w"), client.Read|client.Directory)
	w2, err := dir2.WatchSubtree(ctx, client.FromPosition(from), client.WithKinds(client.NodeContentsChanged))
	if err != nil {
		t.Fatal(err)
	}
	r2 := &subtreeReader{t: t, w: w2, last: r1.last}
	mu.Lock()
	defer mu.Unlock()
	seen := map[change]int{}
	for _, e := range r1.got {
		seen[change{e.Path, e.Kind, e.Generation}]++
	}
	counted := 0
	r2.until("every acknowledged write is heard", 60*time.Second, func(got []client.SubtreeEvent) bool {
		for ; counted < len(got); counted++ {
			e := got[counted]
			seen[change{e.Path, e.Kind, e.Generation}]++
		}
		for a := range acked {
			if seen[a] == 0 {
				return false
			}
		}
		return true
	})
	for ch, k := range seen {
		if k != 1 {
			t.Errorf("%v heard %d times", ch, k)
		}
		if !acked[ch] && !tried[ch.path] {
			t.Errorf("%v heard but never written", ch)
		}
	}
	t.Logf("%d acknowledged writes, %d heard before the restart, %d after", len(acked), len(r1.got), len(r2.got))
}

// A watcher that stops reading loses nothing: the watch asks the cell for
// more only as events are taken, so scores of changes made while it
// does not read all come, in order, once it does; a watch stopped there
// and started again from the last position it handled goes on with the
// next change. A position the history no longer reaches is answered
// ErrHistoryCompacted, and a watch that falls that far behind ends with it.
func TestSubtreeWatchSlowReaderAndCompaction(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{Configure: func(cfg *cell.Config) { cfg.HistoryChanges = 120 }})
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create
	cl := c.Client(t)
	f := mustOpen(t, ctx, cl, c.Name("s/f"), rw, client.WithParents())
	dir := mustOpen(t, ctx, cl, c.Name("s"), client.Read|client.Directory)
	w, err := dir.WatchSubtree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	write := func(n int) {
		for i := range n {
			st, err := f.SetContentsAndStat(ctx, []byte(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			gens = append(gens, st.ContentGen)
		}
	}
	write(80) // nobody reads meanwhile
	r := &subtreeReader{t: t, w: w}
	r.until("the first 40 writes", 30*time.Second, func(got []client.SubtreeEvent) bool { return len(got) >= 40 })
	w.Stop()
	at := r.last
	w2, err := dir.WatchSubtree(ctx, client.FromPosition(at))
	if err != nil {
		t.Fatal(err)
	}
	r2 := &subtreeReader{t: t, w: w2, last: at}
	r2.until("the other 40", 30*time.Second, func(got []client.SubtreeEvent) bool { return len(got) >= 40 })
	all := append(append([]client.SubtreeEvent(nil), r.got[:40]...), r2.got...)
	for i, g := range gens {
		if all[i].Generation != g || all[i].Kind != client.NodeContentsChanged {
			t.Fatalf("event %d: %+v, want the write at generation %d", i, all[i], g)
		}
	}
	w2.Stop()

	// 200 more writes: the history (120 changes) has moved past at.
	write(200)
	if _, err := dir.WatchSubtree(ctx, client.FromPosition(at)); !errors.Is(err, client.ErrHistoryCompacted) {
		t.Fatalf("a watch from %s after the history moved on: %v, want ErrHistoryCompacted", at, err)
	}
	if _, err := dir.WatchSubtree(ctx, client.FromPosition(client.Position{Index: 1 << 50})); !errors.Is(err, client.ErrHistoryCompacted) {
		t.Fatalf("a watch from a position ahead of the log: %v, want ErrHistoryCompacted", err)
	}
	// A watch that is not read while the history moves past it ends so:
	// it holds at most the page it took, and the next is compacted.
	w3, err := dir.WatchSubtree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(1)
	r3 := &subtreeReader{t: t, w: w3}
	r3.next(10 * time.Second)
	write(250) // not read meanwhile
	for {
		if _, ok := r3.next(30 * time.Second); !ok {
			break
		}
	}
	if !errors.Is(w3.Err(), client.ErrHistoryCompacted) || len(r3.got) >= 251 {
		t.Fatalf("a watch left behind: %d events, ended with %v; want ErrHistoryCompacted", len(r3.got), w3.Err())
	}
}
