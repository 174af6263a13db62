package proxy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/proxy"
)

// BenchmarkProxyReadWave is what the read cache saves the master: a
// writer changes a file, then 100 clients behind one proxy each read it
// once (every client's cache was invalidated by the write: the wave of
// first reads a configuration change sets off). Reported per wave:
// master_reads, the reads the proxy forwarded (all 100 without its
// cache; with it, the fill and the reads that arrived before it), and
// the wave's time, write included. An in-process three-replica cell on
// loopback: figures to compare between the two, not absolute.
func BenchmarkProxyReadWave(b *testing.B) {
	for _, cached := range []bool{false, true} {
		name := "forwarded"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			const clients = 100
			c := fixtures.NewCell(b, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
			p := fixtures.StartProxyWith(b, c, func(cfg *proxy.Config) {
				cfg.CacheReads = cached
				cfg.Limits.MaxConnsPerIP = 4096 // every client from one loopback address
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if cached {
				fixtures.PollUntil(b, 30*time.Second, "the cache serving", func() bool { return p.Stats().Cache.Serving })
			}
			w := c.Client(b)
			hw, err := w.Open(ctx, c.Name("conf"), client.Read|client.Write|client.Create, client.WithContents([]byte("v")))
			if err != nil {
				b.Fatal(err)
			}
			hs := make([]*client.Handle, clients)
			for i := range hs {
				cl := c.ClientWith(b, fixtures.ProxiedConfig(c.ClientConfig(), p))
				if hs[i], err = cl.Open(ctx, c.Name("conf"), client.Read); err != nil {
					b.Fatal(err)
				}
			}
			wave := func() {
				if err := hw.SetContents(ctx, []byte("v")); err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for _, h := range hs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, _, err := h.GetContentsAndStat(ctx); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			wave() // every client's handle and session warm
			hits0 := p.Stats().Cache.Hits
			reads0 := forwardedReads(p)
			b.ResetTimer()
			for range b.N {
				wave()
			}
			b.StopTimer()
			b.ReportMetric(float64(forwardedReads(p)-reads0)/float64(b.N), "master_reads/wave")
			b.ReportMetric(float64(p.Stats().Cache.Hits-hits0)/float64(b.N), "proxy_hits/wave")
		})
	}
}

// forwardedReads counts the contents reads a proxy forwarded to the
// master.
func forwardedReads(p *proxy.Proxy) uint64 { return p.Stats().ForwardedReads }

// BenchmarkProxyCachedRead is one linearizable read answered by a
// caching proxy's cache, 16 clients at once, their own caches off (the
// comparison's read workload through a proxy): with -cpuprofile it shows
// where a read's time goes at the proxy, in the same process as its
// clients and the cell.
func BenchmarkProxyCachedRead(b *testing.B) {
	c := fixtures.NewCell(b, 3, fixtures.Options{LeaseTTL: 4 * time.Second})
	p := fixtures.StartProxyWith(b, c, func(cfg *proxy.Config) { cfg.CacheReads = true })
	fixtures.PollUntil(b, 30*time.Second, "the cache serving", func() bool { return p.Stats().Cache.Serving })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := c.Client(b)
	if _, err := w.Open(ctx, c.Name("r"), client.Read|client.Write|client.Create, client.WithContents(make([]byte, 100))); err != nil {
		b.Fatal(err)
	}
	const clients = 16
	hs := make(chan *client.Handle, clients)
	for range clients {
		cl := c.ClientWith(b, fixtures.ProxiedConfig(c.ClientConfig(), p))
		h, err := cl.Open(ctx, c.Name("r"), client.Read, client.WithoutCache())
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := h.GetContentsAndStat(ctx); err != nil { // fills the proxy's cache
			b.Fatal(err)
		}
		hs <- h
	}
	hits0, reads0 := p.Stats().Cache.Hits, forwardedReads(p)
	b.SetParallelism((clients + 1) / 2) // 16 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		h := <-hs
		defer func() { hs <- h }()
		for pb.Next() {
			if _, _, err := h.GetContentsAndStat(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	n := p.Stats().Cache.Hits - hits0
	b.ReportMetric(float64(n)/float64(max(n+forwardedReads(p)-reads0, 1)), "hit_ratio")
}
