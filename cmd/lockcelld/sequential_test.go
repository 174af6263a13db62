package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Sequential creates run while the master's process is killed with
// SIGKILL (creates in flight at the kill are retried at the next master
// under the same request id). Every create answers with a distinct name;
// every name made after the kill was asked for is numbered above every
// name made before it (the counter is in the log, so no number comes
// back); and the directory holds exactly the names the callers were
// given: a create the old master applied but never answered is not made
// twice, and none is lost.
func TestSequentialNamesAcrossMasterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	pc := fixtures.NewProcCell(t, bin, "seq", 3, 4*time.Second)
	mi := pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := pc.ClientConfig()
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if h, err := cl.Open(ctx, pc.Name("q"), client.Read|client.Create|client.Directory); err != nil {
		t.Fatal(err)
	} else {
		h.Close()
	}
	number := func(name string) int64 {
		n, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return n
	}

	// Each create is filed by when it was asked and answered relative to
	// the kill: finished before it, asked after it, or in flight across it.
	var mu sync.Mutex
	var before, after, inflight []string
	killed := false
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				askedAfter := killed
				mu.Unlock()
				h, err := cl.Open(ctx, pc.Name("q/job-"), client.Write|client.Create|client.Sequential,
					client.WithContents([]byte(fmt.Sprintf("w%d-%d", w, i))))
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				name := h.Name()
				h.Close()
				mu.Lock()
				switch {
				case askedAfter:
					after = append(after, name)
				case !killed:
					before = append(before, name)
				default:
					inflight = append(inflight, name)
				}
				mu.Unlock()
			}
		}()
	}
	count := func(list *[]string) int { mu.Lock(); defer mu.Unlock(); return len(*list) }
	waitFor := func(list *[]string, n int, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for count(list) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d creates", what, count(list))
			}
			time.Sleep(10 * time.Millisecond) // polling the workers' progress
		}
	}
	waitFor(&before, 200, "before the kill")
	mu.Lock()
	killed = true
	mu.Unlock()
	pc.Kill(mi)
	pc.MasterIndex(60 * time.Second)
	waitFor(&after, 300, "after the kill")
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	highBefore, lowAfter := int64(-1), int64(-1)
	for _, n := range before {
		highBefore = max(highBefore, number(n))
	}
	for _, n := range after {
		if lowAfter < 0 || number(n) < lowAfter {
			lowAfter = number(n)
		}
	}
	if lowAfter <= highBefore {
		t.Fatalf("a create asked after the kill made number %d; one finished before it made %d", lowAfter, highBefore)
	}
	all := slices.Concat(before, inflight, after)
	seen := map[string]bool{}
	for _, n := range all {
		if seen[n] {
			t.Fatalf("%s was handed out twice", n)
		}
		seen[n] = true
	}
	d, err := cl.Open(ctx, pc.Name("q"), client.Read|client.Directory)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := d.ReadDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(all) {
		t.Fatalf("q holds %d items, the callers were given %d names", len(entries), len(all))
	}
	for _, e := range entries {
		if !seen[pc.Name("q/"+e.Name)] {
			t.Fatalf("q holds %s, which no caller was given", e.Name)
		}
	}
	t.Logf("%d names made before the kill (up to number %d), %d in flight across it, %d after it (from number %d)",
		len(before), highBefore, len(inflight), len(after), lowAfter)
}
