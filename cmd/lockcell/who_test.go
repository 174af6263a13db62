package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// `lockcell who` through the real binary: the holder's session and
// declared identity, the waiter queued behind it, the mode and generation
// for people and for scripts, then the lock-delay a failed holder left
// behind with that holder as its cause; a missing name is an error, no
// name a usage error.
func TestWhoVerbBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: time.Second})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	runBin := func(args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, time.Second, time.Second
	idH := client.Identity{Host: "etl-host", PID: 4321, Program: "etl-job"}
	cfg.Identity = idH
	holder := c.ClientWith(t, cfg)
	h, err := holder.Open(ctx, "/ls/t/job", client.Read|client.Write|client.Create, client.WithLockDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// A second job queues behind it.
	cfgW := c.ClientConfig()
	idW := client.Identity{Host: "web-host", PID: 99, Program: "web"}
	cfgW.Identity = idW
	waiter := c.ClientWith(t, cfgW)
	hw, err := waiter.Open(ctx, "/ls/t/job", client.Read|client.Write)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWait := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- hw.Acquire(waitCtx, client.Exclusive) }()
	defer func() { stopWait(); <-waited }()
	var st client.Stat
	for st.LockWaiters != 1 {
		if st, err = h.GetStat(ctx); err != nil || ctx.Err() != nil {
			t.Fatalf("the waiter never queued: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling the cell, not synchronising
	}

	res := runBin("who", "job")
	if res.code != exitOK {
		t.Fatalf("who: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{"exclusive", fmt.Sprintf("lock generation: %d", st.LockGen), "SESSION",
		fmt.Sprint(holder.Session()), "lock-delay until: none", "lock waiters: 1",
		fmt.Sprintf("%d %s etl-host 4321 etl-job %s", holder.Session(), dash(st.Holders[0].Principal), st.Holders[0].Since.UTC().Format(time.RFC3339)),
		fmt.Sprintf("1 %d %s exclusive web-host 99 web", waiter.Session(), dash(st.Waiters[0].Principal))} {
		if !strings.Contains(strings.Join(strings.Fields(res.stdout), " "), want) {
			t.Fatalf("who printed no %q:\n%s", want, res.stdout)
		}
	}
	var js whoJSON
	res = runBin("--json", "who", "job")
	if err := json.Unmarshal([]byte(res.stdout), &js); err != nil || res.code != exitOK {
		t.Fatalf("--json who: exit %d, %v: %q", res.code, err, res.stdout)
	}
	if js.LockMode != "exclusive" || js.LockGen != st.LockGen || js.LockHolders != 1 || len(js.Holders) != 1 ||
		js.Holders[0].Session != holder.Session() || js.Holders[0].Identity != idH || !js.Holders[0].Since.Equal(st.Holders[0].Since) ||
		js.LockWaiters != 1 || len(js.Waiters) != 1 || js.Waiters[0].Session != waiter.Session() || js.Waiters[0].Identity != idW ||
		js.Waiters[0].Mode != "exclusive" || js.Waiters[0].Since.Before(js.Holders[0].Since) || js.LockDelayUntil != nil || js.LockDelayBy != nil {
		t.Fatalf("--json who: %+v", js)
	}

	// The holder's session fails: the lock is free under lock-delay.
	cut.Cut()
	watcher, err := c.ClientWith(t, c.ClientConfig()).Open(ctx, "/ls/t/job", client.Read)
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, err := watcher.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.LockHolders == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the holder's session never expired")
		}
		time.Sleep(20 * time.Millisecond) // polling the cell, not synchronising
	}
	res = runBin("--json", "who", "job")
	js = whoJSON{}
	if err := json.Unmarshal([]byte(res.stdout), &js); err != nil || res.code != exitOK {
		t.Fatalf("--json who: exit %d, %v: %q", res.code, err, res.stdout)
	}
	if js.LockMode != "free" || len(js.Holders) != 0 || js.LockDelayUntil == nil || js.LockDelayBy == nil ||
		js.LockDelayBy.Session != holder.Session() || js.LockDelayBy.Identity != idH || js.LockDelayBy.Expired.IsZero() ||
		len(js.Waiters) != 1 || js.Waiters[0].Session != waiter.Session() {
		t.Fatalf("--json who under lock-delay: %+v", js)
	}
	if until, err := time.Parse(time.RFC3339Nano, *js.LockDelayUntil); err != nil || time.Until(until) < 30*time.Second {
		t.Fatalf("lock-delay until %q (%v): want about a minute from now", *js.LockDelayUntil, err)
	}
	if res = runBin("who", "job"); res.code != exitOK || strings.Contains(res.stdout, "lock-delay until: none") ||
		!strings.Contains(res.stdout, "free") || !strings.Contains(res.stdout, fmt.Sprintf("session %d expired holding the lock", holder.Session())) ||
		!strings.Contains(res.stdout, "host etl-host, pid 4321, program etl-job") {
		t.Fatalf("who under lock-delay: exit %d:\n%s", res.code, res.stdout)
	}

	if res = runBin("who", "nope"); res.code != exitError {
		t.Fatalf("who of a missing name: exit %d, stderr %q", res.code, res.stderr)
	}
	if res = runBin("who"); res.code != exitUsage {
		t.Fatalf("who without a name: exit %d, stderr %q", res.code, res.stderr)
	}
}

// What people read from who: the fields, the holders with identity, since
// and age, the waiters in order, and a running lock-delay with its end
// and cause; unknown times and undeclared identities read as "-".
func TestPrintWho(t *testing.T) {
	now := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	st := client.Stat{LockMode: client.Shared, LockGen: 77, LockHolders: 3, LockWaiters: 2,
		Holders: []client.LockHolder{
			{Session: 5, Principal: "alice", Identity: client.Identity{Host: "h1", PID: 10, Program: "batch"}, Since: now.Add(-90 * time.Second)},
			{Session: 6}},
		Waiters: []client.LockWaiter{
			{Session: 8, Principal: "bob", Mode: client.Exclusive, Identity: client.Identity{Host: "h2", PID: 20, Program: "cron"}, Since: now.Add(-2 * time.Second)},
			{Session: 9, Mode: client.Shared}},
	}
	var out strings.Builder
	e := &env{stdout: &out}
	if err := e.printWho("/ls/t/job", st, now); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(out.String()), " ") // columns are as wide as their widest cell
	for _, want := range []string{
		"lock mode: shared",
		"lock generation: 77",
		"lock waiters: 2",
		"lock-delay until: none",
		"holders: 3",
		"SESSION PRINCIPAL HOST PID PROGRAM HELD SINCE AGE",
		"5 alice h1 10 batch 2026-12-04T02:58:30Z 1m30s",
		"6 - - - - - -",
		"(1 more)",
		"WAITER SESSION PRINCIPAL MODE HOST PID PROGRAM WAITING SINCE AGE",
		"1 8 bob exclusive h2 20 cron 2026-12-04T02:59:58Z 2s",
		"2 9 - shared - - - - -",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("who printed no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "lock-delay cause") {
		t.Errorf("a cause without a running lock-delay:\n%s", got)
	}

	// A running lock-delay: its end, how far off, and who started it.
	until := time.Now().Add(time.Hour)
	st = client.Stat{LockDelayUntil: until, LockDelayBy: &client.LockDelayCause{Session: 4, Principal: "carol",
		Identity: client.Identity{Host: "h3", PID: 30, Program: "web"}, Expired: until.Add(-time.Hour - time.Minute)}}
	out.Reset()
	if err := e.printWho("/ls/t/job", st, until.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	got = strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"lock-delay until: " + until.UTC().Format(time.RFC3339Nano) + " (1h0m0s from now)",
		"lock-delay cause: session 4 expired holding the lock at " + until.Add(-time.Hour-time.Minute).UTC().Format(time.RFC3339) +
			" (1m0s ago): principal carol, host h3, pid 30, program web",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("who printed no %q in:\n%s", want, got)
		}
	}
}
