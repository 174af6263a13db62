package cell_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
	"lockcell/sequencer/kv"
)

// A semaphore's holders fence a resource through one Guard
// (docs/fencing.md): a real cell, the kv resource server on a real HTTP
// listener, its Guard asking the cell. Three permit holders' sequencers
// name mode Permit, each at its own generation; their writes, interleaved
// in every order, are all admitted (no holder fences another by its
// higher generation). A holder that releases its permit, and one whose
// session is cut off until it expires, are refused (409 stale) on their
// next write, while the others still write. A Guard without a Checker
// refuses a Permit sequencer as unverifiable (503), not as stale.
func TestPermitHoldersFencedThroughOneGuard(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 60*time.Second)
	checker := c.Client(t)
	res := fenceStartKV(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell, Checker: checker})})
	pool := c.Name("permit-pool")
	const key = "n"

	cut := fixtures.NewCutter()
	cfgA := c.ClientConfig()
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	t.Cleanup(cut.Heal) // let A's Close reach the cell (its session is long gone)
	clients := []*client.Client{c.ClientWith(t, cfgA), c.Client(t), c.Client(t)}

	sems := make([]*client.Semaphore, len(clients))
	seqs := make([]client.Sequencer, len(clients))
	gens := map[uint64]bool{}
	for i, cl := range clients {
		var err error
		if sems[i], err = cl.OpenSemaphore(ctx, pool, 3); err != nil {
			t.Fatal(err)
		}
		if ok, err := sems[i].TryAcquire(ctx); !ok || err != nil {
			t.Fatalf("holder %d takes a permit: %v %v", i, ok, err)
		}
		if seqs[i], err = sems[i].GetSequencer(ctx); err != nil {
			t.Fatal(err)
		}
		if seqs[i].Mode() != client.Permit || seqs[i].Path() != pool || !strings.Contains(seqs[i].String(), " permit ") {
			t.Fatalf("holder %d's sequencer %s: want mode permit of %s", i, seqs[i], pool)
		}
		gens[seqs[i].Generation()] = true
	}
	if len(gens) != 3 {
		t.Fatalf("three holders' generations %v are not their own", gens)
	}

	n := 0
	incr := func(who int, want int) {
		t.Helper()
		ans := res.incr(ctx, key, seqs[who])
		if ans.status != want {
			t.Fatalf("holder %d (generation %d) incr: %d %s, want %d", who, seqs[who].Generation(), ans.status, ans.body, want)
		}
		if want == http.StatusOK {
			n++
			if ans.res.Value == nil || *ans.res.Value != int64(n) {
				t.Fatalf("holder %d incr: value %v, want %d", who, ans.res.Value, n)
			}
		} else if ans.rej.Reason != kv.ReasonStale {
			t.Fatalf("holder %d refused with reason %q, want %q", who, ans.rej.Reason, kv.ReasonStale)
		}
	}
	// Highest generation first, then lower ones, then mixed: all admitted.
	for _, who := range []int{2, 1, 0, 0, 2, 1, 2, 0, 1} {
		incr(who, http.StatusOK)
	}

	// B releases its permit: its next write is refused, the others' are not.
	if err := sems[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	incr(1, http.StatusConflict)
	incr(0, http.StatusOK)
	incr(2, http.StatusOK)

	// A's link to the cell is cut; once its session expires (the cell
	// says so), its next write is refused, C's is not.
	cut.Cut()
	pollUntil(t, 30*time.Second, "A's permit lost with its session", func() bool {
		ok, err := checker.CheckSequencer(ctx, seqs[0])
		return err == nil && !ok
	})
	incr(0, http.StatusConflict)
	incr(2, http.StatusOK)
	if v, _ := res.value(ctx, key); v != strconv.Itoa(n) {
		t.Fatalf("the counter is %q after %d admitted increments", v, n)
	}

	// A guard that cannot ask the cell refuses a permit, saying why.
	local := fenceStartKV(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell})})
	if ans := local.incr(ctx, key, seqs[2]); ans.status != http.StatusServiceUnavailable || !strings.Contains(ans.rej.Error, "Checker") {
		t.Fatalf("a permit at a guard without a Checker: %d %s", ans.status, ans.body)
	}
}

// The cell's own fences take a Permit sequencer: a handle fenced by it
// (SetSequencer) writes, a transaction checking it (SequencerValid)
// applies and a Release fenced by it (IfSequencer) frees the permit,
// exactly while its holder holds that permit, whatever the other holder
// does; once it is released, each is refused with ErrStaleSequencer and
// changes nothing.
func TestPermitSequencerFencesCellWrites(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := ctxT(t, 30*time.Second)
	cl := c.Client(t)
	pool, data := c.Name("permit-cell"), c.Name("permit-data")
	var seqs [2]client.Sequencer
	var sems [2]*client.Semaphore
	for i := range sems {
		var err error
		if sems[i], err = cl.OpenSemaphore(ctx, pool, 2); err != nil {
			t.Fatal(err)
		}
		if err := sems[i].Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if seqs[i], err = sems[i].GetSequencer(ctx); err != nil || seqs[i].Mode() != client.Permit {
			t.Fatalf("holder %d's sequencer %s: %v", i, seqs[i], err)
		}
	}
	const rw = client.Read | client.Write | client.Create
	fenced := func(i int) *client.Handle {
		h := mustOpen(t, ctx, cl, data, rw, client.WithoutCache())
		t.Cleanup(func() { h.Close() })
		if err := h.SetSequencer(ctx, seqs[i]); err != nil {
			t.Fatalf("holder %d's permit attached: %v", i, err)
		}
		return h
	}
	h0, h1 := fenced(0), fenced(1)
	for i, h := range []*client.Handle{h1, h0, h1} {
		if err := h.SetContents(ctx, []byte("w"+strconv.Itoa(i))); err != nil {
			t.Fatalf("write %d fenced by a held permit: %v", i, err)
		}
	}
	if _, err := cl.Txn(ctx).If(client.SequencerValid(seqs[0])).Then(client.OpSet(data, []byte("t0"))).Commit(); err != nil {
		t.Fatalf("txn checking a held permit: %v", err)
	}

	// Holder 0 lets go, fenced by its own permit's sequencer.
	if err := sems[0].Handle().Release(ctx, client.IfSequencer(seqs[0])); err != nil {
		t.Fatalf("a release fenced by the holder's permit: %v", err)
	}
	if err := h0.SetContents(ctx, []byte("late")); !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("a write fenced by a released permit: %v", err)
	}
	if _, err := cl.Txn(ctx).If(client.SequencerValid(seqs[0])).Then(client.OpSet(data, []byte("late"))).Commit(); !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("a txn checking a released permit: %v", err)
	}
	if err := h1.SetContents(ctx, []byte("still")); err != nil {
		t.Fatalf("the other holder's fenced write: %v", err)
	}
	if got, _, err := h1.GetContentsAndStat(ctx); err != nil || string(got) != "still" {
		t.Fatalf("contents %q (%v), want the last admitted write", got, err)
	}
}
