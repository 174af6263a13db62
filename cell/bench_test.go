package cell_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// benchClients runs op from `clients` concurrent clients (each with its own
// session and connection) on a five-replica cell on loopback with fsync on,
// b.N operations in all, and reports ops/s with p50 and p99 latency.
func benchClients(b *testing.B, clients int, setup func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(ctx context.Context) error) {
	c := fixtures.NewCell(b, 5, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := context.Background()
	ops := make([]func(context.Context) error, clients)
	for i := range ops {
		ops[i] = setup(ctx, c, c.Client(b), i)
	}
	lat := make([][]time.Duration, clients)
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := ops[i](ctx); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkSetContents: 100-byte conditional writes, 16 clients, each on
// its own file (the "conditional 100-byte writes" of
// docs/spec.md#performance-targets).
func BenchmarkSetContents(b *testing.B) {
	benchClients(b, 16, conditionalWrites(b))
}

// conditionalWrites is the conditional-write workload: client i opens
// file wi and each op writes 100 bytes if the file is still at the
// generation its last write left.
func conditionalWrites(b *testing.B) func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error {
	data := make([]byte, 100)
	return func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("w%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			b.Fatal(err)
		}
		st, err := h.GetStat(ctx)
		if err != nil {
			b.Fatal(err)
		}
		gen := st.ContentGen
		return func(ctx context.Context) error {
			st, err := h.SetContentsAndStat(ctx, data, client.IfGeneration(gen))
			gen = st.ContentGen
			return err
		}
	}
}

// BenchmarkLockUncontended: TryAcquire+Release pairs, 16 clients, one lock
// each.
func BenchmarkLockUncontended(b *testing.B) {
	benchClients(b, 16, lockPairs(b))
}

// lockPairs is the uncontended lock workload: client i opens lock li and
// each op is a TryAcquire+Release pair on it.
func lockPairs(b *testing.B) func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error {
	return func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("l%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) error {
			if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
				return fmt.Errorf("acquire: %v %v", ok, err)
			}
			return h.Release(ctx)
		}
	}
}

// BenchmarkRead: GetContentsAndStat of a 100-byte file by 16 clients, each
// on its own handle with the client's default cache on, so after the first
// every read is a cache hit; BenchmarkUncachedRead is the linearizable read.
func BenchmarkRead(b *testing.B) {
	benchClients(b, 16, func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("r%d", i)), client.Read|client.Write|client.Create, client.WithContents(make([]byte, 100)))
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) error {
			_, _, err := h.GetContentsAndStat(ctx)
			return err
		}
	})
}
