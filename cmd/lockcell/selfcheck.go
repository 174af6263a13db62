package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/selfcheck"
)

// Exit codes of selfcheck besides exitOK: a violation, or no verdict.
const (
	exitViolation = 1
	exitNoVerdict = 2
)

// selfcheckCommand runs the linearizability prober against the cell.
func selfcheckCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "selfcheck",
		Usage: "run a small recorded workload against the cell and check it is linearizable",
		Description: "Two sessions read and write a few files (each reads through the client cache in one loop " +
			"and without it in another, with compare-and-swaps among the writes) and take turns holding one lock, for --duration; the history " +
			"is then checked for linearizability with Porcupine: every read, cached or not, sees the writes " +
			"completed before it began, and at most one session holds the lock. The files live under " +
			"/ls/<cell>/" + selfcheck.Dir + "/<random>/ and are deleted at the end. The second session's " +
			"replies lag by --lag, so a write that does not wait for that session's cache invalidation shows " +
			"as a stale read. --timeout bounds each call (and finding the master), not the run. A progress line " +
			"shows on stderr. Prints the verdict, or the operations no linearization can place; --json for scripts.\n\n" +
			"Exit codes: 0 linearizable, 1 a violation, 2 no verdict (the cell could not be reached, the run's " +
			"files could not be created, a session was lost, or the check ran out of time).\n\n" +
			"Example: lockcell selfcheck --duration 30s",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: selfcheck.DefaultDuration, Usage: "how long the workload runs"},
			&cli.DurationFlag{Name: "lag", Value: selfcheck.DefaultLag,
				Usage: "delay of everything the second session receives (0: none)"},
			&cli.IntFlag{Name: "files", Value: selfcheck.DefaultFiles, Usage: "files the sessions read and write"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the workload's choices, to repeat a run (0: a random one; the seed used is printed)"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			d, lag, files := c.Duration("duration"), c.Duration("lag"), c.Int("files")
			switch {
			case d <= 0:
				return usageErrorf(c, "--duration must be positive, got %v", d)
			case lag < 0:
				return usageErrorf(c, "--lag must not be negative, got %v", lag)
			case files < 1 || files > 100:
				return usageErrorf(c, "--files must be 1 to 100, got %d", files)
			}
			if lag == 0 {
				lag = -1 // selfcheck.Config: negative is none, zero the default
			}
			return e.selfcheck(c.Context, selfcheck.Config{Duration: d, Lag: lag, Files: files, Seed: c.Uint64("seed")})
		},
	}
}

func (e *env) selfcheck(parent context.Context, cfg selfcheck.Config) error {
	// The run has its own time (--duration); an interrupt ends the
	// workload early, and the files are still deleted and the history
	// checked.
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.verbose {
		log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	timeout := e.timeout
	if e.homeErr != nil {
		return e.homeErr
	}
	cfg.Client.Cell, cfg.Client.Replicas, cfg.Client.TLS, cfg.Client.Logger = e.cell, e.replicas, e.tls, log
	cfg.Client.ClientName, cfg.Client.RetryTimeout = "lockcell-selfcheck", timeout
	cfg.Client.DialTimeout = min(timeout, 2*time.Second)
	cfg.OpTimeout = timeout
	tty := isTerminal(asReader(e.stderr))
	var last time.Time
	drawn := false
	cfg.Progress = func(p selfcheck.Progress) {
		now := time.Now()
		switch {
		case tty:
			fmt.Fprintf(e.stderr, "\rselfcheck: %4.1fs of %v, %d operations (%d unknown outcomes) ",
				p.Elapsed.Seconds(), p.Duration, p.Ops, p.Unknown)
			drawn = true
		case !e.json && now.Sub(last) >= 5*time.Second:
			fmt.Fprintf(e.stderr, "selfcheck: %.0fs of %v, %d operations (%d unknown outcomes)\n",
				p.Elapsed.Seconds(), p.Duration, p.Ops, p.Unknown)
			last = now
		}
	}
	res, err := selfcheck.Run(ctx, cfg)
	if drawn {
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		return &exitStatus{code: exitNoVerdict, kind: errorCode(err), err: &opError{op: "selfcheck", err: err}}
	}
	code := exitOK
	switch {
	case res.Verdict == selfcheck.Violation:
		code = exitViolation
	case res.Verdict == selfcheck.Undecided || res.Incomplete != "":
		code = exitNoVerdict
	}
	if e.json {
		if err := e.printJSON(toSelfcheckJSON(res)); err != nil {
			return err
		}
	} else {
		printSelfcheck(e.stdout, res)
	}
	if code != exitOK {
		return &exitStatus{code: code}
	}
	return nil
}

// selfcheckJSON is selfcheck's output for scripts: the result with
// durations in seconds.
type selfcheckJSON struct {
	*selfcheck.Result
	DurationSeconds float64 `json:"duration_seconds"`
	CheckSeconds    float64 `json:"check_seconds"`
}

func toSelfcheckJSON(r *selfcheck.Result) selfcheckJSON {
	return selfcheckJSON{Result: r, DurationSeconds: r.Duration.Seconds(), CheckSeconds: r.CheckTime.Seconds()}
}

// printSelfcheck prints the verdict for people: one line when all is
// well, and for each failed object the end of its longest linearizable
// prefix, the operation that cannot be placed and the witnesses.
func printSelfcheck(w io.Writer, r *selfcheck.Result) {
	summary := fmt.Sprintf("%s operations (%d unknown outcomes), %d sessions, %s; %d reads (%d through the cache, %d hits), %d writes, %d lock acquisitions; seed %d",
		thousands(r.Ops), r.Unknown, r.Sessions, r.Duration.Round(100*time.Millisecond), r.Reads, r.CachedReads, r.CacheHits,
		r.Writes, r.Acquires, r.Seed)
	switch r.Verdict {
	case selfcheck.Linearizable:
		fmt.Fprintf(w, "linearizable: %s\n", summary)
	case selfcheck.Undecided:
		fmt.Fprintf(w, "undecided (the check ran out of time): %s\n", summary)
	default:
		fmt.Fprintf(w, "NOT linearizable: %s\n", summary)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "\n%s: %s\n", f.Object, f.Reason)
		fmt.Fprintf(w, "  linearized up to:\n")
		for _, s := range f.Linearized {
			fmt.Fprintf(w, "    %s  => %s\n", s.Op, s.State)
		}
		fmt.Fprintf(w, "  cannot place:\n    %s\n", f.Stuck)
		if len(f.Witnesses) > 0 {
			fmt.Fprintf(w, "  because of:\n")
			for _, o := range f.Witnesses {
				fmt.Fprintf(w, "    %s\n", o)
			}
		}
	}
	if r.Incomplete != "" {
		fmt.Fprintf(w, "stopped early: %s\n", r.Incomplete)
	}
	if r.LockCheckedUntil > 0 {
		fmt.Fprintf(w, "the lock was checked up to %.3fs (an Acquire there has an unknown outcome)\n", r.LockCheckedUntil.Seconds())
	}
	if r.CleanupError != "" {
		fmt.Fprintf(w, "could not delete everything under %s: %s\n", r.Prefix, r.CleanupError)
	}
}

// thousands prints n with commas between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
