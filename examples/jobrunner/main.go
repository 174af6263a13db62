// Command jobrunner is a worker of a job queue kept in a lockcell
// directory: each job is a file under DIR/queue, and a worker takes one by
// acquiring the file's lock (TryAcquire: a job someone runs is skipped),
// runs it, records the result as DIR/done/JOB and deletes the job. Run as
// many workers as you like.
//
// A worker that dies mid-job leaves the job in the queue, locked by a
// session that no longer answers: once that session has expired and the
// lock-delay has passed, the lock is free and another worker takes the
// job and runs it again. The result is recorded with an exclusive create,
// so a job is recorded once however often it ran, and a worker that died
// after recording but before deleting has its job deleted by the next.
//
// A job is JSON: {"input": "...", "work": "500ms"}; running it takes
// "work" and its result is the SHA-256 of the input. The worker notices
// new jobs from its directory handle's events, and re-reads the queue
// every -poll for jobs whose lock was freed by a dead worker (that frees
// a lock, but no event tells of it).
//
// It reaches the cell from the environment, as the lockcell CLI does
// (LOCKCELL_CELL, LOCKCELL_REPLICAS, ...), and prints a line per step:
// "start JOB", "done JOB", "abandoned JOB: WHY" (its lock was lost
// mid-run), "cleaned JOB" (already recorded; deleted).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path"
	"syscall"
	"time"

	"lockcell/client"
)

// Job is a queued job.
type Job struct {
	Input string `json:"input"`
	Work  string `json:"work"` // a time.Duration
}

// Result is a job's record under DIR/done.
type Result struct {
	Worker string `json:"worker"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"` // a job that cannot run (bad JSON, say)
}

type worker struct {
	id          string
	queue, done string
	poll        time.Duration
	c           *client.Client
}

func main() {
	host, _ := os.Hostname()
	dir := flag.String("dir", "examples/jobs", "the queue's directory (relative to /ls/<cell>)")
	w := &worker{}
	flag.StringVar(&w.id, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this worker's name, recorded with its results")
	flag.DurationVar(&w.poll, "poll", time.Second, "how often to re-read the queue without news")
	flag.Parse()
	w.queue, w.done = path.Join(*dir, "queue"), path.Join(*dir, "done")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.run(ctx); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func (w *worker) run(ctx context.Context) error {
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.RenewSession = true // cut off for longer than the lease: a new session, the handles re-opened
	if w.c, err = client.Dial(ctx, cfg); err != nil {
		return err
	}
	defer w.c.Close()
	for _, d := range []string{w.queue, w.done} {
		if err := w.c.MkdirAll(ctx, d); err != nil {
			return err
		}
	}
	queue, err := w.c.Open(ctx, w.queue, client.Read, client.WithEvents(client.OnChildAdded))
	if err != nil {
		return err
	}
	poll := time.NewTicker(w.poll)
	defer poll.Stop()
	for {
		jobs, err := queue.ReadDir(ctx)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if err := w.take(ctx, j.Name); err != nil {
				return fmt.Errorf("%s: %w", j.Name, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-queue.Events():
		case <-poll.C:
		}
	}
}

// take runs the job name if it can lock it.
func (w *worker) take(ctx context.Context, name string) error {
	job, err := w.c.Open(ctx, path.Join(w.queue, name), client.Read|client.Write)
	if errors.Is(err, client.ErrNotFound) {
		return nil // done by another worker since the listing
	}
	if err != nil {
		return err
	}
	defer job.Close()
	got, err := job.TryAcquire(ctx, client.Exclusive)
	if errors.Is(err, client.ErrLockDelay) || errors.Is(err, client.ErrHandleInvalid) {
		return nil // its last worker died a moment ago, or it is done and deleted
	} else if !got || err != nil {
		return err // someone runs it, or the call failed
	}
	data, _, err := job.GetContentsAndStat(ctx)
	if errors.Is(err, client.ErrHandleInvalid) {
		return nil
	} else if err != nil {
		return err
	}
	if rec, err := w.c.Open(ctx, path.Join(w.done, name), client.Read); err == nil {
		rec.Close() // a worker recorded it and died before deleting it
		fmt.Println("cleaned", name)
		return job.Delete(ctx)
	} else if !errors.Is(err, client.ErrNotFound) {
		return err
	}

	fmt.Println("start", name)
	lockCtx := job.LockContext()
	result := Result{Worker: w.id}
	result.Output, err = runJob(lockCtx, data)
	if lockCtx.Err() != nil {
		fmt.Printf("abandoned %s: %v\n", name, context.Cause(lockCtx))
		return nil // another worker runs it once the lock is free
	} else if err != nil {
		result.Error = err.Error()
	}
	res, _ := json.Marshal(result)
	rec, err := w.c.Open(ctx, path.Join(w.done, name), client.Write|client.Create|client.Excl, client.WithContents(res))
	if err != nil && !errors.Is(err, client.ErrExists) {
		return err
	}
	if err == nil {
		rec.Close()
	}
	if err := job.Delete(ctx); err != nil {
		return err
	}
	fmt.Println("done", name)
	return nil
}

// runJob does the job's work; it stops when lockCtx ends (the lock may be
// lost), and the job is left to the next worker.
func runJob(lockCtx context.Context, data []byte) (string, error) {
	var j Job
	if err := json.Unmarshal(data, &j); err != nil {
		return "", fmt.Errorf("bad job: %w", err)
	}
	work, err := time.ParseDuration(j.Work)
	if err != nil {
		return "", fmt.Errorf("bad job: %w", err)
	}
	select {
	case <-time.After(work):
	case <-lockCtx.Done():
		return "", context.Cause(lockCtx)
	}
	return fmt.Sprintf("%x", sha256.Sum256([]byte(j.Input))), nil
}
