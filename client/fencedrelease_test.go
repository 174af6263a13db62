package client_test

import (
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A Release fenced with IfSequencer frees the lock only while it is held
// at the sequencer's generation: a sequencer from before the lock moved on
// (released and taken again) is refused and the lock stays held; the
// current one releases it. Sequencers of another lock, forged or missing
// ones are refused too.
func TestFencedRelease(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	h := open(t, ctx, a, c.Name("fr"), rwc)
	hb := open(t, ctx, b, c.Name("fr"), rwc)
	free := func() bool {
		t.Helper()
		ok, err := hb.TryAcquire(ctx, client.Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if err := hb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return ok
	}

	acquire(t, ctx, h)
	seq1, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, client.IfSequencer(seq1)); err != nil {
		t.Fatalf("fenced Release with the current sequencer: %v", err)
	}
	if !free() {
		t.Fatal("the lock is still held after a fenced Release")
	}

	// The lock moved on: another holder took it (a later generation), and
	// then this handle again (later still).
	acquire(t, ctx, h)
	seq2, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := h.LockContext()
	if err := h.Release(ctx, client.IfSequencer(seq1)); !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("fenced Release with a sequencer of an earlier generation: %v, want ErrStaleSequencer", err)
	}
	if free() {
		t.Fatal("a stale fenced Release freed the lock")
	}
	if done, cause := ended(lctx); done {
		t.Fatalf("a refused Release ended the lock context: %v", cause)
	}

	other := open(t, ctx, a, c.Name("fr-other"), rwc)
	acquire(t, ctx, other)
	seqOther, err := other.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, client.IfSequencer(seqOther)); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("fenced Release with another lock's (valid) sequencer: %v, want ErrBadRequest", err)
	}
	forged := append([]byte(nil), seq2...)
	forged[len(forged)-1] ^= 1
	if err := h.Release(ctx, client.IfSequencer(forged)); !errors.Is(err, client.ErrBadSequencer) {
		t.Fatalf("fenced Release with a forged sequencer: %v, want ErrBadSequencer", err)
	}
	if err := h.Release(ctx, client.IfSequencer(nil)); !errors.Is(err, client.ErrBadSequencer) {
		t.Fatalf("fenced Release with no sequencer: %v, want ErrBadSequencer", err)
	}
	if free() {
		t.Fatal("a refused fenced Release freed the lock")
	}

	if err := h.Release(ctx, client.IfSequencer(seq2)); err != nil {
		t.Fatalf("fenced Release with the current sequencer: %v", err)
	}
	if !free() {
		t.Fatal("the lock is still held after a fenced Release")
	}

	// A sequencer attached with SetSequencer does not fence Release: here
	// it is stale (its lock was released) and Release still succeeds.
	acquire(t, ctx, h)
	if err := h.SetSequencer(ctx, seqOther); err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release with a stale sequencer attached: %v", err)
	}
	if !free() {
		t.Fatal("the lock is still held after Release")
	}
}
