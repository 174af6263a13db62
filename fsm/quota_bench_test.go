package fsm

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkNodeCost measures what one empty file costs a replica, in its
// snapshot and in its heap, with names of typical length
// (/ls/c/dir-NNN/file-NNNNNN) and a creator: the per-node figure the
// default quotas are sized with (a snapshot is at most 1 GiB).
func BenchmarkNodeCost(b *testing.B) {
	const dirs, perDir = 100, 1000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h := newFSMT(b)
		s := h.session()
		for d := range dirs {
			h.do(s, Command{Principal: "principal-1", Admin: true, Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("dir-%03d", d)), Flags: fsmtRWC | FlagDirectory}})
			for f := range perDir {
				r := h.do(s, Command{Principal: "principal-1", Admin: true, Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("dir-%03d/file-%06d", d, f)), Flags: fsmtRWC}})
				h.do(s, Command{Payload: &CloseArgs{Handle: r.Handle}})
			}
		}
		h.f.mu.Lock()
		for _, sess := range h.f.sessions {
			sess.Results = nil // the de-duplication table is not the nodes' cost
		}
		h.f.mu.Unlock()
		runtime.GC()
		runtime.ReadMemStats(&after)
		nodes := float64(h.f.Usage().Nodes)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/nodes, "heap-B/node")
		b.ReportMetric(float64(len(h.snapshot()))/nodes, "snapshot-B/node")
		runtime.KeepAlive(h)
	}
}

// BenchmarkHandleCost measures what one open handle costs every replica:
// heap (the handle, its session's and its node's indexes) and snapshot
// bytes, over 100,000 handles of 100 sessions on 1,000 files. The
// master's handle caps (master.Limits.Handles, HandlesPerPrincipal) are
// sized from it.
func BenchmarkHandleCost(b *testing.B) {
	const files, sessions, perSession = 1000, 100, 1000
	for range b.N {
		h := newFSMT(b)
		s0 := h.session()
		for f := range files {
			r := h.do(s0, Command{Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("file-%04d", f)), Flags: fsmtRWC}})
			h.do(s0, Command{Payload: &CloseArgs{Handle: r.Handle}})
		}
		var ss []uint64
		for range sessions {
			ss = append(ss, h.session())
		}
		clearResults := func() {
			h.f.mu.Lock()
			for _, sess := range h.f.sessions {
				sess.Results = nil // the de-duplication table is not the handles' cost
			}
			h.f.mu.Unlock()
		}
		clearResults()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		snap0 := len(h.snapshot())
		for _, s := range ss {
			for i := range perSession {
				h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("file-%04d", i%files)), Flags: FlagRead | FlagWrite, EventMask: 1}})
			}
		}
		clearResults()
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := float64(sessions * perSession)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/handle")
		b.ReportMetric(float64(len(h.snapshot())-snap0)/n, "snapshot-B/handle")
		runtime.KeepAlive(h)
	}
}
