package selfcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
)

// Dir is the folder under the cell root where Run creates its own
// folder: /ls/<cell>/lockcell-selfcheck/<random>/.
const Dir = "lockcell-selfcheck"

// Defaults of Config.
const (
	DefaultDuration     = 10 * time.Second
	DefaultFiles        = 3
	DefaultLag          = 50 * time.Millisecond
	DefaultOpTimeout    = 10 * time.Second
	DefaultCheckTimeout = time.Minute
)

// Config configures Run.
type Config struct {
	// Client configures both sessions (Cell and Replicas at least). The
	// second session's Dialer is wrapped to lag (Lag).
	Client client.Config
	// Duration is how long the workload runs (default DefaultDuration).
	Duration time.Duration
	// Files is how many files the sessions read and write (default
	// DefaultFiles); one more file is the lock.
	Files int
	// Lag delays everything the second session receives (default
	// DefaultLag; negative: none). Its cache invalidations then arrive
	// late, so a write that completes without waiting for the session to
	// acknowledge them is caught as a stale cache hit. Every write to a
	// file that session caches takes about Lag longer.
	Lag time.Duration
	// OpTimeout bounds each call of the workload (default
	// DefaultOpTimeout); a call that runs out has an unknown outcome.
	OpTimeout time.Duration
	// CheckTimeout bounds the linearizability check (default
	// DefaultCheckTimeout).
	CheckTimeout time.Duration
	// Seed seeds the workload's choices (0: a random seed).
	Seed uint64
	// Progress, when set, is called about every 250 ms while the workload
	// runs, from Run's goroutine.
	Progress func(Progress)
}

// Progress is how far a run is.
type Progress struct {
	Elapsed, Duration time.Duration
	Ops, Unknown      int
}

// Result is a run's history, its counts and the check's report.
type Result struct {
	Report
	Prefix   string        `json:"prefix"`   // the folder the run created (and deleted)
	Sessions int           `json:"sessions"` // sessions that took part
	Duration time.Duration `json:"duration_ns"`
	Seed     uint64        `json:"seed"`
	// Counts of the workload's calls, unknown outcomes included.
	Reads       int `json:"reads"`
	CachedReads int `json:"cached_reads"`
	CacheHits   int `json:"cache_hits"`
	Writes      int `json:"writes"` // writes and compare-and-swaps
	Acquires    int `json:"acquires"`
	// Incomplete says why the workload stopped before Duration, when it
	// did (a session expired, the context ended): the history recorded
	// until then is still checked.
	Incomplete string `json:"incomplete,omitempty"`
	// CleanupError is why the run's files could not all be deleted.
	CleanupError string `json:"cleanup_error,omitempty"`
	History      []Op   `json:"-"`
}

// Run runs the workload against the cell cfg.Client names and checks its
// history. An error means it could not run (no session, the files could
// not be created); a violation is a Result whose Verdict says so. Ending
// ctx ends the workload early (Incomplete), then the files are deleted
// and what was recorded is checked.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Files <= 0 {
		cfg.Files = DefaultFiles
	}
	if cfg.Lag == 0 {
		cfg.Lag = DefaultLag
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64()
	}
	var rb [6]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return nil, fmt.Errorf("selfcheck: %w", err)
	}
	r := &run{cfg: cfg, start: time.Now(), res: &Result{Seed: cfg.Seed}}
	root := "/ls/" + cfg.Client.Cell
	r.res.Prefix = root + "/" + Dir + "/" + hex.EncodeToString(rb[:])
	for i := range cfg.Files {
		r.files = append(r.files, fmt.Sprintf("%s/f%d", r.res.Prefix, i))
	}
	r.lock = r.res.Prefix + "/lock"

	for i := range 2 {
		cc := cfg.Client
		if i == 1 && cfg.Lag > 0 {
			cc.Dialer = lagDialer(cc.Dialer, cfg.Lag)
		}
		cl, err := client.Dial(ctx, cc)
		if err != nil {
			r.closeClients()
			return nil, fmt.Errorf("selfcheck: session %d: %w", i, err)
		}
		r.clients = append(r.clients, cl)
	}
	defer r.closeClients()
	r.res.Sessions = len(r.clients)
	if err := r.setup(ctx, root); err != nil {
		r.cleanup()
		return nil, fmt.Errorf("selfcheck: create %s: %w", r.res.Prefix, err)
	}
	r.work(ctx)
	r.cleanup()
	r.res.Duration = time.Since(r.start)
	r.res.History = r.ops
	sortOps(r.res.History)
	r.res.Report = Check(r.res.History, cfg.CheckTimeout)
	return r.res, nil
}

// run is one Run's state.
type run struct {
	cfg     Config
	start   time.Time
	clients []*client.Client
	files   []string
	lock    string
	created []string // names created, deleted at the end in reverse order

	mu      sync.Mutex // guards what follows
	ops     []Op
	unknown int
	stopped string
	res     *Result
}

func (r *run) now() time.Duration { return time.Since(r.start) }

func (r *run) record(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, o)
	if o.Unknown {
		r.unknown++
	}
	switch o.Kind {
	case KindRead:
		r.res.Reads++
		if o.Cached {
			r.res.CachedReads++
		}
		if o.Hit {
			r.res.CacheHits++
		}
	case KindWrite, KindCAS:
		r.res.Writes++
	case KindAcquire:
		r.res.Acquires++
	}
}

func (r *run) stop(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == "" {
		r.stopped = why
	}
}

func (r *run) closeClients() {
	for _, cl := range r.clients {
		cl.Close()
	}
	r.clients = nil
}

// setup creates the run's folder, its files (each written once, as the
// first operation of its history) and the lock's file.
func (r *run) setup(ctx context.Context, root string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	cl := r.clients[0]
	h, err := cl.Open(ctx, root+"/"+Dir, client.Read|client.Create|client.Directory)
	if err != nil {
		return err
	}
	h.Close()
	h, err = cl.Open(ctx, r.res.Prefix, client.Read|client.Create|client.Excl|client.Directory)
	if err != nil {
		return err
	}
	h.Close()
	r.created = append(r.created, r.res.Prefix)
	for _, f := range append(append([]string(nil), r.files...), r.lock) {
		h, err := cl.Open(ctx, f, client.Read|client.Write|client.Create|client.Excl)
		if err != nil {
			return err
		}
		r.created = append(r.created, f)
		if f != r.lock {
			o := Op{Session: 0, Kind: KindWrite, Object: f, Value: "init " + f, Call: r.now()}
			st, err := h.SetContentsAndStat(ctx, []byte(o.Value))
			o.Return = r.now()
			if err != nil {
				h.Close()
				return err
			}
			o.Gen = st.ContentGen
			r.record(o)
		}
		h.Close()
	}
	return nil
}

// cleanup deletes what setup created, with session 0 (whose handles the
// workload has closed by now), on a context of its own: an ended run
// still leaves nothing behind.
func (r *run) cleanup() {
	if len(r.created) == 0 || len(r.clients) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.OpTimeout)
	defer cancel()
	var errs []error
	for i := len(r.created) - 1; i >= 0; i-- {
		name := r.created[i]
		h, err := r.clients[0].Open(ctx, name, client.Read|client.Write)
		if err == nil {
			err = h.Delete(ctx)
			h.Close()
		}
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.res.CleanupError = err.Error()
	}
}

// work runs the workload, two loops per session (see loop), until the
// duration is over, ctx ends or a session fails, reporting progress.
func (r *run) work(ctx context.Context) {
	// Calls in flight when the time is up finish (a call cut short would
	// be an unknown outcome that says nothing about the cell); only an
	// ended ctx or a failed session cuts them.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	end := time.Now().Add(r.cfg.Duration)
	var wg sync.WaitGroup
	for i, cl := range r.clients {
		s := &session{r: r, idx: i, cl: cl, gens: map[string]uint64{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.close()
			if err := s.open(wctx); err != nil {
				if wctx.Err() == nil {
					r.stop(fmt.Sprintf("session %d: open: %v", i, err))
					cancel()
				}
				return
			}
			var rw sync.WaitGroup
			for _, reader := range []bool{false, true} {
				rw.Add(1)
				go func() {
					defer rw.Done()
					stream := uint64(2 * i)
					if reader {
						stream++
					}
					rng := mrand.New(mrand.NewPCG(r.cfg.Seed, stream))
					s.loop(wctx, end, cancel, rng, reader)
				}()
			}
			rw.Wait()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			r.mu.Lock()
			why := r.stopped
			r.mu.Unlock()
			if why == "" && ctx.Err() != nil {
				why = "interrupted: " + ctx.Err().Error()
			}
			r.res.Incomplete = why
			r.progress()
			return
		case <-tick.C:
			r.progress()
		}
	}
}

func (r *run) progress() {
	if r.cfg.Progress == nil {
		return
	}
	r.mu.Lock()
	p := Progress{Elapsed: min(r.now(), r.cfg.Duration), Duration: r.cfg.Duration, Ops: len(r.ops), Unknown: r.unknown}
	r.mu.Unlock()
	r.cfg.Progress(p)
}

// session is one session's part of the workload: a caching and an
// uncached handle on every file, and a handle on the lock's file (plus an
// uncached one to read who holds it).
type session struct {
	r        *run
	idx      int
	cl       *client.Client
	seq      atomic.Int64
	cached   map[string]*client.Handle
	uncached map[string]*client.Handle
	lock     *client.Handle
	lockRead *client.Handle
	// Of the loop that writes only:
	gens map[string]uint64 // the last content generation seen of each file, for cas
	n    int               // writes, for unique values
}

func (s *session) open(ctx context.Context) error {
	s.cached, s.uncached = map[string]*client.Handle{}, map[string]*client.Handle{}
	octx, cancel := context.WithTimeout(ctx, s.r.cfg.OpTimeout)
	defer cancel()
	for _, f := range s.r.files {
		h, err := s.cl.Open(octx, f, client.Read|client.Write)
		if err != nil {
			return err
		}
		s.cached[f] = h
		if h, err = s.cl.Open(octx, f, client.Read, client.WithoutCache()); err != nil {
			return err
		}
		s.uncached[f] = h
	}
	// A short lock-delay: should a session die holding the lock, the
	// other waits a moment rather than the default minute.
	h, err := s.cl.Open(octx, s.r.lock, client.Read|client.Write, client.WithLockDelay(time.Second))
	if err != nil {
		return err
	}
	s.lock = h
	if h, err = s.cl.Open(octx, s.r.lock, client.Read, client.WithoutCache()); err != nil {
		return err
	}
	s.lockRead = h
	return nil
}

func (s *session) close() {
	for _, h := range s.cached {
		h.Close()
	}
	for _, h := range s.uncached {
		h.Close()
	}
	if s.lock != nil {
		s.lock.Close() // releases a lock still held
	}
	if s.lockRead != nil {
		s.lockRead.Close()
	}
}

// loop runs random operations until end or until ctx ends. Each session
// runs two loops at once: the reader reads through the cache (files, and
// who holds the lock), so a stale copy is read as soon as it is stale,
// whatever the other loop is waiting for; the other reads without the
// cache, writes, compares-and-swaps and runs lock rounds: acquire the
// lock, read who holds it, maybe write a file, release.
func (s *session) loop(ctx context.Context, end time.Time, cancel context.CancelFunc, rng *mrand.Rand, reader bool) {
	for ctx.Err() == nil && time.Now().Before(end) {
		f := s.r.files[rng.IntN(len(s.r.files))]
		var err error
		switch p := rng.IntN(100); {
		case reader && p < 85:
			err = s.read(ctx, f, true)
		case reader:
			err = s.holder(ctx, true)
		case p < 30:
			err = s.read(ctx, f, false)
		case p < 55:
			err = s.write(ctx, f, false)
		case p < 70:
			err = s.write(ctx, f, true)
		case p < 85:
			err = s.holder(ctx, false)
		default:
			err = s.lockRound(ctx, f, rng)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.r.stop(fmt.Sprintf("session %d: %v", s.idx, err))
				cancel()
			}
			return
		}
		// A moment between calls keeps the history small enough to
		// check quickly: cache hits take microseconds.
		t := time.NewTimer(time.Duration(rng.IntN(4000)) * time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// begin starts recording an operation.
func (s *session) begin(kind Kind, object string) Op {
	return Op{Session: s.idx, Seq: int(s.seq.Add(1)), Kind: kind, Object: object, Call: s.r.now()}
}

// end records o with err: nil, a definite failure the caller already put
// in o.Err, or an unknown outcome. It returns an error only when the
// session cannot go on (expired, closed).
func (s *session) end(ctx context.Context, o Op, err error) error {
	o.Return = s.r.now()
	if err != nil && o.Err == "" {
		if ctx.Err() != nil {
			// An interrupt cut the call short: not the cell's doing.
			o.Unknown, o.Error = true, "interrupted"
			s.r.record(o)
			return nil
		}
		o.Unknown, o.Error = true, err.Error()
	}
	s.r.record(o)
	if errors.Is(err, client.ErrSessionExpired) || errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrHandleInvalid) {
		return err
	}
	return nil
}

func (s *session) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.r.cfg.OpTimeout)
}

func (s *session) read(ctx context.Context, f string, cached bool) error {
	h := s.uncached[f]
	if cached {
		h = s.cached[f]
	}
	o := s.begin(KindRead, f)
	o.Cached = cached
	hits := admin.New(s.cl).CacheStats().Hits
	cctx, cancel := s.callCtx(ctx)
	data, st, err := h.GetContentsAndStat(cctx)
	cancel()
	if err == nil {
		o.Value, o.Gen = string(data), st.ContentGen
		// Only the reader loop reads through the cache: the hits are its.
		o.Hit = cached && admin.New(s.cl).CacheStats().Hits > hits
		if !cached {
			s.gens[f] = st.ContentGen
		}
	}
	return s.end(ctx, o, err)
}

func (s *session) write(ctx context.Context, f string, cas bool) error {
	s.n++
	o := s.begin(KindWrite, f)
	o.Value = fmt.Sprintf("s%d-%d", s.idx, s.n)
	var opts []client.SetOption
	if cas && s.gens[f] == 0 {
		cas = false // no generation seen yet to compare with
		o.Kind = KindWrite
	}
	if cas {
		o.Kind, o.IfGen = KindCAS, s.gens[f]
		opts = append(opts, client.IfGeneration(o.IfGen))
	}
	cctx, cancel := s.callCtx(ctx)
	st, err := s.cached[f].SetContentsAndStat(cctx, []byte(o.Value), opts...)
	cancel()
	switch {
	case err == nil:
		o.Gen = st.ContentGen
		s.gens[f] = st.ContentGen
	case cas && errors.Is(err, client.ErrGenerationMismatch):
		o.Err = ErrMismatch
	}
	return s.end(ctx, o, err)
}

// holder reads who holds the lock, through the lock's own (caching)
// handle or the uncached one.
func (s *session) holder(ctx context.Context, cached bool) error {
	h := s.lockRead
	if cached {
		h = s.lock
	}
	o := s.begin(KindHolder, s.r.lock)
	o.Cached = cached
	hits := admin.New(s.cl).CacheStats().Hits
	cctx, cancel := s.callCtx(ctx)
	st, err := h.GetStat(cctx)
	cancel()
	if err == nil {
		o.Hit = cached && admin.New(s.cl).CacheStats().Hits > hits
		o.Gen = st.LockGen
		switch {
		case st.LockHolders == 0:
			o.Holder, o.Gen = HolderNone, 0
		case st.LockHolders > 1:
			o.Holder = HolderSeveral
		default:
			o.Holder = HolderOther
			for i, cl := range s.r.clients {
				if len(st.Holders) == 1 && st.Holders[0].Session == cl.Session() {
					o.Holder = i
				}
			}
		}
	}
	return s.end(ctx, o, err)
}

func (s *session) lockRound(ctx context.Context, f string, rng *mrand.Rand) error {
	o := s.begin(KindAcquire, s.r.lock)
	cctx, cancel := s.callCtx(ctx)
	err := s.lock.Acquire(cctx, client.Exclusive)
	cancel()
	if err := s.end(ctx, o, err); err != nil {
		return err
	}
	// Whatever the Acquire's outcome, this session may hold the lock now:
	// check, maybe write, and release (a release of a lock not held is a
	// definite not_held).
	if err := s.holder(ctx, false); err != nil {
		return err
	}
	if rng.IntN(2) == 0 {
		if err := s.write(ctx, f, false); err != nil {
			return err
		}
	}
	o = s.begin(KindRelease, s.r.lock)
	// The release runs even when the run is ending, so the lock is not
	// left to the session's Close.
	cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.r.cfg.OpTimeout)
	err = s.lock.Release(cctx)
	cancel()
	if errors.Is(err, client.ErrNotHeld) {
		o.Err = ErrNotHeld
	}
	return s.end(ctx, o, err)
}
