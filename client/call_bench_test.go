package client_test

import (
	"context"
	"testing"

	"lockcell/client"
	"lockcell/fixtures"
)

// BenchmarkClientCall is one small call end to end on a one-replica cell
// (no cache, so every read goes to the master): an uncached
// GetContentsAndStat of 100 bytes, and a 100-byte SetContents. Client and
// cell share the process, so allocs/op counts both ends; a memory profile
// focused on package client separates the client's share.
func BenchmarkClientCall(b *testing.B) {
	c := fixtures.NewCell(b, 1, fixtures.Options{})
	cfg := c.ClientConfig()
	cfg.DisableCache = true
	cl := c.ClientWith(b, cfg)
	ctx := context.Background()
	h, err := cl.Open(ctx, c.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 100)
	if err := h.SetContents(ctx, data); err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := h.GetContentsAndStat(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := h.SetContents(ctx, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
