// Command leader is a leader-elected worker: every copy campaigns on one
// election file, and the copy that wins writes to an HTTP resource server
// (examples/fencedstore) for as long as it leads, each write carrying the
// lock's sequencer so the server can refuse a leader that has been
// replaced. Run two or more copies; stop the leader, and another takes
// over once the old leader's session has expired and the lock-delay has
// passed.
//
// Leadership ends with the lock's context (Handle.LockContext): the
// moment the client cannot be sure it still holds the lock (no answer
// from the cell within the lease), it stops writing, before the cell can
// hand the lock to anyone else. That check is not enough on its own: a
// process paused between the check and its write (a GC pause, a frozen
// VM, SIGSTOP) writes after it woke up, perhaps long after the next
// leader began; -prepare makes that window wide. The store's fence is
// what refuses such a write: its sequencer is older than the newest the
// store has seen. A refused write ends leadership too.
//
// recipe.Lead runs the election loop: a jeopardy blip the session
// survives keeps leadership, a lost lock makes it campaign again, and a
// refused write resigns and queues again (recipe.Requeue). The Client
// renews its session when it expires (Config.RenewSession: the worker,
// cut off for longer than the lease, comes back as a fresh candidate,
// never still holding the lock). With -ticket, the worker saves its
// session ticket whenever it starts leading, and a restarted worker
// resumes that session (Config.ResumeTicket): it takes its lock back at
// once instead of waiting for its old session's lease and lock-delay,
// and the process it replaced, if it still runs, is fenced out.
//
// It reaches the cell from the environment, as the lockcell CLI does
// (LOCKCELL_CELL, LOCKCELL_REPLICAS, ...), and prints one line per step:
//
//	leading gen=G        it won the election; G is its lock generation
//	prepare n=N gen=G    it starts preparing write N
//	wrote n=N gen=G      the store accepted write N
//	refused n=N gen=G: R the store refused it (R: stale, forged...)
//	failed n=N gen=G: E  the store could not be reached (it goes on)
//	stopped gen=G: WHY   it stopped leading
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/sequencer/httpfence"
)

type worker struct {
	id       string
	store    string
	every    time.Duration
	prepare  time.Duration
	election string
	ticket   string
}

func main() {
	host, _ := os.Hostname()
	w := worker{}
	flag.StringVar(&w.election, "election", "examples/leader/election", "the election file (relative to /ls/<cell>)")
	flag.StringVar(&w.store, "store", "http://127.0.0.1:8080", "the fenced store's URL")
	flag.StringVar(&w.id, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this candidate's identity")
	flag.DurationVar(&w.every, "every", 100*time.Millisecond, "pause between two writes")
	flag.StringVar(&w.ticket, "ticket", "", "a file to keep the session ticket in, resumed on restart (empty: none)")
	flag.DurationVar(&w.prepare, "prepare", 0, "how long preparing a write takes (the window between the leadership check and the write)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.run(ctx); err != nil {
		log.Fatal(err)
	}
}

func (w *worker) run(ctx context.Context) error {
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.RenewSession = true // an expired session comes back as a new one; no lock carries over
	if w.ticket != "" {
		cfg.ResumeTicket, _ = os.ReadFile(w.ticket) // none yet: a new session
		cfg.ResumeOrCreate = true                   // the old session has ended: a new one
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close() // resigns at once on a clean exit
	err = recipe.Lead(ctx, c, w.election, []byte(w.id), func(leaderCtx context.Context) error {
		if w.ticket != "" {
			if err := os.WriteFile(w.ticket, c.SessionTicket(), 0o600); err != nil {
				return err
			}
		}
		seq, _ := recipe.SequencerFrom(leaderCtx)
		fmt.Printf("leading gen=%d\n", seq.Generation())
		err := w.lead(ctx, leaderCtx, seq)
		fmt.Printf("stopped gen=%d: %v\n", seq.Generation(), err)
		if errors.Is(err, errFenced) {
			return nil // resign and queue again: a newer leader exists
		}
		return err
	}, recipe.Requeue(), recipe.WithOpenOptions(client.WithParents()))
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// storeClient bounds a write, so a store that does not answer does not
// keep the loop from noticing that leadership ended.
var storeClient = &http.Client{Timeout: 10 * time.Second}

// errFenced: the store refused a write; a newer leader exists.
var errFenced = errors.New("fenced out by the store")

// lead writes while lockCtx lives. The writes themselves go out under
// the process's ctx, not lockCtx: a write prepared before a pause is
// still sent after it, as it would be if it had been delayed in the
// network, and the store's fence refuses it.
func (w *worker) lead(ctx, lockCtx context.Context, seq client.Sequencer) error {
	for n := 1; ; n++ {
		if lockCtx.Err() != nil {
			return context.Cause(lockCtx)
		}
		fmt.Printf("prepare n=%d gen=%d\n", n, seq.Generation())
		time.Sleep(w.prepare) // the work that makes the value
		value := fmt.Sprintf("%s wrote %d", w.id, n)
		if err := w.write(ctx, seq, n, value); errors.Is(err, errFenced) {
			return err
		} else if err != nil {
			fmt.Printf("failed n=%d gen=%d: %v\n", n, seq.Generation(), err) // the store is down: try the next while leading
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-lockCtx.Done():
		case <-time.After(w.every):
		}
	}
}

func (w *worker) write(ctx context.Context, seq client.Sequencer, n int, value string) error {
	u := fmt.Sprintf("%s/write?writer=%s&n=%d", w.store, url.QueryEscape(w.id), n)
	req, err := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader(value))
	if err != nil {
		return err
	}
	httpfence.SetHeader(req.Header, seq)
	resp, err := storeClient.Do(req)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusConflict {
		fmt.Printf("refused n=%d gen=%d: %s\n", n, seq.Generation(), strings.TrimSpace(string(body)))
		return errFenced
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("store: %s: %s", resp.Status, body)
	}
	fmt.Printf("wrote n=%d gen=%d\n", n, seq.Generation())
	return nil
}
