package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

const (
	lease     = time.Second
	lockDelay = time.Second
	jobs      = 12
	work      = 500 * time.Millisecond
)

var (
	startRE = regexp.MustCompile(`^start (\S+)$`)
	doneRE  = regexp.MustCompile(`^done (\S+)$`)
)

// TestJobRunnerCrash runs three workers on a queue of twelve jobs (half
// queued before they start, half while they run) and kills one with
// SIGKILL in the middle of a job. Every job ends recorded once, with the
// right output, and deleted from the queue: the killed worker's job is
// run again by another worker, not before the lock-delay has passed; no
// other job runs twice.
func TestJobRunnerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example binary against a cell; skipped with -short")
	}
	bin := fixtures.Binary{Pkg: "./examples/jobrunner"}.Build(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease, DefaultLockDelay: lockDelay})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client(t)
	const dir = "jobrunner-test"
	enqueue := func(from, to int) {
		for i := from; i < to; i++ {
			job := fmt.Sprintf(`{"input":"job %d","work":%q}`, i, work)
			h, err := cl.Open(ctx, jobName(dir, i), client.Write|client.Create|client.Excl, client.WithParents(),
				client.WithContents([]byte(job)))
			if err != nil {
				t.Fatal(err)
			}
			h.Close()
		}
	}
	enqueue(0, jobs/2)

	env := []string{"LOCKCELL_CELL=" + c.Options().Cell, "LOCKCELL_REPLICAS=" + strings.Join(c.Addrs(), ",")}
	var workers []*fixtures.LineProc
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("w%d", i)
		workers = append(workers, fixtures.StartLineProc(t, id, bin, env, "-dir", dir, "-id", id, "-poll", "200ms"))
	}
	// The victim is the first worker to start a job.
	var victim *fixtures.LineProc
	for deadline := time.Now().Add(30 * time.Second); victim == nil; time.Sleep(5 * time.Millisecond) {
		for _, w := range workers {
			if _, _, ok := w.FindLine(0, startRE, 0); ok && victim == nil {
				victim = w
			}
		}
		if victim == nil && time.Now().After(deadline) {
			t.Fatalf("no worker started a job")
		}
	}
	victim.Kill()
	killed := time.Now()
	enqueue(jobs/2, jobs)
	// The job it was running: its last start without a done.
	lost := ""
	for _, l := range victim.Lines() {
		if m := startRE.FindStringSubmatch(l); m != nil {
			lost = m[1]
		} else if m := doneRE.FindStringSubmatch(l); m != nil && m[1] == lost {
			lost = ""
		}
	}
	if lost == "" {
		t.Fatalf("the worker was killed between jobs, not in one: %q", victim.Lines())
	}

	// Another worker takes the lost job once its lock is free.
	var retried time.Duration
	for deadline := time.Now().Add(lease + lockDelay + 10*time.Second); retried == 0; {
		for _, w := range workers {
			if w == victim {
				continue
			}
			if _, _, ok := w.FindLine(0, regexp.MustCompile(`^start `+regexp.QuoteMeta(lost)+`$`), 0); ok {
				retried = time.Since(killed)
			}
		}
		if retried == 0 && time.Now().After(deadline) {
			t.Fatalf("nobody took %s after the kill", lost)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if retried < lockDelay {
		t.Errorf("%s taken again %v after the kill, within the lock-delay %v", lost, retried, lockDelay)
	}

	// Every job is done: recorded and gone from the queue.
	queue := dir + "/queue"
	for deadline := time.Now().Add(30 * time.Second); ; {
		h, err := cl.Open(ctx, queue, client.Read)
		if err != nil {
			t.Fatal(err)
		}
		left, err := h.ReadDir(ctx)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs left in the queue: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	doneBy := map[string][]string{}
	startedBy := map[string][]string{}
	for _, w := range workers {
		for _, l := range w.Lines() {
			if m := doneRE.FindStringSubmatch(l); m != nil {
				doneBy[m[1]] = append(doneBy[m[1]], w.Name)
			} else if m := startRE.FindStringSubmatch(l); m != nil {
				startedBy[m[1]] = append(startedBy[m[1]], w.Name)
			}
		}
	}
	for i := range jobs {
		job := fmt.Sprintf("job-%02d", i)
		h, err := cl.Open(ctx, dir+"/done/"+job, client.Read)
		if err != nil {
			t.Errorf("%s: no record: %v", job, err)
			continue
		}
		data, _, err := h.GetContentsAndStat(ctx)
		h.Close()
		var res Result
		if err == nil {
			err = json.Unmarshal(data, &res)
		}
		if err != nil {
			t.Errorf("%s: record: %v", job, err)
			continue
		}
		if want := fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "job %d", i))); res.Output != want || res.Error != "" {
			t.Errorf("%s: record %+v, want output %s", job, res, want)
		}
		if len(doneBy[job]) != 1 || doneBy[job][0] != res.Worker {
			t.Errorf("%s: done by %v, recorded by %s; want once", job, doneBy[job], res.Worker)
		}
		if job == lost {
			if res.Worker == victim.Name || len(startedBy[job]) != 2 {
				t.Errorf("the lost %s: started by %v, recorded by %s; want the victim, then another", job, startedBy[job], res.Worker)
			}
		} else if len(startedBy[job]) != 1 {
			t.Errorf("%s started by %v; only the lost job may run twice", job, startedBy[job])
		}
	}
	for _, w := range workers {
		if w == victim {
			continue
		}
		w.Signal(syscall.SIGTERM)
		if !w.Wait(10 * time.Second) {
			t.Errorf("%s still runs 10s after SIGTERM", w.Name)
		} else if code := w.ProcessState().ExitCode(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM; stderr:\n%s", w.Name, code, w.Stderr())
		}
	}
	t.Logf("%d jobs done by %d workers; %s lost with the killed worker, run again %v after the kill (lease %v, lock-delay %v)",
		jobs, len(workers), lost, retried.Round(time.Millisecond), lease, lockDelay)
}

func jobName(dir string, i int) string { return fmt.Sprintf("%s/queue/job-%02d", dir, i) }
