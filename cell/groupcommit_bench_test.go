package cell_test

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// benchLogCost runs op from 16 closed-loop clients on a five-replica cell
// (loopback, fsync on) and reports, besides ops/s, what the Raft log paid
// per command on the master: entries (log indexes used), log stores (each
// one fsync of a batch) and state-machine applies; and the CPU time the
// whole process (five replicas and the clients) spent per op. cmdsPerOp is how many
// replicated commands one op issues (an acquire+release pair issues two).
func benchLogCost(b *testing.B, cmdsPerOp int, setup func(ctx context.Context, c *fixtures.Cell, cl *client.Client, i int) func(context.Context) error) {
	const clients = 16
	c := fixtures.NewCell(b, 5, fixtures.Options{LeaseTTL: 12 * time.Second})
	ctx := context.Background()
	ops := make([]func(context.Context) error, clients)
	for i := range ops {
		ops[i] = setup(ctx, c, c.Client(b), i)
	}
	rep := c.Server(c.WaitForMaster(10 * time.Second)).Replica()
	st0, idx0, cpu0 := rep.Stats(), rep.Status().LastIndex, processCPU()
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := ops[i](ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	st1, idx1, cpu1 := rep.Stats(), rep.Status().LastIndex, processCPU()
	cmds := float64(b.N * cmdsPerOp)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(idx1-idx0)/cmds, "entries/cmd")
	b.ReportMetric(float64(st1.LogStore.Count-st0.LogStore.Count)/cmds, "stores/cmd")
	b.ReportMetric(float64(st1.Apply.Count-st0.Apply.Count)/cmds, "applies/cmd")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time (user and system) this process has used: the
// whole cell and its clients, which the machine's other load does not add
// to, unlike wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLogCostLock: TryAcquire+Release pairs, one lock per client.
func BenchmarkLogCostLock(b *testing.B) {
	benchLogCost(b, 2, lockPairs(b))
}

// BenchmarkLogCostWrite: 100-byte conditional writes, one file per client.
func BenchmarkLogCostWrite(b *testing.B) {
	benchLogCost(b, 1, conditionalWrites(b))
}
