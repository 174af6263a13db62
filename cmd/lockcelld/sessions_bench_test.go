package main

import (
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// BenchmarkSessions10k holds 10,000 sessions (LOCKCELL_BENCH_SESSIONS)
// open against the master of a five-process cell (lease 12 s, the product
// default) from one load generator over four connections, for 60 s
// (LOCKCELL_BENCH_SECONDS), and fails on any expiry or jeopardy. It reports
// KeepAlive calls/s, the master's CPU (% of one core) and RSS over the hold
// window. The work is done once whatever b.N is: run it with
//
//	go test -run '^$' -bench Sessions10k -benchtime 1x -timeout 20m ./cmd/lockcelld/
func BenchmarkSessions10k(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs five processes and holds thousands of sessions for a minute")
	}
	n := benchEnvInt(b, "LOCKCELL_BENCH_SESSIONS", 10000)
	hold := time.Duration(benchEnvInt(b, "LOCKCELL_BENCH_SECONDS", 60)) * time.Second
	const lease = 12 * time.Second

	bin := fixtures.BuildLockcelld(b)
	pc := fixtures.NewProcCell(b, bin, "bench", 5, lease)
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
	lg := fixtures.NewLoadGen(fixtures.LoadGenConfig{Addrs: addrs, Sessions: n, Conns: 4})
	defer lg.Stop()

	// Progress every 10 s, from the first CreateSession to the end of the hold.
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
			b.Logf("t=%3.0fs created=%d alive=%d keepalives=%d expiries=%d jeopardies=%d reconnects=%d master cpu=%v rss=%.0f MiB",
				time.Since(began).Seconds(), st.Created, st.Live, st.KeepAlives, st.Expiries, st.Jeopardies,
				st.Reconnects, cpu.Round(10*time.Millisecond), float64(rss)/(1<<20))
		}
	}()
	stopProgress := sync.OnceFunc(func() {
		close(progStop)
		progWG.Wait()
	})
	defer stopProgress()

	rssBefore, _ := fixtures.ProcRSS(pid)
	if err := lg.Start(ctx); err != nil {
		b.Fatalf("create %d sessions: %v (stats %+v)", n, err, lg.Stats())
	}
	created := lg.Stats()
	if m := lg.Master(); m != addrs[mi] {
		b.Fatalf("load generator talks to %s, but the master process is %s", m, addrs[mi])
	}
	b.Logf("created %d sessions in %v (%.0f/s); master %s pid %d; RSS before %.0f MiB",
		created.Created, created.CreateTime.Round(time.Millisecond), float64(created.Created)/created.CreateTime.Seconds(),
		addrs[mi], pid, float64(rssBefore)/(1<<20))

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
	end := lg.Stats()
	stopProgress()

	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	cs, qerr := client.QueryStatus(qctx, addrs[mi])
	qcancel()

	calls := end.KeepAlives - created.KeepAlives
	kps := float64(calls) / window.Seconds()
	masterPct := 100 * (cpu1 - cpu0).Seconds() / window.Seconds()
	// Benchmark logs keep only about ten lines: the summary is two.
	b.Logf("hold %v: %d KeepAlives (%.0f/s), %d replies with events; KeepAlive overhead beyond the parked time p50 %v p99 %v max %v; "+
		"master CPU %.1f%% of a core, RSS %.0f MiB (peak %.0f MiB, %.1f KiB/session); followers CPU %.1f%% total; load generator CPU %.1f%%",
		window.Round(time.Millisecond), calls, kps, end.EventReplies,
		end.OverheadP50.Round(time.Microsecond), end.OverheadP99.Round(time.Microsecond), end.OverheadMax.Round(time.Microsecond),
		masterPct, float64(rss)/(1<<20), float64(hwm)/(1<<20), float64(rss-rssBefore)/1024/float64(max(end.Created, 1)),
		100*(others1-others0).Seconds()/window.Seconds(), 100*(self1-self0).Seconds()/window.Seconds())
	b.Logf("end: created=%d alive=%d expiries=%d jeopardies=%d reconnects=%d transport errors=%d unavailable=%d other errors=%d last error=%q",
		end.Created, end.Live, end.Expiries, end.Jeopardies, end.Reconnects, end.TransportErrors, end.Unavailable,
		end.OtherErrors, end.LastError)

	b.ReportMetric(kps, "keepalives/s")
	b.ReportMetric(masterPct, "master-cpu-%")
	b.ReportMetric(float64(rss)/(1<<20), "master-rss-MiB")
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
