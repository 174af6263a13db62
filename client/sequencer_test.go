package client_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

// A sequencer's accessors read what the cell signed (the lock's name,
// mode, generation and cell) without a call; logged, it shows those
// fields; its bytes still go wherever sequencer bytes go.
func TestSequencerAccessors(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := testCtx(t, time.Minute)
	cl := c.Client(t)
	h := open(t, ctx, cl, c.Name("seq"), rwc)
	if err := h.Acquire(ctx, client.Shared); err != nil {
		t.Fatal(err)
	}
	seq, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := seq.Fields()
	if err != nil {
		t.Fatal(err)
	}
	if seq.Path() != c.Name("seq") || seq.Mode() != client.Shared || seq.Generation() != st.LockGen ||
		seq.Generation() == 0 || seq.Cell() != "t" || f.Generation != st.LockGen || f.Mode != sequencer.Shared {
		t.Fatalf("sequencer %s (fields %+v), want %s shared at lock generation %d of cell t", seq, f, c.Name("seq"), st.LockGen)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("holding", "seq", seq)
	for _, want := range []string{"seq.path=" + c.Name("seq"), "seq.mode=shared", "seq.generation=" + strconv.FormatUint(st.LockGen, 10)} {
		if !strings.Contains(logged.String(), want) {
			t.Fatalf("logged %q, want %s in it", logged.String(), want)
		}
	}
	if ok, err := cl.CheckSequencer(ctx, seq); !ok || err != nil {
		t.Fatalf("CheckSequencer of the held lock's sequencer: %v, %v", ok, err)
	}

	junk := client.Sequencer("not a sequencer")
	if _, err := junk.Fields(); !errors.Is(err, sequencer.ErrMalformed) || junk.Generation() != 0 {
		t.Fatalf("malformed bytes: Fields %v, generation %d", err, junk.Generation())
	}
}
