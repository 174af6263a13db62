package cell_test

import (
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Handles opened WithEvents hear of changes made by other clients:
// contents modified, child added and removed, lock acquired, conflicting
// lock requests, and deletion (handle invalid). Handles that did not ask
// hear nothing.
func TestHandleEvents(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	watcher, quiet, actor := c.Client(t), c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	mustOpen(t, ctx, actor, c.Name("d"), rw|client.Directory).Close()
	mustOpen(t, ctx, actor, c.Name("d/f"), rw).Close()
	ev := collectEvents(watcher)
	qev := collectEvents(quiet)
	mustOpen(t, ctx, watcher, c.Name("d"), client.Read|client.Directory, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
	mustOpen(t, ctx, watcher, c.Name("d/f"), rw, client.WithEvents(client.OnContentsModified|client.OnLockAcquired|client.OnConflictingLock|client.OnHandleInvalid))
	mustOpen(t, ctx, quiet, c.Name("d/f"), client.Read)

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
	for _, k := range qev.kinds() {
		if k != client.MasterFailover {
			t.Fatalf("a handle that asked for no events got %v", qev.kinds())
		}
	}
}
