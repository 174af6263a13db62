package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Five `lockcelld serve` processes form a cell; kill -9 of the master's
// process costs the client nothing, and every acknowledged write survives,
// also on the killed replica once it restarts from its data.
func TestServeProcessesSurviveKill9OfMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	bin := fixtures.BuildLockcelld(t)
	pc := fixtures.NewProcCell(t, bin, "proc", 5, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	first := pc.MasterIndex(30 * time.Second)
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := cl.Open(ctx, "/ls/proc/counter", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := cl.Open(ctx, "/ls/proc/lock", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	st0, _ := lk.GetStat(ctx)
	last := ""
	for i := range 50 {
		if i == 20 {
			pc.Kill(first)
		}
		last = fmt.Sprint(i)
		if err := h.SetContents(ctx, []byte(last)); err != nil {
			t.Fatalf("write %d (master killed at 20): %v\nlog of killed master:\n%s", i, err, pc.Log(first))
		}
	}
	second := pc.MasterIndex(30 * time.Second)
	if second == first {
		t.Fatalf("master %d still master after kill -9", first)
	}
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != last {
		t.Fatalf("read after fail-over: %q %v, want %q", data, err, last)
	}
	// The lock is still ours, at the same generation: the fail-over did not
	// hand it to anyone.
	st1, err := lk.GetStat(ctx)
	if err != nil || st1.LockGen != st0.LockGen || st1.LockHolders != 1 {
		t.Fatalf("lock after fail-over: %+v %v (before %+v)", st1, err, st0)
	}
	// The killed replica restarts from its data and catches up; then it
	// alone plus two others can serve the latest value.
	pc.Start(first)
	killed := 0
	for i := 0; i < 5 && killed < 2; i++ {
		if i != first && i != second {
			pc.Kill(i)
			killed++
		}
	}
	// Only first, second and one more are up: every quorum needs first.
	if err := h.SetContents(ctx, []byte("after-restart")); err != nil {
		t.Fatalf("write with restarted replica in the quorum: %v", err)
	}
	data, _, err = h.GetContentsAndStat(ctx)
	if err != nil || string(data) != "after-restart" {
		t.Fatalf("read with restarted replica in the quorum: %q %v", data, err)
	}
}
