package fsm

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram: the lock-free duration histogram the node times its disk and
// apply with and the master its lock waits and leases. It lives here, in
// the package both import, so the master need not reach the node for it.

// HistogramBuckets is the number of finite buckets of a Histogram.
const HistogramBuckets = 24

// histogramBase is the upper bound of a Histogram's first bucket; each
// next bound doubles it, so the last finite bound is 25 µs × 2^23, about
// 210 s: one layout fits an fsync (sub-millisecond to seconds), a state
// machine apply (microseconds) and a lock wait (milliseconds to minutes).
const histogramBase = 25 * time.Microsecond

// HistogramBound returns the upper bound (inclusive) of bucket i of every
// Histogram, for i < HistogramBuckets.
func HistogramBound(i int) time.Duration { return histogramBase << i }

// Histogram counts durations into fixed exponential buckets
// (HistogramBound) without locks. The zero value is ready to use and safe
// for concurrent use.
type Histogram struct {
	counts [HistogramBuckets + 1]atomic.Uint64 // the last one is +Inf
	sum    atomic.Int64                        // nanoseconds
}

// Observe counts one duration (a negative one counts as zero).
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	i := HistogramBuckets
	if d <= histogramBase {
		i = 0
	} else if q := uint64((d - 1) / histogramBase); q < 1<<(HistogramBuckets-1) {
		// The smallest i with histogramBase<<i >= d.
		i = bits.Len64(q)
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a Histogram read at one moment.
type HistogramSnapshot struct {
	// Buckets[i] counts the durations of at most HistogramBound(i)
	// (cumulative, as Prometheus exposes them).
	Buckets [HistogramBuckets]uint64
	// Count counts every duration, those above the last bound included.
	Count uint64
	// Sum adds every duration up.
	Sum time.Duration
}

// Snapshot reads the histogram. Observations racing with it may be seen in
// the counts and not yet in Sum, or the other way round; Count always
// equals the buckets' total.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var out HistogramSnapshot
	var total uint64
	for i := range h.counts {
		total += h.counts[i].Load()
		if i < HistogramBuckets {
			out.Buckets[i] = total
		}
	}
	out.Count, out.Sum = total, time.Duration(h.sum.Load())
	return out
}
