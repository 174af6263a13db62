package bench

import (
	"math"
	"math/bits"
	"time"
)

// Latencies are recorded in a histogram rather than kept one by one, so a
// long run of cache hits (millions of operations a second) costs a few
// hundred KiB, not gigabytes. Values are counted in units of 0.1 µs, the
// resolution the figures are printed at: below 409.6 µs every unit has
// its own counter (exact), above it each power of two is cut into 2048
// equal buckets, so a reported percentile is within 0.025 % (1/4096 of
// its bucket's lower end) of the exact nearest-rank value. Buckets are allocated in chunks of 2048 counters as
// values land in them.
const (
	unit      = 100 * time.Nanosecond
	chunkBits = 11
	chunkLen  = 1 << chunkBits // counters per chunk
	exactMax  = 2 * chunkLen   // values below this (in units) are exact
	maxChunks = 64 - chunkBits + 1
)

// histogram counts one client's latencies. It is not safe for concurrent
// use: each client records into its own and they are merged at the end.
type histogram struct {
	chunks [maxChunks]*[chunkLen]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

// locate returns the chunk and offset that count v units.
func locate(v uint64) (int, int) {
	if v < exactMax {
		return int(v >> chunkBits), int(v & (chunkLen - 1))
	}
	e := bits.Len64(v) - chunkBits - 1 // v>>e is in [chunkLen, 2*chunkLen)
	return 1 + e, int(v>>e) - chunkLen
}

// bucketValue is the value reported for a bucket: exact below exactMax,
// else the middle of the units it counts (lo to lo+2^e-1), which is
// within 2^(e-1) units of any latency that rounds to one of them.
func bucketValue(chunk, off int) time.Duration {
	if chunk < 2 {
		return time.Duration(chunk<<chunkBits+off) * unit
	}
	e := chunk - 1
	lo := uint64(chunkLen+off) << e
	return time.Duration(2*lo+(uint64(1)<<e)-1) * (unit / 2)
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c, off := locate(uint64((d + unit/2) / unit))
	if h.chunks[c] == nil {
		h.chunks[c] = new([chunkLen]uint64)
	}
	h.chunks[c][off]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for c, ch := range o.chunks {
		if ch == nil {
			continue
		}
		if h.chunks[c] == nil {
			h.chunks[c] = new([chunkLen]uint64)
		}
		for i, n := range ch {
			h.chunks[c][i] += n
		}
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// percentiles returns the nearest-rank value of each fraction in ps
// (ascending): the smallest recorded latency with at least ceil(p*n) of
// the n latencies at or below it. A bucket's midpoint never exceeds the
// largest latency recorded.
func (h *histogram) percentiles(ps ...float64) []time.Duration {
	out := make([]time.Duration, len(ps))
	if h.n == 0 {
		return out
	}
	ranks := make([]uint64, len(ps))
	for i, p := range ps {
		k := uint64(math.Ceil(p * float64(h.n)))
		ranks[i] = min(max(k, 1), h.n)
	}
	var cum uint64
	i := 0
	for c, ch := range h.chunks {
		if ch == nil {
			continue
		}
		for off, n := range ch {
			if n == 0 {
				continue
			}
			cum += n
			for i < len(ranks) && cum >= ranks[i] {
				out[i] = min(bucketValue(c, off), h.max)
				i++
			}
			if i == len(ranks) {
				return out
			}
		}
	}
	return out
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// us is d in microseconds rounded to 0.1, as the figures are printed.
func us(d time.Duration) float64 { return round1(float64(d) / float64(time.Microsecond)) }

func round1(f float64) float64 { return math.Round(f*10) / 10 }
