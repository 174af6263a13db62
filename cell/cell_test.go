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
