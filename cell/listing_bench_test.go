package cell_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// BenchmarkListLargeDirectory lists a directory of 100,000 children
// (32-byte names) on a five-replica cell from a real client, page by page:
// whole listings through ReadDir with the cache off (every page a
// linearizable read), the same cached, and the first page alone. It
// reports the time and pages of one whole listing; allocations count the
// client and the in-process cell together. The directory is built once
// (100,000 creates, from 16 sessions so none passes the handle limit).
func BenchmarkListLargeDirectory(b *testing.B) {
	const children = 100_000
	c := fixtures.NewCell(b, 5, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := context.Background()
	name := func(i int) string { return fmt.Sprintf("job-%06d-%021d", i, i) }
	admin := c.Client(b)
	if _, err := admin.Open(ctx, c.Name("big"), client.Read|client.Create|client.Directory); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	const makers = 16
	var wg sync.WaitGroup
	errs := make(chan error, makers)
	for w := range makers {
		cl := c.Client(b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < children; i += makers {
				if _, err := cl.Open(ctx, c.Name("big/"+name(i)), client.Read|client.Write|client.Create); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d children in %v", children, time.Since(start).Round(time.Millisecond))
	lister := c.Client(b)

	listAll := func(b *testing.B, h *client.Handle) {
		ents, err := h.ReadDir(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(ents) != children {
			b.Fatalf("listed %d children, want %d", len(ents), children)
		}
	}
	b.Run("ReadDirUncached", func(b *testing.B) {
		h, err := lister.Open(ctx, c.Name("big"), client.Read, client.WithoutCache())
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			listAll(b, h)
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/listing")
	})
	b.Run("ReadDirPages", func(b *testing.B) {
		h, err := lister.Open(ctx, c.Name("big"), client.Read, client.WithoutCache())
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		b.ReportAllocs()
		pages := 0
		for b.Loop() {
			n := 0
			for after := ""; ; {
				ents, more, err := h.ReadDirPage(ctx, after, 0)
				if err != nil {
					b.Fatal(err)
				}
				pages++
				n += len(ents)
				if !more {
					break
				}
				after = ents[len(ents)-1].Name
			}
			if n != children {
				b.Fatalf("listed %d children, want %d", n, children)
			}
		}
		b.ReportMetric(float64(pages)/float64(b.N), "pages/listing")
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/listing")
	})
	b.Run("ReadDirCached", func(b *testing.B) {
		h, err := lister.Open(ctx, c.Name("big"), client.Read)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		listAll(b, h) // fills the cache
		hits := lcadmin.New(lister).CacheStats().Hits
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			listAll(b, h)
		}
		if lcadmin.New(lister).CacheStats().Hits-hits != uint64(b.N) {
			b.Fatalf("%d listings, %d cache hits", b.N, lcadmin.New(lister).CacheStats().Hits-hits)
		}
	})
	b.Run("FirstPage", func(b *testing.B) {
		h, err := lister.Open(ctx, c.Name("big"), client.Read, client.WithoutCache())
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := h.ReadDirPage(ctx, "", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
