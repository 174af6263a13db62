package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactPct is the nearest-rank percentile of sorted latencies, as the
// peer harness computes it.
func exactPct(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// The histogram's percentiles against the exact nearest rank of the same
// latencies, recorded by four "clients" and merged: equal to the 0.1 µs
// below 409.6 µs, within 0.025 % above it; max and mean exact.
func TestHistogramNearestRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []struct {
		lo, hi float64 // log10 of ns
		n      int
	}{{2, 5.5, 5000}, {3, 9.5, 20000}, {5, 7, 1}, {4, 4.1, 3}} {
		var parts [4]histogram
		var all []time.Duration
		var sum time.Duration
		for i := range spread.n {
			d := time.Duration(math.Pow(10, spread.lo+rng.Float64()*(spread.hi-spread.lo)))
			parts[i%4].add(d)
			all = append(all, d)
			sum += d
		}
		var h histogram
		for i := range parts {
			h.merge(&parts[i])
		}
		slices.Sort(all)
		ps := []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1}
		got := h.percentiles(ps...)
		for i, p := range ps {
			want := exactPct(all, p)
			if i > 0 && got[i] < got[i-1] {
				t.Fatalf("p%v = %v below p%v = %v", p, got[i], ps[i-1], got[i-1])
			}
			if want < exactMax*unit {
				// Rounded to the unit, or the largest latency itself.
				if got[i] != (want+unit/2)/unit*unit && (got[i] != h.max || want != h.max) {
					t.Fatalf("n=%d p%v = %v, exact %v", spread.n, p, got[i], want)
				}
			} else if rel := math.Abs(float64(got[i]-want)) / float64(want); rel > 0.00025 {
				t.Fatalf("n=%d p%v = %v, exact %v (off by %.5f)", spread.n, p, got[i], want, rel)
			}
		}
		if h.n != uint64(spread.n) || h.max != all[len(all)-1] || h.mean() != sum/time.Duration(spread.n) || got[len(got)-1] > h.max {
			t.Fatalf("n %d max %v mean %v; want %d %v %v", h.n, h.max, h.mean(), spread.n, all[len(all)-1], sum/time.Duration(spread.n))
		}
	}
	var empty histogram
	if got := empty.percentiles(0.5); got[0] != 0 || empty.mean() != 0 {
		t.Fatalf("empty histogram: %v", got)
	}
}

// A long run of fast operations stays small: memory grows with the
// spread of latencies, not with their number.
func TestHistogramBounded(t *testing.T) {
	var h histogram
	for i := range 1_000_000 {
		h.add(time.Duration(500+i%3000) * time.Nanosecond)
	}
	chunks := 0
	for _, c := range h.chunks {
		if c != nil {
			chunks++
		}
	}
	if chunks > 1 {
		t.Fatalf("%d chunks for latencies under 4 µs", chunks)
	}
}
