package cell_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/fixtures/hostile"
	"lockcell/wire"
)

// envMemProfile names a file for a heap profile of the replica taken at
// the RSS peak of TestMemoryAttackKeepsRSSBounded (the campaign's memory
// class against one in-process replica).
const envMemProfile = "LOCKCELL_MEMATTACK_PROFILE"

// envMemSources sets how many source addresses the attack comes from (2 by
// default: the per-IP budgets bind). Five or more make the process-wide
// budget bind, as against the master of the hostile campaign.
const envMemSources = "LOCKCELL_MEMATTACK_SOURCES"

// The hostile campaign's memory attack (cmd/hostile-attacker, class
// memory: from two addresses, three connections each, 200 streams per
// connection each holding an almost-full frame, 50 unread 256 KiB replies
// per connection, redialling when cut) against one replica with the
// default budgets: the replica's RSS stays within 256 MiB of its
// baseline while the attack runs. Under the race detector, whose shadow
// memory swamps RSS, the memory the Go runtime holds from the system
// (heap not released, stacks) stands in for it.
//
// make test runs it; the hostile campaign's memory class (five replicas,
// with a victim's rate and latency judged too) runs under make torture.
func TestMemoryAttackKeepsRSSBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an attacker process for several seconds")
	}
	certs := fixtures.TestCerts(t, "attacker")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, LeaseTTL: 5 * time.Second})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 3*time.Minute)
	adm := c.Client(t)
	blob := c.Name("blob")
	if _, err := adm.Open(ctx, blob, client.Write|client.Create,
		client.WithContents(bytes.Repeat([]byte("b"), wire.MaxContents))); err != nil {
		t.Fatal(err)
	}
	bin := hostile.BuildAttacker(t)
	sources := []string{"127.0.0.2", "127.0.0.3"}
	if s := os.Getenv(envMemSources); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 200 {
			t.Fatalf("%s=%q: want a number of addresses from 1 to 200", envMemSources, s)
		}
		sources = sources[:0]
		for i := range n {
			sources = append(sources, fmt.Sprintf("127.0.0.%d", 2+i))
		}
	}
	cfg := hostile.Config{Class: hostile.ClassMemory, Cell: c.ClientConfig().Cell, Master: srv.ClientAddr(),
		ClientAddrs: c.Addrs(), CAFile: certs.CAFile(), Sources: sources, Blob: blob}
	cfg.CertFile, cfg.KeyFile = certs.UserFiles(t, "attacker")
	t.Logf("config %+v", cfg)

	runtime.GC()
	base := heldMemory(t)
	a := hostile.StartAttacker(t, bin, cfg, filepath.Join(t.TempDir(), "attacker.log"))
	if !a.WaitReady(30 * time.Second) {
		st := srv.ConnStats()
		if rep := a.Stop(60 * time.Second); rep != nil {
			t.Logf("attacker: %s; %v", rep.Refusals(), rep.Figures)
		}
		t.Fatalf("the attack never got going within 30 s (server: %+v): %s", st, a.Log)
	}
	window := 8 * time.Second
	if s := os.Getenv("LOCKCELL_MEMATTACK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	var peak int64
	var peakAt time.Duration
	var prof bytes.Buffer
	var atPeak runtime.MemStats
	start := time.Now()
	for time.Since(start) < window {
		time.Sleep(100 * time.Millisecond)
		rss := heldMemory(t)
		if rss > peak {
			peak, peakAt = rss, time.Since(start)
			runtime.ReadMemStats(&atPeak)
			if os.Getenv(envMemProfile) != "" {
				prof.Reset()
				pprof.WriteHeapProfile(&prof)
			}
		}
	}
	st := srv.ConnStats()
	rep := a.Stop(60 * time.Second)
	if p := os.Getenv(envMemProfile); p != "" {
		if err := os.WriteFile(p, prof.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("at the peak: heap in use %d MiB, heap idle %d MiB (released %d), stacks %d MiB, next GC at %d MiB, %d GCs",
		atPeak.HeapInuse>>20, atPeak.HeapIdle>>20, atPeak.HeapReleased>>20, atPeak.StackInuse>>20, atPeak.NextGC>>20, atPeak.NumGC)
	what := "RSS"
	if raceEnabled {
		what = "runtime-held memory (race detector on)"
	}
	t.Logf("%s baseline %d MiB, peak %d MiB (+%d MiB) at %.1fs; request bytes peak %d KiB; %+v",
		what, base>>20, peak>>20, (peak-base)>>20, peakAt.Seconds(), st.RequestBytesPeak>>10, st)
	if rep != nil {
		t.Logf("attacker: %s; %v", rep.Refusals(), rep.Figures)
	}
	if peak-base > 256<<20 {
		t.Errorf("the replica's %s grew %d MiB over its baseline during the attack (bound 256 MiB)", what, (peak-base)>>20)
	}
}

// heldMemory is the process's RSS, or under the race detector what the
// Go runtime holds from the system for its heap and stacks.
func heldMemory(t *testing.T) int64 {
	t.Helper()
	if raceEnabled {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapSys - ms.HeapReleased + ms.StackSys)
	}
	v, err := fixtures.ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
