package cell_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// BenchmarkParkedKeepAlives measures what a parked KeepAlive costs the
// master process: N sessions (LOCKCELL_BENCH_PARKED, default 10,000) over
// raw connections of 2,500 sessions each (as a load generator multiplexes
// them), each with one KeepAlive parked. The client side runs in a process
// of its own (this test binary, TestParkedKeepAliveClientProcess), so the
// memory measured is the cell's alone: heap and goroutine stacks in use
// (runtime.ReadMemStats, after a GC) and goroutines
// (runtime.NumGoroutine), with the sessions created and idle, then with
// every KeepAlive parked. The lease is 60 s, so no hold ends while
// measuring. The work is done once whatever b.N is:
//
//	go test -run '^$' -bench ParkedKeepAlives -benchtime 1x ./cell/
//
// LOCKCELL_BENCH_HEAPPROFILE=FILE writes the heap profile with every
// KeepAlive parked; for an exact one, also pass -memprofilerate 1.
func BenchmarkParkedKeepAlives(b *testing.B) {
	n := 10000
	if v := os.Getenv("LOCKCELL_BENCH_PARKED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LOCKCELL_BENCH_PARKED=%q", v)
		}
	}
	conns := (n + 2499) / 2500
	c := fixtures.NewCell(b, 1, fixtures.Options{LeaseTTL: time.Minute,
		SessionLimits: master.Limits{Sessions: n + 100, SessionsPerPrincipal: n + 100}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	_, epoch := srv.IsMaster()
	m := srv.Master()

	cmd := exec.Command(os.Args[0], "-test.run=^TestParkedKeepAliveClientProcess$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), fmt.Sprintf("LOCKCELL_PARKED_CLIENT=%s,%d,%d,%d", srv.ClientAddr(), epoch, n, conns))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close() // the client process ends when its stdin does
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	expect := func(what string) {
		b.Helper()
		for lines.Scan() {
			if lines.Text() == what {
				return
			}
		}
		b.Fatalf("the client process ended before %q: %v", what, lines.Err())
	}
	expect("created")
	heap0, stack0, g0 := settledHeap()
	arrived0 := m.Stats().LeaseLeft.Count
	b.ResetTimer()
	began := time.Now()
	io.WriteString(stdin, "park\n")
	deadline := time.Now().Add(5 * time.Minute)
	for m.Stats().LeaseLeft.Count-arrived0 < uint64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d KeepAlives arrived", m.Stats().LeaseLeft.Count-arrived0, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	parkTime := time.Since(began)
	heap1, stack1, g1 := settledHeap()
	if path := os.Getenv("LOCKCELL_BENCH_HEAPPROFILE"); path != "" {
		// What the parked calls hold, by allocation site: go tool pprof
		// -sample_index=inuse_space.
		runtime.MemProfileRate = 1
		if f, err := os.Create(path); err == nil {
			pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}
	b.StopTimer()
	if calls, _ := m.ParkedKeepAlives(); calls != n {
		b.Fatalf("%d of %d KeepAlives parked while measuring", calls, n)
	}
	perSession := float64(heap1+stack1-heap0-stack0) / float64(n) / 1024
	perGoroutine := float64(g1-g0) / float64(n)
	b.Logf("%d sessions over %d connections: heap in use %.1f -> %.1f MiB, stacks %.1f -> %.1f MiB: %.2f KiB per parked KeepAlive (%.2f heap, %.2f stacks); goroutines %d -> %d (%.3f per parked KeepAlive); all arrived in %v",
		n, conns, float64(heap0)/(1<<20), float64(heap1)/(1<<20), float64(stack0)/(1<<20), float64(stack1)/(1<<20), perSession,
		float64(heap1-heap0)/float64(n)/1024, float64(int64(stack1)-int64(stack0))/float64(n)/1024, g0, g1, perGoroutine, parkTime.Round(time.Millisecond))
	b.ReportMetric(perSession, "KiB/parked")
	b.ReportMetric(perGoroutine, "goroutines/parked")
	b.ReportMetric(float64(n), "sessions")
}

// settledHeap returns the heap and the goroutine stacks in use after a
// GC, and the goroutines,
// once the goroutine count has stopped falling (calls still on their way
// to being parked).
func settledHeap() (heap, stacks uint64, goroutines int) {
	g := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now >= g {
			break
		}
		g = now
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine()
}

// TestParkedKeepAliveClientProcess is BenchmarkParkedKeepAlives's client,
// run in a process of its own; it skips unless LOCKCELL_PARKED_CLIENT is
// set (addr,epoch,n,conns). It creates n sessions over conns raw
// connections and says "created"; on "park" it sends every session's
// KeepAlive, each on a stream of its own that it never reads, and says
// "parked"; it exits when its stdin ends.
func TestParkedKeepAliveClientProcess(t *testing.T) {
	spec := os.Getenv("LOCKCELL_PARKED_CLIENT")
	if spec == "" {
		t.Skip("BenchmarkParkedKeepAlives's client process")
	}
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		t.Fatalf("LOCKCELL_PARKED_CLIENT=%q", spec)
	}
	addr := f[0]
	epoch, _ := strconv.ParseUint(f[1], 10, 64)
	n, _ := strconv.Atoi(f[2])
	conns, _ := strconv.Atoi(f[3])
	muxes := make([]*yamux.Session, conns)
	for i := range muxes {
		muxes[i] = hostileMux(t, addr)
	}
	ids := createRawSessions(t, muxes, epoch, n, 64)
	fmt.Println("created")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() != "park" {
	}
	streams := make([]*yamux.Stream, 0, n)
	for i, id := range ids {
		st, err := muxes[i%conns].OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(encodeFrames(t, &wire.Header{Method: wire.MethodKeepAlive, Session: id, Epoch: epoch},
			&wire.KeepAliveRequest{})); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	fmt.Println("parked")
	for in.Scan() {
	}
	runtime.KeepAlive(streams)
}
