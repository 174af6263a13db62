package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// The state the hostile campaign builds before its baseline: one
// directory of 100,000 children with 240-byte names, created and closed
// by one session.
const (
	bigStateNodes = 100_000
	bigStateDir   = "big"
)

var bigState struct {
	once sync.Once
	f    *FSM
}

// bigFSM returns an FSM holding the campaign's big directory, built once
// per test binary by applying commands as a replica would.
func bigFSM(b *testing.B) *FSM {
	bigState.once.Do(func() {
		h := newFSMT(b)
		s := h.session()
		h.do(s, Command{Principal: "admin", Admin: true, Payload: &OpenArgs{Path: fsmtPath(bigStateDir), Flags: fsmtRWC | FlagDirectory}})
		pad := strings.Repeat("n", 232)
		for i := range bigStateNodes {
			r := h.do(s, Command{Principal: "admin", Admin: true, Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("%s/%07d-%s", bigStateDir, i, pad)), Flags: fsmtRWC}})
			if r.Err != nil {
				b.Fatalf("create child %d: %v", i, r.Err)
			}
			h.do(s, Command{Payload: &CloseArgs{Handle: r.Handle}})
		}
		bigState.f = h.f
	})
	if bigState.f == nil {
		b.Fatal("building the big state failed")
	}
	return bigState.f
}

// heapPeak samples the bytes of heap objects (live and not yet swept)
// until stopped, and reports the most it saw. Sampling misses short
// spikes between samples, so the figure is a lower bound on the peak.
type heapPeak struct {
	stop chan struct{}
	done chan int64
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func readHeapObjects() int64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func startHeapPeak() *heapPeak {
	p := &heapPeak{stop: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		peak := readHeapObjects()
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.done <- max(peak, readHeapObjects())
				return
			case <-t.C:
				peak = max(peak, readHeapObjects())
			}
		}
	}()
	return p
}

func (p *heapPeak) end() int64 {
	close(p.stop)
	return <-p.done
}

// discardSink is a snapshot writer that counts and drops its bytes, so
// the benchmark measures the snapshot's own memory, not a store's.
type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) Close() error                { return nil }
func (s *discardSink) Cancel() error               { return nil }
func (s *discardSink) ID() string                  { return "discard" }

var _ io.Writer = (*discardSink)(nil)

// benchStateMemory runs op b.N times on the big state and reports, per
// op, the bytes allocated and the peak of the heap above the live heap
// before it (in MiB), with the encoded size for scale.
func benchStateMemory(b *testing.B, op func(f *FSM) int64) {
	f := bigFSM(b)
	var size int64
	var peak int64
	var alloc uint64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		live := readHeapObjects()
		p := startHeapPeak()
		b.StartTimer()
		size = op(f)
		b.StopTimer()
		peak = max(peak, p.end()-live)
		runtime.ReadMemStats(&after)
		alloc += after.TotalAlloc - before.TotalAlloc
		b.StartTimer()
	}
	b.ReportMetric(float64(alloc)/float64(b.N)/(1<<20), "alloc-MiB/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(size)/(1<<20), "state-MiB")
}

// BenchmarkSnapshotBigDir measures one Raft snapshot (Snapshot and
// Persist) of the campaign's 100,000-child directory: what a replica
// allocates every SnapshotThreshold entries.
func BenchmarkSnapshotBigDir(b *testing.B) {
	benchStateMemory(b, func(f *FSM) int64 {
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		sink := &discardSink{}
		if err := persist(s, sink); err != nil {
			b.Fatal(err)
		}
		s.Release()
		return sink.n
	})
}

// BenchmarkStateHashBigDir measures one StateHash of the same state: what
// one admin CellStatus with the state hash costs a replica.
func BenchmarkStateHashBigDir(b *testing.B) {
	benchStateMemory(b, func(f *FSM) int64 {
		if _, _, err := f.StateHash(); err != nil {
			b.Fatal(err)
		}
		return 0
	})
}

// BenchmarkRestoreBigDir measures one Restore of the big state's snapshot:
// what a follower that installs a snapshot from its leader (or a replica
// that starts from one) allocates, and its heap peak above the live heap
// before it, the snapshot bytes excluded.
func BenchmarkRestoreBigDir(b *testing.B) {
	f := bigFSM(b)
	snap, err := f.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	var sink fsmtSink
	if err := persist(snap, &sink); err != nil {
		b.Fatal(err)
	}
	data := sink.Bytes()
	benchStateMemory(b, func(*FSM) int64 {
		g := NewFSM(fsmtCell, fsmtLogger())
		if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
		return int64(len(data))
	})
}

// BenchmarkBackupBigDir measures one backup of the same state (the admin's
// Backup call): the file it makes is held until paged out, the copy of the
// state it sorts and encodes is garbage after; the file itself is on
// disk (an unlinked temporary file), so it costs no heap.
func BenchmarkBackupBigDir(b *testing.B) {
	benchStateMemory(b, func(f *FSM) int64 {
		bk, err := f.Backup(1, time.Unix(1, 0))
		if err != nil {
			b.Fatal(err)
		}
		bk.Close()
		return bk.Size
	})
}
