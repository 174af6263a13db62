package cell_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
	"lockcell/sequencer"
)

// An uncontended re-acquire by a session that keeps its handle open costs
// one call: Acquire's reply carries the grant's sequencer, so
// GetSequencer needs no call while the lock context lives. Counted with
// testhook.CallsSent over many cycles, so a KeepAlive slipping in cannot
// hide a call per cycle.
func TestReacquireCalls(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	a := c.Client(t)
	const rw = client.Read | client.Write | client.Create
	h := mustOpen(t, ctx, a, c.Name("l"), rw)
	defer h.Close()
	// The first grant invalidates the name to this very session (its
	// open registered it to reuse the handle): one KeepAlive more, once.
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const cycles = 20
	var acquireCalls, cycleCalls uint64
	var seq []byte
	for range cycles {
		c0 := testhook.CallsSent()
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			t.Fatal(err)
		}
		var err error
		if seq, err = h.GetSequencer(ctx); err != nil {
			t.Fatal(err)
		}
		acquireCalls += testhook.CallsSent() - c0
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cycleCalls += testhook.CallsSent() - c0
	}
	t.Logf("%d cycles: Acquire+GetSequencer %d calls, with Release %d", cycles, acquireCalls, cycleCalls)
	if acquireCalls < cycles || acquireCalls > cycles+1 {
		t.Fatalf("Acquire+GetSequencer made %d calls in %d cycles; want one each", acquireCalls, cycles)
	}
	if cycleCalls < 2*cycles || cycleCalls > 2*cycles+1 {
		t.Fatalf("Acquire+GetSequencer+Release made %d calls in %d cycles; want two each", cycleCalls, cycles)
	}
	// The last cycle's sequencer names the last grant.
	s, err := sequencer.Parse(seq)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := h.GetStat(ctx); err != nil || s.Generation != st.LockGen || s.Path != c.Name("l") || s.Mode != sequencer.Exclusive {
		t.Fatalf("sequencer %+v, stat %+v, %v", s, st, err)
	}

	// Held, the answer is the master's own; released, GetSequencer asks
	// and hears the lock is not held.
	if err := h.Acquire(ctx, client.Shared); err != nil {
		t.Fatal(err)
	}
	local, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.CheckSequencer(ctx, local); !ok || err != nil {
		t.Fatalf("the grant's sequencer does not check: %v %v", ok, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.GetSequencer(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("GetSequencer after Release: %v", err)
	}
	// A second handle of the session that holds nothing asks the master.
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	remote := mustOpen(t, ctx, a, c.Name("l"), client.Read|client.Write)
	defer remote.Close()
	if _, err := remote.GetSequencer(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("GetSequencer on a handle that holds nothing: %v", err)
	}
	seq, err = h.GetSequencer(ctx)
	if err != nil || bytes.Equal(seq, local) {
		t.Fatalf("a new grant's sequencer: %x (old %x) %v", seq, local, err)
	}
}
