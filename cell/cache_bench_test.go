package cell_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
)

// Benchmarks of the client cache (docs/spec.md#caching,
// #performance-targets): reads served with no call
// to the cell, against linearizable reads at the master; and what caching
// costs writers, who must invalidate every cacher before they complete.

// benchReadWorkers is how many goroutines share the one client in the
// read benchmarks (docs/spec.md#performance-targets: 16 clients).
const benchReadWorkers = 16

// benchReads runs read from benchReadWorkers goroutines, b.N reads in
// all, and reports reads/s and the p50 and p99 latency.
func benchReads(b *testing.B, read func(context.Context) error) {
	ctx := context.Background()
	lat := make([][]time.Duration, benchReadWorkers)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range benchReadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := read(ctx); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatencies(b, elapsed, slicesConcat(lat), "reads/s")
}

func slicesConcat(ls [][]time.Duration) []time.Duration {
	var all []time.Duration
	for _, l := range ls {
		all = append(all, l...)
	}
	return all
}

func reportLatencies(b *testing.B, elapsed time.Duration, all []time.Duration, rate string) {
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if rate != "" {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), rate)
	}
	b.ReportMetric(us(all[len(all)/2]), "p50-µs")
	b.ReportMetric(us(all[len(all)*99/100]), "p99-µs")
}

// benchReadHandle opens a 100-byte file on a fresh five-replica cell.
func benchReadHandle(b *testing.B, opts ...client.OpenOption) (*client.Client, *client.Handle) {
	c := fixtures.NewCell(b, 5, fixtures.Options{LeaseTTL: 12 * time.Second})
	cl := c.Client(b)
	ctx := context.Background()
	if _, err := cl.Open(ctx, c.Name("r"), client.Read|client.Write|client.Create, client.WithContents(make([]byte, 100))); err != nil {
		b.Fatal(err)
	}
	h, err := cl.Open(ctx, c.Name("r"), client.Read, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return cl, h
}

// BenchmarkCachedRead: GetContentsAndStat of one 100-byte file served from
// the cache of one client, 16 goroutines. Every read must be a hit.
func BenchmarkCachedRead(b *testing.B) {
	cl, h := benchReadHandle(b)
	ctx := context.Background()
	if _, _, err := h.GetContentsAndStat(ctx); err != nil { // fill
		b.Fatal(err)
	}
	h0, c0 := admin.New(cl).CacheStats().Hits, testhook.CallsSent()
	benchReads(b, func(ctx context.Context) error {
		_, _, err := h.GetContentsAndStat(ctx)
		return err
	})
	hits, calls := admin.New(cl).CacheStats().Hits-h0, testhook.CallsSent()-c0
	if hits != uint64(b.N) {
		b.Fatalf("%d reads, %d cache hits", b.N, hits)
	}
	b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
}

// BenchmarkUncachedRead: the same reads WithoutCache: each one a
// linearizable read at the master.
func BenchmarkUncachedRead(b *testing.B) {
	cl, h := benchReadHandle(b, client.WithoutCache())
	h0 := admin.New(cl).CacheStats().Hits
	benchReads(b, func(ctx context.Context) error {
		_, _, err := h.GetContentsAndStat(ctx)
		return err
	})
	if hits := admin.New(cl).CacheStats().Hits - h0; hits != 0 {
		b.Fatalf("%d cache hits WithoutCache", hits)
	}
}

// BenchmarkWriteWithCachers: latency of SetContents of one 100-byte file
// while 0, 10 or 100 other sessions have it cached. Before every write
// each cacher has re-read the file (a miss after the last write's
// invalidation) and read it again (a hit), so every write must invalidate
// every cacher and wait for all their acknowledgements.
func BenchmarkWriteWithCachers(b *testing.B) {
	c := fixtures.NewCell(b, 5, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := context.Background()
	wcl := c.Client(b)
	for _, n := range []int{0, 10, 100} {
		name := c.Name(fmt.Sprintf("w%d", n))
		wh, err := wcl.Open(ctx, name, client.Read|client.Write|client.Create, client.WithContents([]byte("start")))
		if err != nil {
			b.Fatal(err)
		}
		cachers := make([]*client.Client, n)
		handles := make([]*client.Handle, n)
		for i := range cachers {
			cachers[i] = c.Client(b)
			if handles[i], err = cachers[i].Open(ctx, name, client.Read); err != nil {
				b.Fatal(err)
			}
		}
		var round int
		// reread makes every cacher read the file twice: the first read
		// fetches want from the master and caches it, the second must hit.
		reread := func(want string) {
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i, h := range handles {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 2 {
						h0 := admin.New(cachers[i]).CacheStats().Hits
						data, _, err := h.GetContentsAndStat(ctx)
						switch {
						case err != nil:
							errs <- err
						case string(data) != want:
							errs <- fmt.Errorf("cacher %d read %q, want %q", i, data, want)
						case k == 1 && admin.New(cachers[i]).CacheStats().Hits == h0:
							errs <- fmt.Errorf("cacher %d: second read was not a cache hit", i)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		}
		reread("start")
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			var busy time.Duration
			b.ResetTimer()
			for range b.N {
				round++
				val := strconv.Itoa(round)
				t0 := time.Now()
				if err := wh.SetContents(ctx, []byte(val)); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				lat = append(lat, d)
				busy += d
				b.StopTimer()
				reread(val)
				b.StartTimer()
			}
			b.StopTimer()
			reportLatencies(b, busy, lat, "writes/s")
		})
		for _, cl := range cachers {
			cl.Close()
		}
	}
}
