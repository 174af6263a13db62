package fsm

import (
	"strconv"
	"testing"
	"time"
)

// A duration lands in the first bucket whose bound is at least it, and the
// snapshot's buckets are cumulative, as Prometheus exposes them.
func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	for _, c := range []struct {
		d      time.Duration
		bucket int // HistogramBuckets: above every bound
	}{
		{-time.Second, 0}, {0, 0}, {histogramBase, 0}, {histogramBase + 1, 1}, {2 * histogramBase, 1},
		{2*histogramBase + 1, 2}, {time.Millisecond, 6}, {HistogramBound(HistogramBuckets - 1), HistogramBuckets - 1},
		{HistogramBound(HistogramBuckets-1) + 1, HistogramBuckets}, {time.Hour, HistogramBuckets},
	} {
		var one Histogram
		one.Observe(c.d)
		s := one.Snapshot()
		for i := range HistogramBuckets {
			want := uint64(0)
			if i >= c.bucket {
				want = 1
			}
			if s.Buckets[i] != want {
				t.Errorf("%v: bucket %d (bound %v) holds %d, want %d", c.d, i, HistogramBound(i), s.Buckets[i], want)
			}
		}
		if s.Count != 1 || s.Sum != max(c.d, 0) {
			t.Errorf("%v: count %d sum %v", c.d, s.Count, s.Sum)
		}
		h.Observe(c.d)
	}
	if s := h.Snapshot(); s.Count != 10 || s.Buckets[HistogramBuckets-1] != 8 {
		t.Errorf("all: count %d, last finite bucket %d", s.Count, s.Buckets[HistogramBuckets-1])
	}
}

// One observation is what the store, the FSM and the master pay on their
// hot paths besides the clock reads.
func BenchmarkHistogramObserve(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 7 * time.Microsecond
			h.Observe(d % time.Second)
		}
	})
}

// The status page's lock scan over a large namespace with a few locks in
// use: what a page computation holds the FSM's read lock for.
func BenchmarkBusiestLocks100k(b *testing.B) {
	f := NewFSM("t", nil)
	for i := range 100_000 {
		n := &Node{Path: "/ls/t/n" + strconv.Itoa(i)}
		if i%1000 == 0 {
			n.LockMode, n.Holders = LockExclusive, []Holder{{Handle: uint64(i), Session: 1}}
			n.Waiters = make([]Waiter, i%7)
		}
		f.nodes[n.Path] = n
	}
	b.ResetTimer()
	for b.Loop() {
		if got := f.BusiestLocks(10); len(got) != 10 {
			b.Fatal(len(got))
		}
	}
}
