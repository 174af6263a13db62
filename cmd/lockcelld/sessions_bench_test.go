package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// BenchmarkSessions10k holds 10,000 sessions (LOCKCELL_BENCH_SESSIONS)
// open against the master of a five-process cell (lease 12 s, the product
// default) from one load generator, for 60 s (LOCKCELL_BENCH_SECONDS), and
// fails on any expiry or jeopardy. It reports KeepAlive calls/s, the
// master's CPU (% of one core) and RSS over the hold window, and the
// leases the master granted. The work is done once whatever b.N is: run
// it with
//
//	go test -run '^$' -bench Sessions10k -benchtime 1x -timeout 30m ./cmd/lockcelld/
//
// It scales to 100,000 sessions and more: LOCKCELL_BENCH_CONNS sets the
// load generator's connections (default one per 2,500 sessions, at least
// four, since the server takes at most 4,096 sessions created over a
// connection and 8,192 calls in flight on one, parked KeepAlives
// included), the session caps are raised to fit (--max-sessions,
// --max-sessions-per-principal: every session is the anonymous
// principal's), and LOCKCELL_BENCH_MAX_LEASE, a Go duration, is passed to
// every replica as --max-lease, so the master lengthens leases under load.
func BenchmarkSessions10k(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs five processes and holds thousands of sessions for a minute")
	}
	n := benchEnvInt(b, "LOCKCELL_BENCH_SESSIONS", 10000)
	hold := time.Duration(benchEnvInt(b, "LOCKCELL_BENCH_SECONDS", 60)) * time.Second
	conns := benchEnvInt(b, "LOCKCELL_BENCH_CONNS", max(4, (n+benchSessionsPerConn-1)/benchSessionsPerConn))
	const lease = 12 * time.Second

	lim := cell.DefaultSessionLimits
	if per := (n + conns - 1) / conns; per > lim.SessionsPerConn {
		// The master would refuse the connection's later CreateSessions
		// (TooMany) and the load generator retry them until the timeout.
		b.Fatalf("%d sessions over %d connections is %d a connection, over the server's %d: set LOCKCELL_BENCH_CONNS to at least %d",
			n, conns, per, lim.SessionsPerConn, (n+lim.SessionsPerConn-1)/lim.SessionsPerConn)
	}
	// The caps with room to spare: a reservation and the applied session
	// count the same session for a moment, so a cap of exactly n could
	// refuse the last few creations (master/limits.go).
	room := n + n/10
	// Every session parks a KeepAlive, a stream, from the one address
	// and principal of the load generator, and may have a call beside it.
	streams := strconv.Itoa(max(cell.DefaultConnLimits.MaxStreams, 2*room))
	args := []string{
		"--max-sessions", strconv.Itoa(max(lim.Sessions, room)),
		"--max-sessions-per-principal", strconv.Itoa(max(lim.SessionsPerPrincipal, room)),
		"--max-streams", streams, "--max-streams-per-ip", streams, "--max-streams-per-principal", streams,
	}
	maxLease := "off"
	if v := os.Getenv("LOCKCELL_BENCH_MAX_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("LOCKCELL_BENCH_MAX_LEASE=%q: want a Go duration such as 60s", v)
		}
		args = append(args, "--max-lease", d.String())
		maxLease = d.String()
	}

	bin := fixtures.BuildLockcelld(b)
	// gctrace puts a line in each replica's log at every GC, with the heap
	// left live after it: the master's RSS also counts the GC's headroom
	// and memory not yet returned, and the live heap tells them apart.
	pc := fixtures.NewProcCellWith(b, bin, "bench", 5, lease, fixtures.ProcOptions{ExtraArgs: args, Env: []string{"GODEBUG=gctrace=1"}})
	addrs := pc.Addrs()
	mi := pc.MasterIndex(30 * time.Second)
	pids := make([]int, len(addrs))
	for i, a := range addrs {
		if pids[i] = pc.PID(i); pids[i] == 0 {
			b.Fatalf("no process found for replica %d (%s)", i, a)
		}
	}
	pid := pids[mi]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lg := fixtures.NewLoadGen(fixtures.LoadGenConfig{Addrs: addrs, Sessions: n, Conns: conns})
	defer lg.Stop()

	// Progress every 10 s, from the first CreateSession to the end of the
	// hold, goes to stderr as it happens: a benchmark's log keeps only its
	// first ten lines, which the summary needs, and a run of 100,000
	// sessions takes minutes to watch.
	began := time.Now()
	progStop := make(chan struct{})
	var progWG sync.WaitGroup
	progWG.Add(1)
	go func() {
		defer progWG.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progStop:
				return
			case <-t.C:
			}
			st := lg.Stats()
			cpu, _ := fixtures.ProcCPU(pid)
			rss, _ := fixtures.ProcRSS(pid)
			fmt.Fprintf(os.Stderr, "Sessions10k: t=%3.0fs created=%d alive=%d keepalives=%d expiries=%d jeopardies=%d reconnects=%d unavailable=%d other errors=%d leases held %v-%v master cpu=%v rss=%.0f MiB last error=%q\n",
				time.Since(began).Seconds(), st.Created, st.Live, st.KeepAlives, st.Expiries, st.Jeopardies,
				st.Reconnects, st.Unavailable, st.OtherErrors, st.LastLeaseMin.Round(100*time.Millisecond), st.LastLeaseMax.Round(100*time.Millisecond),
				cpu.Round(10*time.Millisecond), float64(rss)/(1<<20), st.LastError)
		}
	}()
	stopProgress := sync.OnceFunc(func() {
		close(progStop)
		progWG.Wait()
	})
	defer stopProgress()

	rssBefore, _ := fixtures.ProcRSS(pid)
	liveBefore, _ := lastGCLive(pc.Log(mi))
	if err := lg.Start(ctx); err != nil {
		b.Fatalf("create %d sessions: %v (stats %+v)", n, err, lg.Stats())
	}
	created := lg.Stats()
	if m := lg.Master(); m != addrs[mi] {
		b.Fatalf("load generator talks to %s, but the master process is %s", m, addrs[mi])
	}
	b.Logf("created %d sessions over %d connections in %v (%.0f/s); master %s pid %d; RSS before %.0f MiB; max lease %s",
		created.Created, conns, created.CreateTime.Round(time.Millisecond), float64(created.Created)/created.CreateTime.Seconds(),
		addrs[mi], pid, float64(rssBefore)/(1<<20), maxLease)

	// The hold window.
	cpu0, err := fixtures.ProcCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	others0 := othersCPU(pids, mi)
	self0 := selfCPU()
	t0 := time.Now()
	b.ResetTimer()
	sleepOrDone(ctx, hold)
	b.StopTimer()
	window := time.Since(t0)
	cpu1, err := fixtures.ProcCPU(pid)
	if err != nil {
		b.Fatalf("master process: %v", err)
	}
	others1 := othersCPU(pids, mi)
	self1 := selfCPU()
	rss, _ := fixtures.ProcRSS(pid)
	hwm, _ := fixtures.ProcHWM(pid)
	liveEnd, liveOK := lastGCLive(pc.Log(mi))
	end := lg.Stats()
	stopProgress()

	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	cs, qerr := admin.QueryStatus(qctx, addrs[mi])
	qcancel()

	calls := end.KeepAlives - created.KeepAlives
	kps := float64(calls) / window.Seconds()
	masterPct := 100 * (cpu1 - cpu0).Seconds() / window.Seconds()
	kibPerSession := float64(rss-rssBefore) / 1024 / float64(max(end.Created, 1))
	// The master's CPU per KeepAlive: all of its work over the window
	// (Raft heartbeats and replication included) over the calls answered.
	usPerCall := float64((cpu1 - cpu0).Microseconds()) / float64(max(calls, 1))
	// Benchmark logs keep only about ten lines: the summary is three.
	b.Logf("hold %v: %d KeepAlives (%.0f/s), %d replies with events; KeepAlive overhead beyond the parked time p50 %v p99 %v max %v; "+
		"master CPU %.1f%% of a core (%.0f µs a KeepAlive), RSS %.0f MiB (peak %.0f MiB, %.2f KiB/session over %.0f MiB before); followers CPU %.1f%% total; load generator CPU %.1f%%",
		window.Round(time.Millisecond), calls, kps, end.EventReplies,
		end.OverheadP50.Round(time.Microsecond), end.OverheadP99.Round(time.Microsecond), end.OverheadMax.Round(time.Microsecond),
		masterPct, usPerCall, float64(rss)/(1<<20), float64(hwm)/(1<<20), kibPerSession, float64(rssBefore)/(1<<20),
		100*(others1-others0).Seconds()/window.Seconds(), 100*(self1-self0).Seconds()/window.Seconds())
	liveKiB := float64(liveEnd-liveBefore) * 1024 / float64(max(end.Created, 1))
	if liveOK {
		b.Logf("master heap live after its last GC %d MiB (%d MiB before the sessions): %.2f KiB/session", liveEnd, liveBefore, liveKiB)
	}
	b.Logf("leases granted (max lease %s): %v to %v by any reply since the first; %v to %v held by the live sessions at the end",
		maxLease, end.LeaseMin.Round(100*time.Millisecond), end.LeaseMax.Round(100*time.Millisecond),
		end.LastLeaseMin.Round(100*time.Millisecond), end.LastLeaseMax.Round(100*time.Millisecond))
	b.Logf("end: created=%d alive=%d expiries=%d jeopardies=%d reconnects=%d transport errors=%d unavailable=%d other errors=%d last error=%q",
		end.Created, end.Live, end.Expiries, end.Jeopardies, end.Reconnects, end.TransportErrors, end.Unavailable,
		end.OtherErrors, end.LastError)

	// Stopping 100,000 sessions' calls takes a while; say how long, so a
	// slow teardown is not mistaken for the benchmark.
	fmt.Fprintf(os.Stderr, "Sessions10k: stopping the load generator\n")
	stopAt := time.Now()
	lg.Stop()
	fmt.Fprintf(os.Stderr, "Sessions10k: load generator stopped in %v\n", time.Since(stopAt).Round(time.Millisecond))

	b.ReportMetric(kps, "keepalives/s")
	b.ReportMetric(masterPct, "master-cpu-%")
	b.ReportMetric(float64(rss)/(1<<20), "master-rss-MiB")
	b.ReportMetric(kibPerSession, "master-KiB/session")
	b.ReportMetric(usPerCall, "master-us/keepalive")
	if liveOK {
		b.ReportMetric(liveKiB, "master-live-KiB/session")
	}
	b.ReportMetric(end.LastLeaseMin.Seconds(), "lease-min-s")
	b.ReportMetric(end.LastLeaseMax.Seconds(), "lease-max-s")
	b.ReportMetric(float64(end.Expiries), "expiries")
	b.ReportMetric(float64(end.Jeopardies), "jeopardies")
	b.ReportMetric(created.CreateTime.Seconds(), "create-s")
	b.ReportMetric(float64(end.Created), "sessions")
	b.ReportMetric(float64(end.OverheadP99)/float64(time.Millisecond), "ka-overhead-p99-ms")

	if end.Expiries != 0 || end.Jeopardies != 0 {
		b.Fatalf("%d of %d sessions expired and %d were in jeopardy (last error %q)", end.Expiries, end.Created, end.Jeopardies, end.LastError)
	}
	if end.Live != int64(n) {
		b.Fatalf("%d of %d sessions alive at the end", end.Live, n)
	}
	if qerr != nil {
		b.Fatalf("status of the master: %v", qerr)
	}
	if cs.Sessions < uint64(n) {
		b.Fatalf("the cell holds %d sessions, want at least %d: the master expired some", cs.Sessions, n)
	}
}

// benchSessionsPerConn is how many sessions the benchmark puts on a
// connection by default: under the server's 4,096 sessions created over one
// connection, with room under its 8,192 calls in flight for the parked
// KeepAlives and the creations in flight.
const benchSessionsPerConn = 2500

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// gcLive matches a gctrace line's heap sizes (at the GC's start, at its
// end, live after it), in MiB.
var gcLive = regexp.MustCompile(`(?m)^gc \d+ @.* (\d+)->(\d+)->(\d+) MB`)

// lastGCLive returns the live heap after the last GC that log's gctrace
// lines report, in MiB; ok is false when there is none yet.
func lastGCLive(log string) (mib int64, ok bool) {
	all := gcLive.FindAllStringSubmatch(log, -1)
	if len(all) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(all[len(all)-1][3], 10, 64)
	return n, err == nil
}

// othersCPU sums the CPU time of every replica process but the master.
func othersCPU(pids []int, master int) time.Duration {
	var sum time.Duration
	for i, p := range pids {
		if i != master {
			d, _ := fixtures.ProcCPU(p)
			sum += d
		}
	}
	return sum
}

// selfCPU is the CPU time of this process (the load generator).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sleepOrDone(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
