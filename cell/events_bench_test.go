package cell_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// BenchmarkWriteWithWatchers measures what a write costs the master when
// N handles (LOCKCELL_BENCH_WATCHERS, default 20,000) watch the file for
// content events: raw-wire sessions of 100 handles each, over 4
// connections, that never send a KeepAlive, so every event queued for
// them stays queued. Each op is one write by a client of its own, which
// returns once the master applied it. Reported besides ns/op:
// apply-ms/op, the state machine's mean time per applied entry (the Raft
// apply goroutine, where the master's observer runs); heap-MiB, how much
// the process's live heap grew over the writes (after a GC); queued-MiB,
// the master's estimate of its queued events at the end (eventBytes).
// The setup is done once whatever b.N is:
//
//	go test -run '^$' -bench WriteWithWatchers -benchtime 20x ./cell/
func BenchmarkWriteWithWatchers(b *testing.B) {
	n := 20000
	if v := os.Getenv("LOCKCELL_BENCH_WATCHERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LOCKCELL_BENCH_WATCHERS=%q", v)
		}
	}
	const perSession, conns = 100, 4
	sessions := (n + perSession - 1) / perSession
	c := fixtures.NewCell(b, 1, fixtures.Options{LeaseTTL: time.Minute,
		SessionLimits: master.Limits{Sessions: sessions + 100, SessionsPerPrincipal: sessions + 100}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := c.Name("f")
	writer := c.Client(b)
	h, err := writer.Open(ctx, name, client.Read|client.Write|client.Create, client.WithContents([]byte("v0")))
	if err != nil {
		b.Fatal(err)
	}

	muxes := make([]*fixtures.WireMux, conns)
	for i := range muxes {
		conn, err := net.Dial("tcp", srv.ClientAddr())
		if err != nil {
			b.Fatal(err)
		}
		if muxes[i], err = fixtures.NewWireMux(conn, srv.ClientAddr(), nil); err != nil {
			b.Fatal(err)
		}
		defer muxes[i].Close()
	}
	_, epoch := srv.IsMaster()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				mux := muxes[i%conns]
				var cs wire.CreateSessionResponse
				st, err := mux.Call(ctx, wire.Header{Method: wire.MethodCreateSession, Epoch: epoch}, &wire.CreateSessionRequest{ClientName: "watcher"}, &cs)
				if err == nil && st.Code != wire.CodeOK {
					err = fmt.Errorf("create session: %+v", st)
				}
				for j := 0; err == nil && j < min(perSession, n-i*perSession); j++ {
					var open wire.OpenResponse
					st, err = mux.Call(ctx, wire.Header{Method: wire.MethodOpen, Session: cs.Session, Epoch: epoch, Seq: uint64(j + 1), Ack: uint64(j)},
						&wire.OpenRequest{Path: name, Flags: wire.OpenRead, EventMask: wire.MaskContentsModified}, &open)
					if err == nil && st.Code != wire.CodeOK {
						err = fmt.Errorf("open: %+v", st)
					}
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range sessions {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	apply0 := srv.Replica().Stats().Apply
	b.ResetTimer()
	for i := range b.N {
		if err := h.SetContents(ctx, []byte("v"+strconv.Itoa(i+1))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	apply := srv.Replica().Stats().Apply
	runtime.GC()
	runtime.ReadMemStats(&after)
	if entries := apply.Count - apply0.Count; entries > 0 {
		b.ReportMetric(float64(apply.Sum-apply0.Sum)/float64(entries)/1e6, "apply-ms/op")
	}
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), "heap-MiB")
	b.ReportMetric(float64(srv.Master().EventStats().QueuedBytes)/(1<<20), "queued-MiB")
	if ok, e := srv.IsMaster(); !ok || e != epoch {
		b.Fatalf("the master lost its leadership (serving %v, epoch %d, was %d)", ok, e, epoch)
	}
}
