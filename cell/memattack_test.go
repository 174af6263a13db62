package cell_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"lockcell/cell/wire"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/fixtures/hostile"
)

// envMemProfile names a file for a heap profile of the replica taken at
// the RSS peak of TestMemoryAttackKeepsRSSBounded (the campaign's memory
// class against one in-process replica).
const envMemProfile = "LOCKCELL_MEMATTACK_PROFILE"

// The hostile campaign's memory attack (cmd/hostile-attacker, class
// memory: from two addresses, three connections each, 200 streams per
// connection each holding an almost-full frame, 50 unread 256 KiB replies
// per connection, redialling when cut) against one replica with the
// default budgets: the replica's RSS stays well within 256 MiB of its
// baseline while the attack runs.
func TestMemoryAttackKeepsRSSBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an attacker process for several seconds")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory makes RSS meaningless")
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
	bin := hostile.BuildAttacker(t, "..")
	cfg := hostile.Config{Class: hostile.ClassMemory, Cell: c.ClientConfig().Cell, Master: srv.ClientAddr(),
		ClientAddrs: c.Addrs(), CAFile: certs.CAFile(), Sources: []string{"127.0.0.2", "127.0.0.3"}, Blob: blob}
	cfg.CertFile, cfg.KeyFile = certs.UserFiles(t, "attacker")
	t.Logf("config %+v", cfg)

	runtime.GC()
	base := selfRSS(t)
	a := hostile.StartAttacker(t, bin, cfg, filepath.Join(t.TempDir(), "attacker.log"))
	if !a.WaitReady(30 * time.Second) {
		t.Fatalf("the attack never got going: %s", a.Log)
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
		rss := selfRSS(t)
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
	t.Logf("RSS baseline %d MiB, peak %d MiB (+%d MiB) at %.1fs; request bytes peak %d KiB; %+v",
		base>>20, peak>>20, (peak-base)>>20, peakAt.Seconds(), st.RequestBytesPeak>>10, st)
	if rep != nil {
		t.Logf("attacker: %s; %v", rep.Refusals(), rep.Figures)
	}
	if peak-base > 256<<20 {
		t.Errorf("the replica's RSS grew %d MiB over its baseline during the attack (bound 256 MiB)", (peak-base)>>20)
	}
}

func selfRSS(t *testing.T) int64 {
	t.Helper()
	v, err := hostile.ReadRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
