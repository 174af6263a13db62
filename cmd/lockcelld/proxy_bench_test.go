package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/fixtures"
)

// BenchmarkProxyMasterCost measures what proxies save the master: N
// sessions (LOCKCELL_BENCH_SESSIONS, default 1,000) held idle for
// LOCKCELL_BENCH_SECONDS (default 40) against a fresh five-process cell
// (lease 12 s), first directly from the raw load generator, then, on a
// second fresh cell, through four `lockcelld proxy` processes (a load
// generator each, a quarter of the sessions each). It reports the
// master's CPU over the hold window and its RSS growth per session, each
// way, and their ratios, from this one run. The work is done once
// whatever b.N is:
//
//	go test -run '^$' -bench ProxyMasterCost -benchtime 1x -timeout 30m ./cmd/lockcelld/
//
// LOCKCELL_BENCH_MAX_LEASE (a Go duration) lets both cells lengthen
// leases under load (--max-lease), as 100,000 sessions on one master
// need; LOCKCELL_BENCH_WAY=proxied runs the proxied half alone;
// LOCKCELL_BENCH_HEAP (a folder) saves the master's heap profile at the
// end of each hold there (direct.heap, proxied.heap), for
// `go tool pprof -sample_index inuse_space`; LOCKCELL_BENCH_GOGC sets the
// replicas' GOGC.
func BenchmarkProxyMasterCost(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs ten processes and holds sessions for minutes")
	}
	n := benchEnvInt(b, "LOCKCELL_BENCH_SESSIONS", 1000)
	hold := time.Duration(benchEnvInt(b, "LOCKCELL_BENCH_SECONDS", 40)) * time.Second
	bin := fixtures.BuildLockcelld(b)
	if os.Getenv("LOCKCELL_BENCH_WAY") == "proxied" { // one way alone, to look into it
		holdSessions(b, bin, n, hold, 4)
		return
	}
	direct := holdSessions(b, bin, n, hold, 0)
	proxied := holdSessions(b, bin, n, hold, 4)
	for _, r := range []costRun{direct, proxied} {
		b.Logf("%s: %d sessions held %v: master CPU %.2f s (%.1f%% of a core; %.2f s over the idle cell's), RSS +%.0f MiB (%.2f KiB/session); proxies CPU %.2f s; KeepAlives answered %d",
			r.name, n, r.window.Round(time.Second), r.cpu.Seconds(), 100*r.cpu.Seconds()/r.window.Seconds(), r.sessionsCPU().Seconds(),
			float64(r.rssGrowth)/(1<<20), float64(r.rssGrowth)/1024/float64(n), r.proxyCPU.Seconds(), r.keepAlives)
	}
	cpuRatio := direct.cpu.Seconds() / max(proxied.cpu.Seconds(), 1e-9)
	sessRatio := direct.sessionsCPU().Seconds() / max(proxied.sessionsCPU().Seconds(), 1e-3)
	b.Logf("direct / through 4 proxies: the sessions' master CPU (over the idle cell's) %.1fx", sessRatio)
	b.ReportMetric(sessRatio, "sessions-cpu-ratio")
	rssRatio := float64(direct.rssGrowth) / float64(max(proxied.rssGrowth, 1))
	b.Logf("direct / through 4 proxies: master CPU %.1fx, master RSS growth %.1fx", cpuRatio, rssRatio)
	b.ReportMetric(direct.cpu.Seconds(), "direct-master-cpu-s")
	b.ReportMetric(proxied.cpu.Seconds(), "proxied-master-cpu-s")
	b.ReportMetric(float64(direct.rssGrowth)/1024/float64(n), "direct-master-KiB/session")
	b.ReportMetric(float64(proxied.rssGrowth)/1024/float64(n), "proxied-master-KiB/session")
	b.ReportMetric(cpuRatio, "cpu-ratio")
	b.ReportMetric(rssRatio, "rss-ratio")
}

// proxyFigures picks from a proxy's /metrics the series that say why
// its clients wait, those not 0: its client port's budgets and refusals,
// and its leases and batches.
func proxyFigures(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, p := range []string{"lockcell_proxy_client_", "lockcell_proxy_keepalives_total", "lockcell_proxy_batch_failures_total",
			"lockcell_proxy_batches_in_flight", "lockcell_proxy_session_leases", "lockcell_proxy_sessions "} {
			if strings.HasPrefix(l, p) && !strings.HasSuffix(l, " 0") { // what is 0 says nothing here
				out = append(out, strings.TrimPrefix(l, "lockcell_proxy_"))
			}
		}
	}
	return strings.Join(out, "; ")
}

// costRun is one way of holding the sessions, measured.
type costRun struct {
	name       string
	window     time.Duration
	cpu        time.Duration // the master's, over the hold window
	idleCPU    time.Duration // what the idle cell's master spends over as long
	rssGrowth  int64         // the master's RSS after the hold less before the sessions
	proxyCPU   time.Duration // the proxies', over the hold window
	keepAlives int64
}

// sessionsCPU is the master's CPU over the window less the idle cell's.
func (r costRun) sessionsCPU() time.Duration { return max(r.cpu-r.idleCPU, 0) }

// holdSessions starts a fresh cell, holds n sessions on it (through
// proxies processes when proxies > 0) for hold, and measures its master.
func holdSessions(b *testing.B, bin string, n int, hold time.Duration, proxies int) costRun {
	b.Helper()
	run := costRun{name: "direct"}
	if proxies > 0 {
		run.name = fmt.Sprintf("through %d proxies", proxies)
	}
	room := n + n/10
	lim := cell.DefaultSessionLimits
	streams := strconv.Itoa(max(cell.DefaultConnLimits.MaxStreams, 2*room))
	args := []string{
		"--max-sessions", strconv.Itoa(max(lim.Sessions, room)),
		"--max-sessions-per-principal", strconv.Itoa(max(lim.SessionsPerPrincipal, room)),
		"--max-streams", streams, "--max-streams-per-ip", streams, "--max-streams-per-principal", streams,
		// The load generator's sessions hold no handle and make no call
		// but KeepAlives: the idle-session timeout would close them.
		"--idle-session-timeout", "0",
	}
	if v := os.Getenv("LOCKCELL_BENCH_MAX_LEASE"); v != "" { // leases lengthen under load, both ways
		if _, err := time.ParseDuration(v); err != nil {
			b.Fatalf("LOCKCELL_BENCH_MAX_LEASE=%q: want a Go duration such as 60s", v)
		}
		args = append(args, "--max-lease", v)
	}
	heapDir := os.Getenv("LOCKCELL_BENCH_HEAP")
	if heapDir != "" {
		args = append(args, "--pprof")
	}
	var env []string
	if v := os.Getenv("LOCKCELL_BENCH_GOGC"); v != "" { // the replicas' garbage collector target (Go's GOGC)
		env = append(env, "GOGC="+v)
	}
	pc := fixtures.NewProcCellWith(b, bin, "bench", 5, 12*time.Second, fixtures.ProcOptions{ExtraArgs: args, HTTP: heapDir != "", Env: env})
	defer pc.KillAll()
	mi := pc.MasterIndex(30 * time.Second)
	pid := pc.PID(mi)
	targets := [][]string{pc.Addrs()}
	var px *fixtures.Procs
	var pdir string
	var proxyHTTP []string // the proxies' HTTP ports, scraped with the progress
	if proxies > 0 {
		ports := fixtures.FreePorts(b, 2*proxies) // a client port and an HTTP port each
		for i := range proxies {
			proxyHTTP = append(proxyHTTP, fmt.Sprintf("127.0.0.1:%d", ports[proxies+i]))
		}
		pdir = b.TempDir()
		dir := pdir
		px = fixtures.NewProcs(fixtures.ProcsConfig{Bin: bin, N: proxies,
			Args: func(i int) []string {
				return []string{"--log-level", cmp.Or(os.Getenv("LOCKCELL_BENCH_PROXY_LOG"), "info"), "proxy", "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--peers", strings.Join(pc.Addrs(), ","),
					"--insecure", "--max-streams-per-conn", strconv.Itoa(max(8192, room)),
					"--max-streams-per-ip", streams, "--max-streams-per-principal", streams, "--max-streams", streams,
					// The load generator is a crowd of clients from one address.
					"--max-kept-streams-per-ip", streams, "--max-kept-streams-per-principal", streams,
					"--http", proxyHTTP[i]}
			},
			OpenLog: func(i int) (*os.File, error) { return os.Create(filepath.Join(dir, fmt.Sprintf("proxy-%d.log", i))) }})
		defer px.KillAll()
		targets = nil
		for i := range proxies {
			if err := px.Start(i); err != nil {
				b.Fatal(err)
			}
			targets = append(targets, []string{fmt.Sprintf("127.0.0.1:%d", ports[i])})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The idle cell's own cost (Raft heartbeats, the proof loop, the
	// runtime), measured over half the hold before any session exists,
	// is taken off the hold window's: what is left is the sessions'.
	idle0, err := fixtures.ProcCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	it0 := time.Now()
	sleepOrDone(ctx, hold/2)
	idle1, _ := fixtures.ProcCPU(pid)
	idleRate := (idle1 - idle0).Seconds() / time.Since(it0).Seconds()
	rssBefore, _ := fixtures.ProcRSS(pid)
	// A load generator process per target (loadgen_proc_test.go), started
	// together (the proxies' clients arrive at once, as a fleet's would); a
	// line on stderr every 10 s shows each one's progress, which a run of
	// minutes needs.
	var lgs []*loadGenProc
	for i, addrs := range targets {
		share := n / len(targets)
		if i < n%len(targets) {
			share++
		}
		lg, err := startLoadGenProc(fixtures.LoadGenConfig{Addrs: addrs, Sessions: share, Proxied: proxies > 0,
			Conns: max(1, (share+benchSessionsPerConn-1)/benchSessionsPerConn), DialTimeout: 20 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer lg.Stop()
		lgs = append(lgs, lg)
	}
	progressDone := make(chan struct{})
	defer close(progressDone)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
			}
			for i, addr := range proxyHTTP {
				fmt.Fprintf(os.Stderr, "ProxyMasterCost: proxy %d: %s\n", i, proxyFigures(scrape(b, addr)))
			}
			for i, lg := range lgs {
				st := lg.Stats()
				fmt.Fprintf(os.Stderr, "ProxyMasterCost: %s: generator %d: created %d live %d keepalives %d expiries %d jeopardies %d reconnects %d transport %d unavailable %d other %d overhead p99 %v; last error %q\n",
					run.name, i, st.Created, st.Live, st.KeepAlives, st.Expiries, st.Jeopardies, st.Reconnects, st.TransportErrors,
					st.Unavailable, st.OtherErrors, st.OverheadP99, st.LastError)
			}
		}
	}()
	startErrs := make(chan error, len(lgs))
	for _, lg := range lgs {
		go func() { startErrs <- lg.Start(ctx) }() // each waits for a proxy still starting
	}
	for range lgs {
		if err := <-startErrs; err != nil {
			b.Fatalf("%s: create sessions: %v", run.name, err)
		}
	}
	proxyCPU := func() time.Duration {
		var sum time.Duration
		for i := range proxies {
			d, _ := fixtures.ProcCPU(px.PID(i))
			sum += d
		}
		return sum
	}
	cpu0, err := fixtures.ProcCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	p0 := proxyCPU()
	var ka0 int64
	for _, lg := range lgs {
		ka0 += lg.Stats().KeepAlives
	}
	t0 := time.Now()
	sleepOrDone(ctx, hold)
	run.window = time.Since(t0)
	cpu1, err := fixtures.ProcCPU(pid)
	if err != nil {
		b.Fatalf("%s: master process: %v", run.name, err)
	}
	run.cpu, run.proxyCPU = cpu1-cpu0, proxyCPU()-p0
	run.idleCPU = time.Duration(idleRate * float64(run.window))
	rss, _ := fixtures.ProcRSS(pid)
	run.rssGrowth = rss - rssBefore
	if heapDir != "" {
		name := "direct.heap"
		if proxies > 0 {
			name = "proxied.heap"
		}
		if err := saveHeapProfile(pc.HTTPAddrs()[mi], filepath.Join(heapDir, name)); err != nil {
			b.Logf("%s: master heap profile: %v", run.name, err)
		}
	}
	var expiries, jeopardies, live int64
	for _, lg := range lgs {
		st := lg.Stats()
		run.keepAlives += st.KeepAlives
		expiries += st.Expiries
		jeopardies += st.Jeopardies
		live += st.Live
	}
	run.keepAlives -= ka0
	if expiries != 0 || jeopardies != 0 || live != int64(n) {
		for i, lg := range lgs {
			b.Logf("load generator %d: %+v", i, lg.Stats())
		}
		for i := range proxies {
			log, _ := os.ReadFile(filepath.Join(pdir, fmt.Sprintf("proxy-%d.log", i)))
			if len(log) > 2000 {
				log = log[len(log)-2000:]
			}
			b.Logf("proxy %d log (tail):\n%s", i, log)
		}
		b.Fatalf("%s: %d of %d sessions alive, %d expiries, %d jeopardies", run.name, live, n, expiries, jeopardies)
	}
	for _, lg := range lgs {
		lg.Stop()
	}
	// Also on stderr as it happens: a later failure keeps the benchmark's
	// summary from being logged.
	fmt.Fprintf(os.Stderr, "ProxyMasterCost: %s: %d sessions, hold %v: master CPU %.2f s (idle cell's over as long %.2f s), RSS +%.0f MiB (%.2f KiB/session), proxies CPU %.2f s\n",
		run.name, n, run.window.Round(time.Second), run.cpu.Seconds(), run.idleCPU.Seconds(), float64(run.rssGrowth)/(1<<20),
		float64(run.rssGrowth)/1024/float64(n), run.proxyCPU.Seconds())
	return run
}

// saveHeapProfile writes the heap profile of the replica whose HTTP port
// is addr (served with --pprof) to file.
func saveHeapProfile(addr, file string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", addr, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
