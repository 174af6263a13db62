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

// `lockcell who` through the real binary: the holder's session, the mode
// and generation for people and for scripts, then the lock-delay a failed
// holder left behind; a missing name is an error, no name a usage error.
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
	holder := c.ClientWith(t, cfg)
	h, err := holder.Open(ctx, "/ls/t/job", client.Read|client.Write|client.Create, client.WithLockDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}

	res := runBin("who", "job")
	if res.code != exitOK {
		t.Fatalf("who: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{"exclusive", fmt.Sprintf("lock generation: %d", st.LockGen), "SESSION",
		fmt.Sprint(holder.Session()), "lock-delay until: none"} {
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
		js.Holders[0].Session != holder.Session() || js.LockDelayUntil != nil {
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
	if js.LockMode != "free" || len(js.Holders) != 0 || js.LockDelayUntil == nil {
		t.Fatalf("--json who under lock-delay: %+v", js)
	}
	if until, err := time.Parse(time.RFC3339Nano, *js.LockDelayUntil); err != nil || time.Until(until) < 30*time.Second {
		t.Fatalf("lock-delay until %q (%v): want about a minute from now", *js.LockDelayUntil, err)
	}
	if res = runBin("who", "job"); res.code != exitOK || strings.Contains(res.stdout, "lock-delay until: none") ||
		!strings.Contains(res.stdout, "free") {
		t.Fatalf("who under lock-delay: exit %d:\n%s", res.code, res.stdout)
	}

	if res = runBin("who", "nope"); res.code != exitError {
		t.Fatalf("who of a missing name: exit %d, stderr %q", res.code, res.stderr)
	}
	if res = runBin("who"); res.code != exitUsage {
		t.Fatalf("who without a name: exit %d, stderr %q", res.code, res.stderr)
	}
}
