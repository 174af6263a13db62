// Package bench measures a running cell with the workloads lockcell's
// speed is judged by (docs/performance.md, "Measure your own cell"): each
// of C clients is its own session (client.Dial) in a closed loop, with no
// think time; after an unmeasured warm-up the operations completed inside
// a measured window are counted, and their latencies give percentiles by
// nearest rank. A run creates its names under a prefix and removes them
// when it ends, interrupted or not.
//
// The workloads and the Result's JSON field names are those of the
// side-by-side comparison with etcd and ZooKeeper, so `lockcell bench
// --json` lines sit in the same table as the peers' runs.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
)

// The workloads.
const (
	// LockUncontended: client i acquires and releases its own lock,
	// <prefix>/lock-u/<i>, which nobody else uses. One operation is an
	// exclusive Acquire plus a Release; its latency covers the pair.
	LockUncontended = "lock-uncontended"
	// LockContended: every client acquires one lock, <prefix>/lock-c,
	// and releases it at once. One operation is a hand-off; its latency
	// is the wait in Acquire, queueing behind the other clients included.
	LockContended = "lock-contended"
	// Read: every client reads one 100-byte file, <prefix>/read, and
	// checks its contents (GetContentsAndStat); see the variants.
	Read = "read"
	// Write: client i overwrites its own 100-byte file,
	// <prefix>/write/<i>, with the same value on condition that its
	// content generation is the one its previous write returned
	// (SetContentsAndStat with IfGeneration). A generation mismatch
	// counts as an error.
	Write = "write"
)

// Workloads lists every workload, in the order `make bench-cell` runs them.
var Workloads = []string{LockUncontended, LockContended, Read, Write}

// The variants of Read.
const (
	// Linearizable reads through a handle opened WithoutCache: every
	// read is a call the master answers after confirming it still leads.
	Linearizable = "linearizable"
	// Cached reads through a handle with the client's cache (the
	// library's default): after the first read every read is a cache
	// hit, with no call. No peer system has a counterpart.
	Cached = "cached"
	// Follower reads with client.MaxStaleness(FollowerStaleness): each
	// read is a call a replica other than the master answers from its own
	// state, spread over them, falling back to the master when one
	// cannot prove its state fresh enough; never cached. ZooKeeper's
	// local reads are the counterpart (they have no bound).
	// Result.Extra["follower_share"] is the share of reads a follower
	// answered.
	Follower = "follower"
)

// FollowerStaleness is the bound of the Follower variant's reads.
const FollowerStaleness = time.Second

// ReadVariants lists the variants of Read; the first is the default.
var ReadVariants = []string{Linearizable, Cached, Follower}

// CAS is the variant a Write result carries (Write has no other): its
// writes are compare-and-swaps, and the comparison's lines name them so.
const CAS = "cas"

// Defaults of Config.
const (
	DefaultClients   = 16
	DefaultDuration  = 10 * time.Second
	DefaultWarmup    = 2 * time.Second
	DefaultOpTimeout = 30 * time.Second
	// ValueBytes is the size of the read and write workloads' value.
	ValueBytes = 100
	// DirPrefix starts the name of a run's default folder:
	// /ls/<cell>/bench-<random>.
	DirPrefix = "bench-"
)

// setupConcurrency bounds the clients dialling and opening at once.
const setupConcurrency = 16

// errorPause is how long a client waits after a failed operation before
// its next one.
const errorPause = 10 * time.Millisecond

// Config configures Run.
type Config struct {
	// Client configures every session of the run (Cell and Replicas at
	// least): the C clients and one more that creates the run's names
	// before it and removes them after it.
	Client client.Config
	// Workload is one of Workloads.
	Workload string
	// Variant is, for Read, one of ReadVariants (empty: Linearizable);
	// the other workloads have none.
	Variant string
	// Clients is the number of clients, each its own session (default
	// DefaultClients).
	Clients int
	// Duration is the measured window (default DefaultDuration).
	Duration time.Duration
	// Warmup runs before the window, unmeasured (default DefaultWarmup;
	// negative: none).
	Warmup time.Duration
	// Prefix is the folder the run's names go under, created if missing
	// (default /ls/<cell>/bench-<random>). What the run creates, the
	// folder included, is removed at the end; what was there before is
	// left alone, and a name the workload needs that exists already
	// fails the run.
	Prefix string
	// OpTimeout bounds each call of the setup and of the removal at the
	// end (default DefaultOpTimeout); the workload's own calls are
	// bounded by the end of the window only.
	OpTimeout time.Duration
	// ClientLib is copied into Result.ClientLib (the CLI names its
	// build).
	ClientLib string
	// Progress, when set, is called about every 250 ms while the
	// workload runs, from Run's goroutine.
	Progress func(Progress)
}

// Progress is how far a run is.
type Progress struct {
	// Elapsed and Total count from the start of the warm-up to the end
	// of the window.
	Elapsed, Total time.Duration
	// Warmup: the window has not begun.
	Warmup bool
	// Ops and Errors are the counted operations and errors so far (in
	// the window).
	Ops, Errors int64
}

// Result is one run, as one JSON line. Latencies are microseconds (to
// 0.1); CPU is a percentage of one core.
type Result struct {
	TS        string `json:"ts"`
	System    string `json:"system"` // always "lockcell"
	ClientLib string `json:"client_lib,omitempty"`
	Workload  string `json:"workload"`
	// Variant is Read's variant, CAS for Write, empty for the locks.
	Variant string `json:"variant,omitempty"`
	// Params: clients, duration_s, warmup_s, value_bytes (read, write),
	// lease_s (the lease the cell grants), members (the replicas the
	// master lists) and prefix.
	Params    map[string]any `json:"params"`
	Ops       int64          `json:"ops"`
	OpsPerSec float64        `json:"ops_per_s"`
	P50us     float64        `json:"p50_us"`
	P90us     float64        `json:"p90_us"`
	P99us     float64        `json:"p99_us"`
	MaxUs     float64        `json:"max_us"`
	MeanUs    float64        `json:"mean_us"`
	Errors    int64          `json:"errors"`
	// ClientCPUPct is the CPU time (user + system) of this process over
	// the window, as a percentage of one core (0 where the platform does
	// not say).
	ClientCPUPct float64 `json:"client_cpu_pct"`
	// Extra holds what only some runs have: first_error,
	// warmup_errors, session_events (jeopardy, expired,
	// master_failover counts), stuck_clients_after_window,
	// cleanup_error, follower_share (the Follower variant: the
	// percentage of reads a follower answered).
	Extra map[string]any `json:"extra,omitempty"`
}

// CleanupError is part of a failed run's error when the names the run
// created could not all be removed: they are left under Prefix.
type CleanupError struct {
	Prefix string
	Err    error
}

func (e *CleanupError) Error() string { return fmt.Sprintf("remove %s: %v", e.Prefix, e.Err) }

func (e *CleanupError) Unwrap() error { return e.Err }

// Run runs one workload against the cell cfg.Client names and returns
// its figures. An error means it could not run: no session, a name it
// needs could not be created, or ctx ended (an interrupted run reports
// no figures). Either way the names it created are removed before it
// returns; a failure to remove them is Result.Extra["cleanup_error"], or
// a CleanupError joined to the error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Client.Logger == nil {
		cfg.Client.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := &Result{TS: time.Now().UTC().Format(time.RFC3339), System: "lockcell", ClientLib: cfg.ClientLib,
		Workload: cfg.Workload, Variant: cfg.Variant, Extra: map[string]any{},
		Params: map[string]any{"clients": cfg.Clients, "duration_s": cfg.Duration.Seconds(),
			"warmup_s": max(cfg.Warmup, 0).Seconds(), "prefix": cfg.Prefix}}
	if cfg.Workload == Read || cfg.Workload == Write {
		res.Params["value_bytes"] = ValueBytes
	}
	if cfg.Workload == Write {
		res.Variant = CAS
	}
	r := &run{cfg: cfg, res: res, val: value(ValueBytes)}
	defer r.closeSessions()
	admin, err := r.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", cfg.Workload, err)
	}
	r.admin = admin
	r.noteCell(ctx)
	err = r.setup(ctx)
	if err == nil {
		err = r.measure(ctx)
	}
	r.closeClients()
	if cerr := r.cleanup(ctx); cerr != nil {
		if err != nil {
			err = errors.Join(err, &CleanupError{Prefix: cfg.Prefix, Err: cerr})
		} else {
			res.Extra["cleanup_error"] = cerr.Error()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", cfg.Workload, err)
	}
	if j, x, f := r.jeopardies.Load(), r.expiries.Load(), r.failovers.Load(); j+x+f > 0 {
		res.Extra["session_events"] = map[string]int64{"jeopardy": j, "expired": x, "master_failover": f}
	}
	if len(res.Extra) == 0 {
		res.Extra = nil
	}
	return res, nil
}

func (cfg *Config) defaults() error {
	if !slices.Contains(Workloads, cfg.Workload) {
		return fmt.Errorf("bench: unknown workload %q (want %s)", cfg.Workload, strings.Join(Workloads, ", "))
	}
	switch {
	case cfg.Workload == Read && cfg.Variant == "":
		cfg.Variant = ReadVariants[0]
	case cfg.Workload == Read && !slices.Contains(ReadVariants, cfg.Variant):
		return fmt.Errorf("bench: unknown read variant %q (want %s)", cfg.Variant, strings.Join(ReadVariants, ", "))
	case cfg.Workload != Read && cfg.Variant != "":
		return fmt.Errorf("bench: %s has no variants (only %s has: %s)", cfg.Workload, Read, strings.Join(ReadVariants, ", "))
	}
	if cfg.Clients <= 0 {
		cfg.Clients = DefaultClients
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = DefaultWarmup
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.Prefix == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		cfg.Prefix = "/ls/" + cfg.Client.Cell + "/" + DirPrefix + hex.EncodeToString(b[:])
	}
	return nil
}

// run is one Run's state.
type run struct {
	cfg   Config
	res   *Result
	val   []byte
	admin *client.Client

	mu       sync.Mutex // guards sessions and created
	sessions []*client.Client
	created  []string // names this run created, parents first

	clients []*benchClient
	drains  sync.WaitGroup // the goroutines reading each session's events

	jeopardies, expiries, failovers atomic.Int64
	// followerReads and masterReads count who answered the Follower
	// variant's reads.
	followerReads, masterReads atomic.Int64
}

// op performs one operation and returns the latency to record for it.
type op func(ctx context.Context) (time.Duration, error)

// benchClient is one client of the run: its session, handles and
// operation, and what it recorded.
type benchClient struct {
	c       *client.Client
	handles []*client.Handle
	op      op
	lat     histogram // written by its own loop only
	ops     atomic.Int64
	errs    atomic.Int64
	warmErr atomic.Int64
}

// dial opens a session for the run and counts its session events; the
// session is closed by closeSessions at the latest.
func (r *run) dial(ctx context.Context) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	c, err := client.Dial(dctx, r.cfg.Client)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sessions = append(r.sessions, c)
	r.mu.Unlock()
	r.drains.Add(1)
	go func() {
		defer r.drains.Done()
		for ev := range c.Events() { // closed by Close
			switch ev.Kind {
			case client.Jeopardy:
				r.jeopardies.Add(1)
			case client.Expired:
				r.expiries.Add(1)
			case client.MasterFailover:
				r.failovers.Add(1)
			}
		}
	}()
	return c, nil
}

// noteCell records the lease the cell grants (a fresh session's remaining
// lease, rounded up to the second) and how many replicas the master
// lists. Neither is essential: a failure leaves them out.
func (r *run) noteCell(ctx context.Context) {
	r.res.Params["members"] = len(lcadmin.New(r.admin).ReplicaAddrs())
	cctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	ss, err := lcadmin.New(r.admin).Sessions(cctx)
	if err != nil {
		return
	}
	for _, s := range ss {
		if s.ID == r.admin.Session() {
			r.res.Params["lease_s"] = float64((s.Lease.Milliseconds()+999)/1000*1000) / 1000
		}
	}
}

// create creates name (a directory when dir) as c, failing if it exists,
// and remembers it for cleanup.
func (r *run) create(ctx context.Context, c *client.Client, name string, dir bool, opts ...client.OpenOption) (*client.Handle, error) {
	mode := client.Read | client.Write | client.Create | client.Excl
	if dir {
		mode = client.Read | client.Create | client.Excl | client.Directory
	}
	h, err := c.Open(ctx, name, mode, opts...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.created = append(r.created, name)
	r.mu.Unlock()
	return h, nil
}

// mkdirs creates the prefix and its missing parents below the cell root.
func (r *run) mkdirs(ctx context.Context) error {
	root := "/ls/" + r.cfg.Client.Cell
	rel, ok := strings.CutPrefix(r.cfg.Prefix, root)
	if !ok || (rel != "" && rel[0] != '/') {
		return fmt.Errorf("prefix %s is not under %s", r.cfg.Prefix, root)
	}
	p := root
	for _, part := range strings.Split(rel, "/") {
		if part == "" {
			continue
		}
		p += "/" + part
		h, err := r.create(ctx, r.admin, p, true)
		if errors.Is(err, client.ErrExists) {
			continue
		}
		if err != nil {
			return err
		}
		h.Close()
	}
	return nil
}

// cleanup removes what the run created, children first, as the setup
// session, on a context of its own: an interrupted run leaves nothing
// behind either.
func (r *run) cleanup(ctx context.Context) error {
	r.mu.Lock()
	created := slices.Clone(r.created)
	r.mu.Unlock()
	if len(created) == 0 || r.admin == nil {
		return nil
	}
	var errs []error
	for _, name := range slices.Backward(created) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.OpTimeout)
		h, err := r.admin.Open(cctx, name, client.Read|client.Write)
		if err == nil {
			err = h.Delete(cctx)
			h.Close()
		}
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closeClients ends the clients' sessions (their locks are released at
// once), in parallel, so the names can be removed.
func (r *run) closeClients() {
	var wg sync.WaitGroup
	for _, bc := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, h := range bc.handles {
				h.Close()
			}
			bc.c.Close()
		}()
	}
	wg.Wait()
}

// closeSessions closes every session the run opened (Close is
// idempotent) and waits for their event readers.
func (r *run) closeSessions() {
	r.mu.Lock()
	ss := r.sessions
	r.sessions = nil
	r.mu.Unlock()
	for _, c := range ss {
		c.Close()
	}
	r.drains.Wait()
}

// setup creates the workload's shared names, then dials the clients
// (setupConcurrency at a time), each opening its handles.
func (r *run) setup(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	if err := r.mkdirs(sctx); err != nil {
		return fmt.Errorf("create %s: %w", r.cfg.Prefix, err)
	}
	open, err := r.workload(sctx)
	if err != nil {
		return err
	}
	cancel()

	r.clients = make([]*benchClient, r.cfg.Clients)
	errs := make([]error, r.cfg.Clients)
	sem := make(chan struct{}, setupConcurrency)
	var wg sync.WaitGroup
	for i := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			c, err := r.dial(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
				return
			}
			bc := &benchClient{c: c}
			r.clients[i] = bc
			octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
			defer cancel()
			if err := open(octx, bc, i); err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	r.clients = slices.DeleteFunc(r.clients, func(bc *benchClient) bool { return bc == nil })
	return errors.Join(errs...)
}

// measure runs every client's loop through the warm-up and the window,
// then fills in the figures.
func (r *run) measure(ctx context.Context) error {
	t0 := time.Now()
	start := t0.Add(max(r.cfg.Warmup, 0))
	end := start.Add(r.cfg.Duration)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var firstErr atomic.Pointer[string]
	var loops sync.WaitGroup
	for _, bc := range r.clients {
		loops.Add(1)
		go func() {
			defer loops.Done()
			bc.loop(wctx, start, end, &firstErr)
		}()
	}

	progress := func(now time.Time) {
		if r.cfg.Progress == nil {
			return
		}
		p := Progress{Elapsed: min(now.Sub(t0), end.Sub(t0)), Total: end.Sub(t0), Warmup: now.Before(start)}
		for _, bc := range r.clients {
			p.Ops += bc.ops.Load()
			p.Errors += bc.errs.Load()
		}
		r.cfg.Progress(p)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	begin := time.NewTimer(time.Until(start))
	defer begin.Stop()
	var cpu0, cpu1 time.Duration
	var w0, w1 time.Time
	for wctx.Err() == nil {
		select {
		case <-begin.C:
			w0, cpu0 = time.Now(), cpuTime()
		case now := <-tick.C:
			progress(now)
		case <-wctx.Done():
		}
	}
	w1, cpu1 = time.Now(), cpuTime()

	// Calls in flight at the end of the window were cut short by it; a
	// loop still blocked after that is noted, and ends when its session
	// is closed.
	if !waitFor(&loops, 30*time.Second) {
		r.res.Extra["stuck_clients_after_window"] = true
		r.closeClients()
		loops.Wait()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	progress(time.Now())

	var all histogram
	var warmErrs int64
	for _, bc := range r.clients {
		all.merge(&bc.lat)
		r.res.Errors += bc.errs.Load()
		warmErrs += bc.warmErr.Load()
	}
	ps := all.percentiles(0.50, 0.90, 0.99)
	r.res.Ops = int64(all.n)
	r.res.OpsPerSec = round1(float64(all.n) / r.cfg.Duration.Seconds())
	r.res.P50us, r.res.P90us, r.res.P99us = us(ps[0]), us(ps[1]), us(ps[2])
	r.res.MaxUs, r.res.MeanUs = us(all.max), us(all.mean())
	if el := w1.Sub(w0); !w0.IsZero() && el > 0 {
		r.res.ClientCPUPct = round1(float64(cpu1-cpu0) / float64(el) * 100)
	}
	if warmErrs > 0 {
		r.res.Extra["warmup_errors"] = warmErrs
	}
	if f, m := r.followerReads.Load(), r.masterReads.Load(); f+m > 0 {
		r.res.Extra["follower_share"] = round1(float64(f) / float64(f+m) * 100)
	}
	if fe := firstErr.Load(); fe != nil {
		r.res.Extra["first_error"] = *fe
	}
	return nil
}

// loop runs the client's operations back to back until the window ends.
// An operation counts if it completes inside the window; one that fails
// there counts as an error, and the client pauses errorPause before the
// next.
func (bc *benchClient) loop(ctx context.Context, start, end time.Time, firstErr *atomic.Pointer[string]) {
	for ctx.Err() == nil {
		lat, err := bc.op(ctx)
		done := time.Now()
		if done.After(end) {
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if done.Before(start) {
				bc.warmErr.Add(1)
			} else {
				bc.errs.Add(1)
			}
			msg := err.Error()
			firstErr.CompareAndSwap(nil, &msg)
			pause := time.NewTimer(errorPause)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return
			}
			continue
		}
		if done.Before(start) {
			continue
		}
		bc.lat.add(lat)
		bc.ops.Add(1)
	}
}

// waitFor waits for wg up to d and reports whether it finished.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// value is the workloads' n-byte value: a-z repeated.
func value(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}
