package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// BenchmarkFailoverPhases kills the master of a five-process cell with
// kill -9 LOCKCELL_BENCH_KILLS times (default 5) and times each fail-over
// from the kill, phase by phase, with medians as custom metrics:
//
//   - detect-ms: until a surviving follower's heartbeat timeout fires
//     (raft's "heartbeat timeout reached" line);
//   - elect-ms: from then until a candidate wins ("election won");
//   - start-ms: from then until the new master serves ("master serving":
//     its epoch entry committed and applied, leases granted);
//   - recover-ms: from then until every session has acknowledged the
//     fail-over ("fail-over complete"), which needs each client's
//     KeepAlive to have found the new master;
//   - grant-ms: from then until the first acquire succeeds;
//   - found-ms: kill until the client that was connected to the master
//     learns the new epoch (its MasterFailover event);
//   - acquire-ms: kill until the first acquire succeeds, with a new
//     Open(Create)+Acquire of a never-used name started every 50 ms on the
//     held session (each bounded to 2 s), as the peer comparison does;
//   - first-call-ms: kill until the one such call started at the kill
//     returns, retried by the library alone: what one application thread
//     sees.
//
// The replicas run with the daemon's defaults, plus any serve flags in
// LOCKCELL_BENCH_SERVE_ARGS (e.g. "--raft-heartbeat 600ms") to compare
// timings in the same harness, and log at info level, which is where the
// phase lines come from (1 ms resolution). Every round fails the benchmark
// if a session is lost: the round's client and one idle client kept
// across every round must see no Jeopardy or Expired and stay listed by
// the master. The work is done once whatever b.N is: run it with
//
//	go test -run '^$' -bench FailoverPhases -benchtime 1x -timeout 10m ./cmd/lockcelld/
func BenchmarkFailoverPhases(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs five processes and kills the master several times")
	}
	kills := benchEnvInt(b, "LOCKCELL_BENCH_KILLS", 5)
	extra := strings.Fields(os.Getenv("LOCKCELL_BENCH_SERVE_ARGS"))
	b.Setenv(fixtures.EnvProcLog, "info")

	bin := fixtures.BuildLockcelld(b)
	pc := fixtures.NewProcCellWith(b, bin, "failover", 5, 12*time.Second, fixtures.ProcOptions{ExtraArgs: extra})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc.MasterIndex(30 * time.Second)

	idle, err := dialWatched(ctx, pc.ClientConfig())
	if err != nil {
		b.Fatalf("idle client: %v", err)
	}
	defer idle.close()

	var rounds []failoverPhases
	b.ResetTimer()
	for r := 1; r <= kills; r++ {
		ph, err := failoverRound(ctx, pc, r, idle)
		if err != nil {
			b.Fatalf("round %d: %v", r, err)
		}
		b.Logf("round %d: %v", r, ph)
		rounds = append(rounds, ph)
	}
	b.StopTimer()

	med := func(f func(failoverPhases) time.Duration) float64 {
		ds := make([]time.Duration, len(rounds))
		for i, ph := range rounds {
			ds[i] = f(ph)
		}
		slices.Sort(ds)
		m := ds[len(ds)/2]
		if len(ds)%2 == 0 {
			m = (ds[len(ds)/2-1] + m) / 2
		}
		return float64(m) / float64(time.Millisecond)
	}
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.detect }), "detect-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.won - p.detect }), "elect-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.serving - p.won }), "start-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.recovered - p.serving }), "recover-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.acquired - p.recovered }), "grant-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.found }), "found-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.acquired }), "acquire-ms")
	b.ReportMetric(med(func(p failoverPhases) time.Duration { return p.firstCall }), "first-call-ms")
	b.ReportMetric(float64(kills), "kills")
}

// failoverPhases are one fail-over's moments, each measured from the kill.
type failoverPhases struct {
	detect    time.Duration // first follower's heartbeat timeout
	won       time.Duration // election won
	serving   time.Duration // new master serving
	recovered time.Duration // every session acknowledged the fail-over
	found     time.Duration // the held client learnt the new epoch
	acquired  time.Duration // first acquire succeeded (a try every 50 ms)
	firstCall time.Duration // the call started at the kill returned
	detectors int           // followers whose heartbeat timeout fired before the election was won
	preVotes  int           // pre-vote campaigns that failed
	terms     uint64        // terms the election took (1: no split vote)
}

func (p failoverPhases) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("detect %s, won %s, serving %s, recovered %s, found %s, acquired %s, first call %s ms after the kill; "+
		"%d followers timed out, %d failed pre-votes, %d term(s)",
		ms(p.detect), ms(p.won), ms(p.serving), ms(p.recovered), ms(p.found), ms(p.acquired), ms(p.firstCall),
		p.detectors, p.preVotes, p.terms)
}

// failoverRound waits for a healthy cell, connects a client to its master,
// kills the master, times the fail-over and restarts the killed replica.
func failoverRound(ctx context.Context, pc *fixtures.ProcCell, round int, idle *watched) (failoverPhases, error) {
	var ph failoverPhases
	before, err := waitCellHealthy(ctx, pc, time.Minute)
	if err != nil {
		return ph, err
	}
	mi := pc.MasterIndex(30 * time.Second)
	holder, err := dialWatched(ctx, pc.ClientConfig())
	if err != nil {
		return ph, fmt.Errorf("holder: %w", err)
	}
	defer holder.close()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = fixtures.LockFresh(wctx, holder.c, pc.Name(fmt.Sprintf("warm-%d", round)))
	wcancel()
	if err != nil {
		return ph, fmt.Errorf("warm-up lock: %w", err)
	}
	if m := admin.New(holder.c).Master(); m != pc.Addrs()[mi] {
		return ph, fmt.Errorf("the client talks to %s, the master is %s", m, pc.Addrs()[mi])
	}

	t0 := time.Now()
	pc.Kill(mi)

	// A new attempt every 50 ms until one acquires; the first one runs
	// until it succeeds (the library's own retries), the others for 2 s.
	type outcome struct {
		n   int
		at  time.Time
		err error
	}
	results := make(chan outcome, 64)
	var wg sync.WaitGroup
	attempts := 0
	launch := func(timeout time.Duration) {
		attempts++
		n := attempts
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			at, err := fixtures.LockFresh(actx, holder.c, pc.Name(fmt.Sprintf("r%d-a%d", round, n)))
			results <- outcome{n, at, err}
		}()
	}
	launch(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.NewTimer(40 * time.Second)
	defer giveUp.Stop()
	outstanding, lastErr := 1, error(nil)
	for ph.acquired == 0 || ph.firstCall == 0 {
		select {
		case o := <-results:
			outstanding--
			if o.err != nil {
				lastErr = o.err
				if o.n == 1 {
					return ph, fmt.Errorf("the call started at the kill failed: %w", o.err)
				}
				continue
			}
			if ph.acquired == 0 {
				ph.acquired = o.at.Sub(t0)
			}
			if o.n == 1 {
				ph.firstCall = o.at.Sub(t0)
			}
		case <-tick.C:
			if ph.acquired == 0 && outstanding < 64 {
				outstanding++
				launch(2 * time.Second)
			}
		case <-giveUp.C:
			return ph, fmt.Errorf("no acquire within 40 s of the kill (last error %v)", lastErr)
		}
	}
	go func() { wg.Wait(); close(results) }()
	for range results { // the later attempts end within their 2 s
	}

	if at, ok := holder.firstFailover(t0); ok {
		ph.found = at.Sub(t0)
	} else {
		return ph, errors.New("the held client saw no MasterFailover event")
	}
	if err := phasesFromLogs(pc, mi, t0, before.Term, &ph); err != nil {
		return ph, err
	}
	for _, w := range []*watched{holder, idle} {
		if lost := w.lostEvent(); lost != "" {
			return ph, fmt.Errorf("session %d: %s", w.c.Session(), lost)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	ss, err := admin.New(holder.c).Sessions(sctx)
	scancel()
	if err != nil {
		return ph, fmt.Errorf("list sessions: %w", err)
	}
	for _, w := range []*watched{holder, idle} {
		if !slices.ContainsFunc(ss, func(si admin.SessionInfo) bool { return si.ID == w.c.Session() }) {
			return ph, fmt.Errorf("session %d is no longer listed by the master", w.c.Session())
		}
	}
	pc.Start(mi)
	return ph, nil
}

// phasesFromLogs reads the surviving replicas' log lines since t0: the
// first heartbeat timeout, the election won, the new master serving and
// its fail-over complete.
func phasesFromLogs(pc *fixtures.ProcCell, killed int, t0 time.Time, term uint64, ph *failoverPhases) error {
	var detects []time.Time
	var won, serving, recovered time.Time
	var wonTerm uint64
	for i := range pc.N() {
		if i == killed {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(pc.Log(i)))
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			at, ok := logTime(line)
			if !ok || at.Before(t0) {
				continue
			}
			switch {
			case strings.Contains(line, "heartbeat timeout reached, starting election"):
				detects = append(detects, at)
			case strings.Contains(line, "pre-vote campaign failed"):
				ph.preVotes++
			case strings.Contains(line, "election won") && won.IsZero():
				won = at
				fmt.Sscanf(logField(line, "term"), "%d", &wonTerm)
			case strings.Contains(line, "msg=\"master serving\"") && serving.IsZero():
				serving = at
			case strings.Contains(line, "fail-over complete") && recovered.IsZero():
				recovered = at
			}
		}
	}
	if len(detects) == 0 || won.IsZero() || serving.IsZero() || recovered.IsZero() {
		return fmt.Errorf("phase lines missing from the replicas' logs: %d heartbeat timeouts, election won %v, serving %v, complete %v",
			len(detects), !won.IsZero(), !serving.IsZero(), !recovered.IsZero())
	}
	slices.SortFunc(detects, func(a, b time.Time) int { return a.Compare(b) })
	ph.detect = detects[0].Sub(t0)
	for _, d := range detects {
		if !d.After(won) {
			ph.detectors++
		}
	}
	ph.won, ph.serving, ph.recovered = won.Sub(t0), serving.Sub(t0), recovered.Sub(t0)
	if wonTerm > term {
		ph.terms = wonTerm - term
	}
	return nil
}

// logTime is the time of one slog text line ("time=2026-...").
func logTime(line string) (time.Time, bool) {
	v := logField(line, "time")
	if v == "" {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, v)
	return at, err == nil
}

// logField returns the value of key=value in a log line: a slog field, or
// one raft put inside its message ("term=3").
func logField(line, key string) string {
	for _, sep := range []string{" ", "\"", ""} {
		i := strings.Index(line, sep+key+"=")
		if i < 0 || (sep == "" && i != 0) {
			continue
		}
		v := line[i+len(sep)+len(key)+1:]
		if j := strings.IndexAny(v, " \""); j >= 0 {
			v = v[:j]
		}
		return v
	}
	return ""
}

// waitCellHealthy waits until every replica answers, one of them is the
// serving master, all name it at one epoch and every replica has applied
// what the master had committed when first asked; then lets the machine
// settle for a second, so a restarted replica's start-up does not share
// the CPU with the next fail-over. It returns the master's status.
func waitCellHealthy(ctx context.Context, pc *fixtures.ProcCell, timeout time.Duration) (*admin.CellStatus, error) {
	deadline := time.Now().Add(timeout)
	addrs := pc.Addrs()
	var last error
	var target uint64
	for time.Now().Before(deadline) {
		sts := make([]*admin.CellStatus, len(addrs))
		for i, a := range addrs {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			sts[i], last = admin.QueryStatusWith(qctx, pc.ClientConfig(), a)
			cancel()
			if last != nil {
				break
			}
		}
		if last == nil {
			last = cellAgrees(sts, addrs, &target)
			if last == nil {
				t := time.NewTimer(time.Second)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil, ctx.Err()
				}
				for _, st := range sts {
					if st.State == "Leader" {
						return st, nil
					}
				}
			}
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("cell not healthy within %v: %v", timeout, last)
}

// cellAgrees checks one set of statuses: one leader serving as master, all
// naming it at its epoch, all having applied *target (the leader's commit
// index when first seen).
func cellAgrees(sts []*admin.CellStatus, addrs []string, target *uint64) error {
	li := -1
	for i, st := range sts {
		if st.State == "Leader" && st.Master == addrs[i] && st.Epoch > 0 {
			li = i
		}
	}
	if li < 0 {
		return errors.New("no serving master")
	}
	if *target == 0 {
		*target = sts[li].CommitIndex
	}
	for i, st := range sts {
		if st.Master != addrs[li] || st.Epoch != sts[li].Epoch {
			return fmt.Errorf("replica %d names master %q at epoch %d; the master is %s at epoch %d",
				i+1, st.Master, st.Epoch, addrs[li], sts[li].Epoch)
		}
		if st.AppliedIndex < *target {
			return fmt.Errorf("replica %d applied %d of %d", i+1, st.AppliedIndex, *target)
		}
	}
	return nil
}

// watched is a client whose session events are recorded as they arrive.
type watched struct {
	c    *client.Client
	done chan struct{} // closed when the events channel is drained

	mu        sync.Mutex
	failovers []time.Time
	lost      string // the first Jeopardy or Expired
}

func dialWatched(ctx context.Context, cfg client.Config) (*watched, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, cfg)
	if err != nil {
		return nil, err
	}
	w := &watched{c: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range c.Events() {
			at := time.Now()
			w.mu.Lock()
			switch ev.Kind {
			case client.MasterFailover:
				w.failovers = append(w.failovers, at)
			case client.Jeopardy, client.Expired:
				if w.lost == "" {
					w.lost = fmt.Sprintf("%v at %v", ev.Kind, at.Format(time.StampMilli))
				}
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// firstFailover is the first MasterFailover event after t0.
func (w *watched) firstFailover(t0 time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.failovers {
		if at.After(t0) {
			return at, true
		}
	}
	return time.Time{}, false
}

func (w *watched) lostEvent() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// close ends the session and waits for the event reader.
func (w *watched) close() {
	w.c.Close()
	<-w.done
}

// BenchmarkElectionsUnderLoad runs five processes at the daemon's default
// Raft timings (plus LOCKCELL_BENCH_SERVE_ARGS) under a closed-loop load of
// LOCKCELL_BENCH_CLIENTS clients (default 16), each taking and releasing
// its own lock and rewriting its own file, for LOCKCELL_BENCH_SECONDS
// (default 60), and reports the elections nobody asked for: followers'
// heartbeat timeouts and leaders' step-downs for want of a majority (from
// raft's log lines), how far the Raft term moved (a refused pre-vote does
// not move it) and whether the master changed. Run it on a busy machine
// to see whether the timings are too tight for it:
//
//	go test -run '^$' -bench ElectionsUnderLoad -benchtime 1x -timeout 10m ./cmd/lockcelld/
func BenchmarkElectionsUnderLoad(b *testing.B) {
	if testing.Short() {
		b.Skip("builds and runs five processes under load for a minute")
	}
	n := benchEnvInt(b, "LOCKCELL_BENCH_CLIENTS", 16)
	hold := time.Duration(benchEnvInt(b, "LOCKCELL_BENCH_SECONDS", 60)) * time.Second
	extra := strings.Fields(os.Getenv("LOCKCELL_BENCH_SERVE_ARGS"))
	b.Setenv(fixtures.EnvProcLog, "info")
	bin := fixtures.BuildLockcelld(b)
	pc := fixtures.NewProcCellWith(b, bin, "elections", 5, 12*time.Second, fixtures.ProcOptions{ExtraArgs: extra})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before, err := waitCellHealthy(ctx, pc, time.Minute)
	if err != nil {
		b.Fatal(err)
	}

	clients := make([]*watched, n)
	for i := range clients {
		if clients[i], err = dialWatched(ctx, pc.ClientConfig()); err != nil {
			b.Fatalf("client %d: %v", i, err)
		}
		defer clients[i].close()
	}
	lctx, lcancel := context.WithTimeout(ctx, hold)
	defer lcancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ops, failed int
	var lastErr error
	b.ResetTimer()
	for i, w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := w.c.Open(lctx, pc.Name(fmt.Sprintf("load-%d", i)), client.Read|client.Write|client.Create)
			if err != nil {
				mu.Lock()
				failed, lastErr = failed+1, err
				mu.Unlock()
				return
			}
			defer h.Close()
			for lctx.Err() == nil {
				err := h.Acquire(lctx, client.Exclusive)
				if err == nil {
					err = h.SetContents(lctx, []byte("x"))
				}
				if err == nil {
					err = h.Release(lctx)
				}
				mu.Lock()
				if err == nil {
					ops++
				} else if lctx.Err() == nil {
					failed, lastErr = failed+1, err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()

	after, err := waitCellHealthy(ctx, pc, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	changed := 0.0
	if after.Self != before.Self {
		changed = 1
	}
	for _, w := range clients {
		if lost := w.lostEvent(); lost != "" {
			b.Errorf("session %d: %s", w.c.Session(), lost)
		}
	}
	// What raft logged meanwhile: followers that stopped hearing their
	// leader, and leaders that stopped hearing a majority.
	var timeouts, stepDowns, won int
	for i := range pc.N() {
		for line := range strings.Lines(pc.Log(i)) {
			if at, ok := logTime(line); !ok || at.Before(t0) {
				continue
			}
			switch {
			case strings.Contains(line, "heartbeat timeout reached"):
				timeouts++
			case strings.Contains(line, "failed to contact quorum of nodes, stepping down"):
				stepDowns++
			case strings.Contains(line, "election won"):
				won++
			}
		}
	}
	b.Logf("%d clients for %v: %d lock+write+release rounds (%.0f/s), %d failed (last %v); term %d -> %d, master %s -> %s; "+
		"%d follower heartbeat timeouts, %d leader step-downs (leader lease), %d elections won",
		n, hold, ops, float64(ops)/hold.Seconds(), failed, lastErr, before.Term, after.Term, before.Self, after.Self,
		timeouts, stepDowns, won)
	b.ReportMetric(float64(timeouts), "heartbeat-timeouts")
	b.ReportMetric(float64(stepDowns), "step-downs")
	b.ReportMetric(float64(after.Term-before.Term), "term-changes")
	b.ReportMetric(changed, "master-changed")
	b.ReportMetric(float64(ops)/hold.Seconds(), "rounds/s")
}
