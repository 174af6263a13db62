package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/mirror"
)

// BenchmarkMirrorPropagation measures one change's way through a running
// mirror: a write in the source cell until the mirror has applied it in
// the target (three one-replica cells on loopback).
func BenchmarkMirrorPropagation(b *testing.B) {
	r := newRig(b, fixtures.Options{}, "east")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, east := r.cells["global"].Client(b), r.cells["east"].Client(b)
	put(b, ctx, g, "/ls/global/config/f", "0")
	r.run(b, "east")
	eventually(b, 30*time.Second, "first copy", r.inStep(ctx, g, map[string]*client.Client{"east": east}))
	h, err := g.Open(ctx, "/ls/global/config/f", client.Write)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	b.ResetTimer()
	for i := range b.N {
		applied := r.m.Status()[0].Applied
		if err := h.SetContents(ctx, []byte(fmt.Sprint(i+1))); err != nil {
			b.Fatal(err)
		}
		for r.m.Status()[0].Applied == applied {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// BenchmarkMirrorFullCopy measures a full re-sync: 200 files in 10
// directories copied into an empty place in the target by a mirror's
// start (each iteration a new mirror copying to a new place).
func BenchmarkMirrorFullCopy(b *testing.B) {
	r := newRig(b, fixtures.Options{}, "east")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := r.cells["global"].Client(b)
	for d := range 10 {
		for f := range 20 {
			put(b, ctx, g, fmt.Sprintf("/ls/global/config/d%d/f%d", d, f), "value")
		}
	}
	b.ResetTimer()
	for i := range b.N {
		m, err := mirror.New(mirror.Config{Cells: r.cs, From: "global", Subtree: "/ls/global/config", To: []string{"east"},
			Dest: fmt.Sprintf("/ls/{target}/copy%d", i), Logger: fixtures.Logger()})
		if err != nil {
			b.Fatal(err)
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.Run(mctx)
		}()
		for !m.Status()[0].Synced {
			time.Sleep(time.Millisecond)
		}
		stop()
		<-done
	}
}
