package cell_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

func TestSequencers(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	a, b := c.Client(t), c.Client(t)
	const rw = client.Read | client.Write | client.Create
	ha := mustOpen(t, ctx, a, c.Name("res"), rw)
	hb := mustOpen(t, ctx, b, c.Name("res"), rw)
	if _, err := ha.GetSequencer(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("sequencer without the lock: %v", err)
	}
	if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	seq, err := ha.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sequencer.Parse(seq)
	st, _ := ha.GetStat(ctx)
	if err != nil || s.Cell != "t" || s.Path != c.Name("res") || s.Mode != sequencer.Exclusive || s.Generation != st.LockGen {
		t.Fatalf("parsed %+v %v; stat %+v", s, err, st)
	}
	if ok, err := b.CheckSequencer(ctx, seq); !ok || err != nil {
		t.Fatalf("valid sequencer: %v %v", ok, err)
	}
	// Forged: any altered byte (a higher generation, another path, the
	// tag) fails the signature; truncated bytes are malformed.
	forged := sequencer.Sign([]byte("not the cell key, 32 bytes long!"), sequencer.Sequencer{Cell: "t", Path: s.Path, Mode: s.Mode, Generation: s.Generation + 1})
	flipped := append([]byte(nil), seq...)
	flipped[len(flipped)-1] ^= 1
	for name, bad := range map[string][]byte{"forged": forged, "flipped": flipped, "truncated": seq[:len(seq)-3], "empty": nil} {
		if ok, err := b.CheckSequencer(ctx, bad); ok || !errors.Is(err, client.ErrBadSequencer) {
			t.Errorf("%s sequencer: %v %v", name, ok, err)
		}
	}
	// A handle with the sequencer attached writes while the lock is held...
	if err := hb.SetSequencer(ctx, seq); err != nil {
		t.Fatal(err)
	}
	if err := hb.SetContents(ctx, []byte("fenced-1")); err != nil {
		t.Fatalf("write under a valid sequencer: %v", err)
	}
	// ... and not once the holder let go: the write changes nothing.
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.CheckSequencer(ctx, seq); ok || err != nil {
		t.Fatalf("released lock's sequencer: %v %v", ok, err)
	}
	if st, err := admin.New(b).SequencerStatus(ctx, seq); err != nil || st.Valid || st.Reason != s.Path+" is no longer locked" {
		t.Fatalf("released lock's sequencer status: %+v %v", st, err)
	}
	if err := hb.SetContents(ctx, []byte("fenced-2")); !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("write under a stale sequencer: %v", err)
	}
	if _, _, err := hb.GetContentsAndStat(ctx); !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("read under a stale sequencer: %v", err)
	}
	if err := hb.SetSequencer(ctx, nil); err != nil {
		t.Fatal(err)
	}
	data, _, err := hb.GetContentsAndStat(ctx)
	if err != nil || string(data) != "fenced-1" {
		t.Fatalf("contents %q %v", data, err)
	}
	if err := hb.SetSequencer(ctx, seq); !errors.Is(err, client.ErrStaleSequencer) || !strings.Contains(err.Error(), "no longer locked") {
		t.Fatalf("attaching a stale sequencer: %v", err)
	}
	// Re-acquiring gives a new generation; the old sequencer stays stale.
	if ok, err := ha.TryAcquire(ctx, client.Shared); !ok || err != nil {
		t.Fatal(ok, err)
	}
	seq2, _ := ha.GetSequencer(ctx)
	s2, _ := sequencer.Parse(seq2)
	if s2.Generation <= s.Generation || s2.Mode != sequencer.Shared {
		t.Fatalf("second sequencer %+v after %+v", s2, s)
	}
	if ok, _ := b.CheckSequencer(ctx, seq); ok {
		t.Fatal("old sequencer valid after re-acquire")
	}
	want := fmt.Sprintf("%s is locked at generation %d, not %d", s.Path, s2.Generation, s.Generation)
	if st, err := admin.New(b).SequencerStatus(ctx, seq); err != nil || st.Valid || st.Reason != want {
		t.Fatalf("superseded sequencer status: %+v %v, want reason %q", st, err, want)
	}
	if st, err := admin.New(b).SequencerStatus(ctx, seq2); err != nil || !st.Valid || st.Reason != "" {
		t.Fatalf("current sequencer status: %+v %v", st, err)
	}
	// The guard, asking the cell, accepts the new one and fences the old.
	g := sequencer.NewGuard(sequencer.GuardConfig{Checker: b, Cell: "t"})
	if _, err := g.Check(ctx, seq2); err != nil {
		t.Fatalf("guard rejects the current sequencer: %v", err)
	}
	if _, err := g.Check(ctx, seq); !errors.Is(err, sequencer.ErrStale) {
		t.Fatalf("guard accepts an older sequencer: %v", err)
	}
	if _, err := g.Check(ctx, forged); err == nil {
		t.Fatal("guard accepts a forged sequencer")
	}
}

// The cell key survives a restart of the whole cell: sequencers issued
// before stay verifiable.
func TestSequencerKeySurvivesRestart(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	a := c.Client(t)
	h := mustOpen(t, ctx, a, c.Name("k"), client.Read|client.Write|client.Create)
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	seq, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.Server(i).Replica().Snapshot()
	}
	c.Close()
	c2 := fixtures.NewCell(t, 3, c.Options())
	b := c2.Client(t)
	// The holder's session was closed by... nobody: the cell stopped, and a
	// new master grants it a fresh lease, so the lock is still held.
	if ok, err := b.CheckSequencer(ctx, seq); !ok || err != nil {
		t.Fatalf("sequencer after restart: %v %v", ok, err)
	}
}
