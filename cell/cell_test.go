package cell_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestWriteReadFiles(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	cl := c.Client(t)
	ctx := ctxT(t, 60*time.Second)

	dir, err := cl.Open(ctx, c.Name("cfg"), client.Read|client.Write|client.Create|client.Directory)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	h, err := cl.Open(ctx, c.Name("cfg/flag"), client.Read|client.Write|client.Create, client.WithContents([]byte("on")))
	if err != nil {
		t.Fatal(err)
	}
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "on" || st.Size != 2 || st.Dir || st.Instance == 0 || st.ContentGen < st.Instance {
		t.Fatalf("got %q %+v", data, st)
	}
	st2, err := h.SetContentsAndStat(ctx, []byte("off"), client.IfGeneration(st.ContentGen))
	if err != nil {
		t.Fatal(err)
	}
	if st2.ContentGen <= st.ContentGen || st2.Checksum == st.Checksum || st2.Instance != st.Instance {
		t.Fatalf("generation did not grow: %+v -> %+v", st, st2)
	}
	// A stale compare-and-swap fails and changes nothing.
	err = h.SetContents(ctx, []byte("stale"), client.IfGeneration(st.ContentGen))
	if !errors.Is(err, client.ErrGenerationMismatch) {
		t.Fatalf("stale CAS: %v", err)
	}
	data, st3, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != "off" || st3.ContentGen != st2.ContentGen {
		t.Fatalf("after stale CAS: %q %+v %v", data, st3, err)
	}
	ents, err := dir.ReadDir(ctx)
	if err != nil || len(ents) != 1 || ents[0].Name != "flag" || ents[0].Dir {
		t.Fatalf("readdir: %+v %v", ents, err)
	}
	// Another client sees the write.
	other := c.Client(t)
	h2, err := other.Open(ctx, c.Name("cfg/flag"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := h2.GetContentsAndStat(ctx); err != nil || !bytes.Equal(data, []byte("off")) {
		t.Fatalf("other client read %q, %v", data, err)
	}
}

// pollUntil and mustOpen are the fixtures' (PollUntil, MustOpen).
var (
	pollUntil = fixtures.PollUntil
	mustOpen  = fixtures.MustOpen
)

func TestMasterFailoverKeepsClientAndWrites(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: 3 * time.Second})
	cl := c.Client(t)
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create
	acked := map[string]string{}
	var handles []*client.Handle
	for i := range 20 {
		name := c.Name("f" + string(rune('a'+i)))
		h := mustOpen(t, ctx, cl, name, rw)
		v := "v1-" + name
		if err := h.SetContents(ctx, []byte(v)); err != nil {
			t.Fatal(err)
		}
		acked[name] = v
		handles = append(handles, h)
	}
	old := c.StopMaster()
	// The same client and the same handles go on without the caller doing
	// anything: writes and reads follow the new master.
	for i, h := range handles {
		v := "v2-" + h.Name()
		if err := h.SetContents(ctx, []byte(v)); err != nil {
			t.Fatalf("write %d after fail-over: %v", i, err)
		}
		acked[h.Name()] = v
	}
	newMaster := c.WaitForMaster(30 * time.Second)
	if newMaster == old {
		t.Fatalf("master did not change")
	}
	c.Start(old)
	for _, h := range handles {
		data, _, err := h.GetContentsAndStat(ctx)
		if err != nil || string(data) != acked[h.Name()] {
			t.Fatalf("%s: read %q, %v; want %q", h.Name(), data, err, acked[h.Name()])
		}
	}
	// A fresh client sees every acknowledged write too.
	fresh := c.Client(t)
	for name, v := range acked {
		h := mustOpen(t, ctx, fresh, name, client.Read)
		data, _, err := h.GetContentsAndStat(ctx)
		if err != nil || string(data) != v {
			t.Fatalf("fresh client %s: %q, %v; want %q", name, data, err, v)
		}
	}
}

func TestQuorumLossFailsClearlyAndRecovers(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: 3 * time.Second})
	cfg := c.ClientConfig()
	cfg.RetryTimeout = 3 * time.Second
	cl := c.ClientWith(t, cfg)
	ctx := ctxT(t, 120*time.Second)
	h := mustOpen(t, ctx, cl, c.Name("q"), client.Read|client.Write|client.Create)

	// Two of five down: still serving.
	m := c.WaitForMaster(10 * time.Second)
	down := []int{(m + 1) % 5, (m + 2) % 5}
	for _, i := range down {
		c.Stop(i)
	}
	if err := h.SetContents(ctx, []byte("two-down")); err != nil {
		t.Fatalf("write with 3 of 5: %v", err)
	}
	// Three down: no quorum, a clear error within a bounded time.
	third := (m + 3) % 5
	c.Stop(third)
	start := time.Now()
	err := h.SetContents(ctx, []byte("three-down"))
	took := time.Since(start)
	if !errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("write with 2 of 5: got %v, want ErrNoMaster", err)
	}
	if took > 20*time.Second {
		t.Fatalf("no-quorum failure took %v", took)
	}
	// Replicas return: the cell serves again and the failed write's
	// outcome is one of the two values, never anything else.
	for _, i := range append(down, third) {
		c.Start(i)
	}
	c.WaitForMaster(30 * time.Second)
	if err := h.SetContents(ctx, []byte("back")); err != nil {
		t.Fatalf("write after quorum returned: %v", err)
	}
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != "back" {
		t.Fatalf("read after recovery: %q %v", data, err)
	}
}

func TestWholeCellRestartKeepsEverything(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	ctx := ctxT(t, 120*time.Second)
	cl := c.Client(t)
	mustOpen(t, ctx, cl, c.Name("d"), client.Read|client.Write|client.Create|client.Directory).Close()
	type rec struct {
		data string
		st   client.Stat
	}
	want := map[string]rec{}
	for i := range 10 {
		name := c.Name("d/file" + string(rune('0'+i)))
		h := mustOpen(t, ctx, cl, name, client.Read|client.Write|client.Create)
		if err := h.SetContents(ctx, []byte(name)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
				t.Fatalf("lock: %v %v", ok, err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		data, st, err := h.GetContentsAndStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = rec{string(data), st}
	}
	// Force a snapshot on some replicas so restart covers snapshot + log.
	for i := range 5 {
		if i%2 == 0 {
			if err := c.Server(i).Replica().Snapshot(); err != nil {
				t.Fatalf("snapshot replica %d: %v", i, err)
			}
		}
	}
	cl.Close()
	c.Close()
	opts := c.Options()
	c2 := fixtures.NewCell(t, 5, opts)
	cl2 := c2.Client(t)
	for name, w := range want {
		h := mustOpen(t, ctx, cl2, name, client.Read)
		data, st, err := h.GetContentsAndStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != w.data || st.Instance != w.st.Instance || st.ContentGen != w.st.ContentGen ||
			st.LockGen != w.st.LockGen || st.Checksum != w.st.Checksum || !st.MTime.Equal(w.st.MTime) {
			t.Fatalf("%s after restart: %q %+v; want %q %+v", name, data, st, w.data, w.st)
		}
	}
	// Generations keep growing after the restart.
	h := mustOpen(t, ctx, cl2, c2.Name("d/file0"), client.Read|client.Write)
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock after restart: %v %v", ok, err)
	}
	st, err := h.GetStat(ctx)
	if err != nil || st.LockGen <= want[c2.Name("d/file0")].st.LockGen {
		t.Fatalf("lock generation went backwards: %+v %v", st, err)
	}
}

func TestLocks(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 120*time.Second)
	a, b, d := c.Client(t), c.Client(t), c.Client(t)
	name := c.Name("lock")
	const rw = client.Read | client.Write | client.Create
	ha, hb, hd := mustOpen(t, ctx, a, name, rw), mustOpen(t, ctx, b, name, rw), mustOpen(t, ctx, d, name, rw)

	t.Run("exclusive excludes", func(t *testing.T) {
		if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		st, _ := ha.GetStat(ctx)
		for _, m := range []client.LockMode{client.Exclusive, client.Shared} {
			if ok, err := hb.TryAcquire(ctx, m); ok || err != nil {
				t.Fatalf("b %v while a holds: %v %v", m, ok, err)
			}
		}
		if err := hb.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("release by non-holder: %v", err)
		}
		if err := ha.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := hb.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("b after release: %v %v", ok, err)
		}
		st2, _ := hb.GetStat(ctx)
		if st2.LockGen <= st.LockGen || st2.LockMode != client.Exclusive || st2.LockHolders != 1 {
			t.Fatalf("lock generation %d -> %d, %+v", st.LockGen, st2.LockGen, st2)
		}
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("shared shares", func(t *testing.T) {
		for _, h := range []*client.Handle{ha, hb} {
			if ok, err := h.TryAcquire(ctx, client.Shared); !ok || err != nil {
				t.Fatalf("shared: %v %v", ok, err)
			}
		}
		if ok, err := hd.TryAcquire(ctx, client.Exclusive); ok || err != nil {
			t.Fatalf("exclusive while shared held: %v %v", ok, err)
		}
		st, _ := hd.GetStat(ctx)
		if st.LockMode != client.Shared || st.LockHolders != 2 {
			t.Fatalf("stat %+v", st)
		}
		ha.Release(ctx)
		hb.Release(ctx)
	})

	t.Run("acquire blocks until release, FIFO hand-off", func(t *testing.T) {
		if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		gotB, gotD := make(chan error, 1), make(chan error, 1)
		go func() { gotB <- hb.Acquire(ctx, client.Shared) }()
		pollUntil(t, 10*time.Second, "b queued", func() bool { st, _ := ha.GetStat(ctx); return st.LockWaiters == 1 })
		go func() { gotD <- hd.Acquire(ctx, client.Shared) }()
		pollUntil(t, 10*time.Second, "d queued", func() bool { st, _ := ha.GetStat(ctx); return st.LockWaiters == 2 })
		select {
		case err := <-gotB:
			t.Fatalf("b acquired while a holds: %v", err)
		case err := <-gotD:
			t.Fatalf("d acquired while a holds: %v", err)
		default:
		}
		if err := ha.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// One release hands the lock to the whole run of shared waiters.
		for _, ch := range []chan error{gotB, gotD} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		st, _ := ha.GetStat(ctx)
		if st.LockMode != client.Shared || st.LockHolders != 2 || st.LockWaiters != 0 {
			t.Fatalf("after hand-off: %+v", st)
		}
		hb.Release(ctx)
		hd.Release(ctx)
	})

	t.Run("cancelled acquire leaves the queue", func(t *testing.T) {
		if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- hb.Acquire(cctx, client.Exclusive) }()
		pollUntil(t, 10*time.Second, "b queued", func() bool { st, _ := ha.GetStat(ctx); return st.LockWaiters == 1 })
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled acquire: %v", err)
		}
		pollUntil(t, 10*time.Second, "b withdrawn", func() bool { st, _ := ha.GetStat(ctx); return st.LockWaiters == 0 })
		ha.Release(ctx)
		st, _ := ha.GetStat(ctx)
		if st.LockMode != client.LockMode(0) || st.LockHolders != 0 {
			t.Fatalf("lock went to a cancelled waiter: %+v", st)
		}
	})

	t.Run("closing the handle releases", func(t *testing.T) {
		h := mustOpen(t, ctx, a, name, client.Read|client.Write)
		if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		got := make(chan error, 1)
		go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
		pollUntil(t, 10*time.Second, "b queued", func() bool { st, _ := ha.GetStat(ctx); return st.LockWaiters == 1 })
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if _, err := h.GetStat(ctx); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("closed handle: %v", err)
		}
		hb.Release(ctx)
	})
}

func TestBadInputIsTypedAndHarmless(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 120*time.Second)
	cl := c.Client(t)
	const rw = client.Read | client.Write | client.Create
	for _, name := range []string{"", "/", "/ls", "/ls/other/x", c.Name("a//b"), c.Name("a/"), c.Name("."), c.Name("a/.."),
		c.Name("sp ace"), c.Name("uni\u00e9"), c.Name(string(make([]byte, 256))), "/ls/t/" + string(bytes.Repeat([]byte("a/"), 600))} {
		if _, err := cl.Open(ctx, name, rw); !errors.Is(err, client.ErrInvalidName) {
			t.Errorf("open %q: %v, want ErrInvalidName", name, err)
		}
	}
	if _, err := cl.Open(ctx, c.Name("missing"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("open missing: %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("nodir/x"), rw); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("create under missing parent: %v", err)
	}
	big := bytes.Repeat([]byte("x"), 256*1024+1)
	if _, err := cl.Open(ctx, c.Name("big"), rw, client.WithContents(big)); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("create with big contents: %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("big"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a rejected create left a node: %v", err)
	}
	h := mustOpen(t, ctx, cl, c.Name("f"), rw, client.WithContents([]byte("keep")))
	if err := h.SetContents(ctx, big); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("big write: %v", err)
	}
	max := bytes.Repeat([]byte("m"), 256*1024)
	if err := h.SetContents(ctx, max); err != nil {
		t.Errorf("write of exactly 256 KiB: %v", err)
	}
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || !bytes.Equal(data, max) {
		t.Errorf("max-size read back: %d bytes, %v", len(data), err)
	}
	dir := mustOpen(t, ctx, cl, c.Name("dir"), rw|client.Directory)
	mustOpen(t, ctx, cl, c.Name("dir/child"), rw).Close()
	if err := dir.Delete(ctx); !errors.Is(err, client.ErrNotEmpty) {
		t.Errorf("delete non-empty dir: %v", err)
	}
	if _, _, err := dir.GetContentsAndStat(ctx); !errors.Is(err, client.ErrIsDir) {
		t.Errorf("contents of a dir: %v", err)
	}
	if _, err := h.ReadDir(ctx); !errors.Is(err, client.ErrNotDir) {
		t.Errorf("readdir of a file: %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("f"), rw|client.Excl); !errors.Is(err, client.ErrExists) {
		t.Errorf("exclusive create of existing: %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("f/sub"), rw); !errors.Is(err, client.ErrNotDir) {
		t.Errorf("create under a file: %v", err)
	}
	// Deleting a node invalidates other handles on it.
	h2 := mustOpen(t, ctx, cl, c.Name("f"), client.Read)
	if err := h.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.GetStat(ctx); !errors.Is(err, client.ErrHandleInvalid) {
		t.Errorf("handle on deleted node: %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("f"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deleted node still there: %v", err)
	}
	// Read-only handles cannot write.
	ro := mustOpen(t, ctx, cl, c.Name("dir/child"), client.Read)
	if err := ro.SetContents(ctx, []byte("x")); !errors.Is(err, client.ErrPermission) {
		t.Errorf("write through read-only handle: %v", err)
	}
	// The server keeps serving.
	h3 := mustOpen(t, ctx, cl, c.Name("after"), rw, client.WithContents([]byte("ok")))
	if data, _, err := h3.GetContentsAndStat(ctx); err != nil || string(data) != "ok" {
		t.Fatalf("after bad input: %q %v", data, err)
	}
}

// Every replica of a running cell writes its Raft log with fsync on
// (docs/spec.md#durability; badger's default is off).
func TestReplicasSyncWrites(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	for i := range 3 {
		if !c.Server(i).Replica().Store().SyncWrites() {
			t.Fatalf("replica %d runs badger without SyncWrites", i)
		}
	}
}
