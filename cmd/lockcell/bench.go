package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/bench"
	"lockcell/buildinfo"
)

// benchCommand measures the cell with the workloads of docs/performance.md.
func benchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure the cell: lock, read and write throughput and latency from many sessions",
		ArgsUsage: "WORKLOAD",
		Description: "Runs WORKLOAD (" + strings.Join(bench.Workloads, ", ") + ") from --clients clients, each " +
			"its own session, in a closed loop: an unmeasured --warmup, then a measured --duration. An " +
			"operation counts if it completes inside the window; latencies are percentiles by nearest rank.\n\n" +
			"   lock-uncontended  client i acquires and releases its own lock (latency: the pair)\n" +
			"   lock-contended    every client acquires one lock and releases it at once (ops: hand-offs; latency: the wait)\n" +
			"   read              every client reads one 100-byte file; --variant linearizable (default: a call the master\n" +
			"                     answers each time) or cached (the client cache: no call after the first read)\n" +
			"   write             client i overwrites its own 100-byte file on condition of its generation\n\n" +
			"The names live under --prefix (default /ls/<cell>/" + bench.DirPrefix + "<random>, created as needed) and what the " +
			"run created is removed at the end, also after Ctrl-C or SIGTERM (exit 130 or 143). --timeout bounds each call of the setup and " +
			"the removal (and finding the master), not the run. Prints a table, or with --json one line with the " +
			"fields ts, system, client_lib, workload, variant, params, ops, ops_per_s, p50_us, p90_us, p99_us, " +
			"max_us, mean_us, errors, client_cpu_pct (this process, % of one core) and extra. A progress line " +
			"shows on stderr.\n\n" +
			"Example: lockcell bench read --variant cached --clients 32 --duration 30s",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "clients", Value: bench.DefaultClients, Usage: "clients, each its own session"},
			&cli.DurationFlag{Name: "duration", Value: bench.DefaultDuration, Usage: "the measured window"},
			&cli.DurationFlag{Name: "warmup", Value: bench.DefaultWarmup, Usage: "unmeasured run before the window (0: none)"},
			&cli.StringFlag{Name: "variant", Usage: "read only: " + bench.ReadVariants[0] + " (default), " + strings.Join(bench.ReadVariants[1:], ", ") +
				" (follower: reads with a staleness bound, answered by the followers)"},
			&cli.StringFlag{Name: "prefix", Usage: "the folder the run's names go under (`NAME`; default a new one)"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			w := c.Args().First()
			clients, d, warm, variant := c.Int("clients"), c.Duration("duration"), c.Duration("warmup"), c.String("variant")
			switch {
			case !slices.Contains(bench.Workloads, w):
				return usageErrorf(c, "unknown workload %q (want %s)", w, strings.Join(bench.Workloads, ", "))
			case w == bench.Read && variant != "" && !slices.Contains(bench.ReadVariants, variant):
				return usageErrorf(c, "unknown --variant %q (want %s)", variant, strings.Join(bench.ReadVariants, " or "))
			case w != bench.Read && variant != "":
				return usageErrorf(c, "--variant applies to read only")
			case clients < 1 || clients > 10000:
				return usageErrorf(c, "--clients must be 1 to 10000, got %d", clients)
			case d <= 0:
				return usageErrorf(c, "--duration must be positive, got %v", d)
			case warm < 0:
				return usageErrorf(c, "--warmup must not be negative, got %v", warm)
			}
			if warm == 0 {
				warm = -1 // bench.Config: negative is none, zero the default
			}
			cfg := bench.Config{Workload: w, Variant: variant, Clients: clients, Duration: d, Warmup: warm}
			if p := c.String("prefix"); p != "" {
				name, err := e.name("bench", p)
				if err != nil {
					return err
				}
				cfg.Prefix = name
			}
			return e.bench(c.Context, cfg)
		},
	}
}

func (e *env) bench(parent context.Context, cfg bench.Config) error {
	// The run has its own time (--warmup, --duration). Ctrl-C or SIGTERM
	// ends it early, and its names are still removed.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.verbose {
		log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if e.homeErr != nil {
		return e.homeErr
	}
	cfg.Client.Cell, cfg.Client.Replicas, cfg.Client.TLS, cfg.Client.Logger = e.cell, e.replicas, e.tls, log
	cfg.Client.ClientName, cfg.Client.RetryTimeout = "lockcell-bench", e.timeout
	cfg.Client.DialTimeout = min(e.timeout, 2*time.Second)
	cfg.OpTimeout = e.timeout
	cfg.ClientLib = "lockcell/client " + buildinfo.Version()
	label := "bench " + cfg.Workload
	if cfg.Variant != "" {
		label += " " + cfg.Variant
	}
	tty := isTerminal(asReader(e.stderr))
	var last time.Time
	drawn := false
	cfg.Progress = func(p bench.Progress) {
		phase := ""
		if p.Warmup {
			phase = " (warm-up)"
		}
		now := time.Now()
		switch {
		case tty:
			fmt.Fprintf(e.stderr, "\r%s: %4.1fs of %v%s, %s ops, %d errors ", label, p.Elapsed.Seconds(), p.Total,
				phase, thousands(int(p.Ops)), p.Errors)
			drawn = true
		case !e.json && now.Sub(last) >= 5*time.Second:
			fmt.Fprintf(e.stderr, "%s: %.0fs of %v%s, %s ops, %d errors\n", label, p.Elapsed.Seconds(), p.Total,
				phase, thousands(int(p.Ops)), p.Errors)
			last = now
		}
	}
	type outcome struct {
		res *bench.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := bench.Run(ctx, cfg)
		done <- outcome{res, err}
	}()
	var o outcome
	var sig os.Signal
	select {
	case o = <-done:
	case sig = <-sigc:
		cancel()
		o = <-done // the run removes its names before it returns
	}
	if drawn {
		fmt.Fprintln(e.stderr)
	}
	if sig != nil && o.err != nil {
		left := "its names were removed"
		if ce := (*bench.CleanupError)(nil); errors.As(o.err, &ce) {
			left = "could not remove everything: " + errText(ce.Err)
		}
		return &exitStatus{code: 128 + signalNumber(sig), kind: "interrupted",
			err: fmt.Errorf("%s: interrupted by %v; %s", label, sig, left)}
	}
	if o.err != nil {
		return &opError{op: label, err: runError{err: o.err, prefix: "bench " + cfg.Workload + ": "}}
	}
	if e.json {
		return e.printJSON(o.res)
	}
	return printBench(e.stdout, o.res)
}

// printBench prints a run for people: a table row, what one operation
// is, and what went wrong, if anything did.
func printBench(w io.Writer, r *bench.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tVARIANT\tCLIENTS\tOPS\tOPS/S\tP50 µs\tP90 µs\tP99 µs\tMAX µs\tMEAN µs\tERRORS\tCLIENT CPU %")
	fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.1f\n", r.Workload, dash(r.Variant),
		r.Params["clients"], r.Ops, r.OpsPerSec, r.P50us, r.P90us, r.P99us, r.MaxUs, r.MeanUs, r.Errors, r.ClientCPUPct)
	if err := tw.Flush(); err != nil {
		return err
	}
	what := map[string]string{
		bench.LockUncontended: "one op is an exclusive acquire and a release of the client's own lock; latency covers both",
		bench.LockContended:   "one op is a hand-off of the one lock; latency is the wait for it",
		bench.Read:            "one op is a read of 100 bytes",
		bench.Write:           "one op is a conditional write of 100 bytes",
	}[r.Workload]
	facts := []string{fmt.Sprintf("%vs measured after %vs of warm-up", r.Params["duration_s"], r.Params["warmup_s"])}
	if l, ok := r.Params["lease_s"]; ok {
		facts = append(facts, fmt.Sprintf("lease %vs", l))
	}
	if m, ok := r.Params["members"]; ok {
		facts = append(facts, fmt.Sprintf("%v replicas", m))
	}
	fmt.Fprintf(w, "%s; %s; names under %v, removed\n", what, strings.Join(facts, ", "), r.Params["prefix"])
	if fe, ok := r.Extra["first_error"]; ok {
		fmt.Fprintf(w, "first error: %v\n", fe)
	}
	if se, ok := r.Extra["session_events"]; ok {
		fmt.Fprintf(w, "session events during the run: %v\n", se)
	}
	if _, ok := r.Extra["stuck_clients_after_window"]; ok {
		fmt.Fprintln(w, "some clients were still blocked 30s after the window closed")
	}
	if ce, ok := r.Extra["cleanup_error"]; ok {
		fmt.Fprintf(w, "could not remove everything under %v: %v\n", r.Params["prefix"], ce)
	}
	return nil
}

// runError is a failed run's error without the "bench WORKLOAD: " that
// starts bench's errors, since the CLI's message starts with it too.
type runError struct {
	err    error
	prefix string
}

func (r runError) Error() string { return strings.TrimPrefix(r.err.Error(), r.prefix) }

func (r runError) Unwrap() error { return r.err }
