package cell_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
	"lockcell/sequencer/kv"
)

// Fencing at a resource server (docs/spec.md#sequencers-and-fencing, the
// pause scenario of Chubby's
// §2.4): a real cell, and the kv resource server of package sequencer/kv on
// a real HTTP listener, its writes guarded by sequencer.Guard.

// fenceKV is a kv server on httptest and a way to talk to it.
type fenceKV struct {
	t   *testing.T
	srv *kv.Server
	hs  *httptest.Server
}

func fenceStartKV(t *testing.T, cfg kv.Config) *fenceKV {
	t.Helper()
	srv, err := kv.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &fenceKV{t: t, srv: srv, hs: hs}
}

// fenceAnswer is a kv server's answer, decoded.
type fenceAnswer struct {
	status int
	body   string
	res    kv.WriteResult // 200
	rej    kv.ErrorBody   // otherwise
}

// send sends one request; rawSeq, when not empty, is the header text. A
// transport failure is reported with Errorf and answers status 0.
func (f *fenceKV) send(ctx context.Context, method, path, rawSeq, body string) fenceAnswer {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, f.hs.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if rawSeq != "" {
		req.Header.Set(kv.HeaderSequencer, rawSeq)
	}
	resp, err := f.hs.Client().Do(req)
	if err != nil {
		f.t.Errorf("%s %s: %v", method, path, err) // not Fatal: workers call this too
		return fenceAnswer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Errorf("%s %s: reading the answer: %v", method, path, err)
		return fenceAnswer{}
	}
	a := fenceAnswer{status: resp.StatusCode, body: string(b)}
	if method != "GET" {
		var err error
		if a.status == http.StatusOK {
			err = json.Unmarshal(b, &a.res)
		} else if err = json.Unmarshal(b, &a.rej); err == nil && (a.rej.Error == "" || a.rej.Reason == "") {
			err = errors.New("no error or reason")
		}
		if err != nil {
			f.t.Errorf("%s %s: answer %d %q is not the documented JSON: %v", method, path, a.status, b, err)
		}
	}
	return a
}

func (f *fenceKV) put(ctx context.Context, key string, seq []byte, value string) fenceAnswer {
	return f.send(ctx, "PUT", "/kv/"+key, sequencer.EncodeText(seq), value)
}

func (f *fenceKV) incr(ctx context.Context, key string, seq []byte) fenceAnswer {
	return f.send(ctx, "POST", "/kv/"+key+"/incr", sequencer.EncodeText(seq), "")
}

// value GETs key: its value, or "" and false when absent.
func (f *fenceKV) value(ctx context.Context, key string) (string, bool) {
	f.t.Helper()
	a := f.send(ctx, "GET", "/kv/"+key, "", "")
	switch a.status {
	case http.StatusOK:
		return a.body, true
	case http.StatusNotFound:
		return "", false
	}
	f.t.Fatalf("GET %s: %d %s", key, a.status, a.body)
	return "", false
}

// accepted GETs the accept log of key.
func (f *fenceKV) accepted(ctx context.Context, key string) []kv.Accepted {
	f.t.Helper()
	a := f.send(ctx, "GET", "/accepted?key="+key, "", "")
	var out []kv.Accepted
	if err := json.Unmarshal([]byte(a.body), &out); a.status != http.StatusOK || err != nil {
		f.t.Errorf("GET /accepted: %d %s %v", a.status, a.body, err)
	}
	return out
}

func fenceGen(t *testing.T, seq []byte) uint64 {
	t.Helper()
	s, err := sequencer.Parse(seq)
	if err != nil {
		t.Fatalf("parse sequencer: %v", err)
	}
	return s.Generation
}

func fenceLogString(log []kv.Accepted) string {
	var b strings.Builder
	for _, e := range log {
		fmt.Fprintf(&b, "[%d %s gen %d] ", e.Index, e.Op, e.Generation)
	}
	return b.String()
}

// The pause scenario: A holds the lock and writes; A pauses (its
// KeepAlives stop: its link to the cell is cut), its session expires, B
// gets the lock after the lock-delay and writes; A resumes and writes with
// its old sequencer straight to the resource server (only its cell link
// was cut). The guard rejects A with 409 and B's value stays, whether the
// guard fences locally only or also asks the cell. Without the guard
// (the negative control) A's stale write lands: the lost update.
func TestPausedHolderIsFencedAtTheResource(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	checker := c.Client(t)
	for _, mode := range []string{"local-only", "checker", "unguarded-loses-update"} {
		t.Run(mode, func(t *testing.T) { fencePausedHolder(t, c, mode, checker) })
	}
}

func fencePausedHolder(t *testing.T, c *fixtures.Cell, mode string, checker *client.Client) {
	ctx := ctxT(t, 90*time.Second)
	const rw = client.Read | client.Write | client.Create
	const key = "k"
	lock := c.Name("fence-" + mode)
	cfg := kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell})}
	switch mode {
	case "checker":
		cfg.Guard = sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell, Checker: checker})
	case "unguarded-loses-update":
		cfg = kv.Config{Unguarded: true}
	}
	res := fenceStartKV(t, cfg)

	cut := fixtures.NewCutter()
	cfgA := c.ClientConfig()
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	t.Cleanup(cut.Heal) // let A's Close reach the cell (its session is long gone)
	b := c.Client(t)

	ha := mustOpen(t, ctx, a, lock, rw, client.WithLockDelay(time.Second))
	if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("A acquires: %v %v", ok, err)
	}
	seqA, err := ha.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ans := res.put(ctx, key, seqA, "a1"); ans.status != http.StatusOK {
		t.Fatalf("A writes a1: %d %s", ans.status, ans.body)
	}

	hb := mustOpen(t, ctx, b, lock, rw)
	got := make(chan error, 1)
	go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "B queued", func() bool { s, _ := hb.GetStat(ctx); return s.LockWaiters == 1 })

	cut.Cut() // A pauses: its KeepAlives stop
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("B acquires: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B did not get the lock within 30 s of A's pause")
	}
	gotAt := time.Now()
	st, err := hb.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LockDelayUntil.IsZero() || gotAt.Before(st.LockDelayUntil) {
		t.Fatalf("B got the lock at %v; lock-delay until %v", gotAt, st.LockDelayUntil)
	}
	seqB, err := hb.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	genA, genB := fenceGen(t, seqA), fenceGen(t, seqB)
	if genB <= genA {
		t.Fatalf("B's generation %d is not above A's %d", genB, genA)
	}

	if mode == "checker" {
		// A resumes before B has written anything: a local fence cannot
		// know, the cell can.
		ans := res.put(ctx, key, seqA, "a-early")
		if ans.status != http.StatusConflict || ans.rej.Reason != kv.ReasonStale || ans.rej.Generation != genA {
			t.Fatalf("A's stale write before B's first: %d %s", ans.status, ans.body)
		}
		if v, _ := res.value(ctx, key); v != "a1" {
			t.Fatalf("after A's refused early write the value is %q", v)
		}
	}

	if ans := res.put(ctx, key, seqB, "b1"); ans.status != http.StatusOK || ans.res.Generation != genB {
		t.Fatalf("B writes b1: %d %s", ans.status, ans.body)
	}

	// A resumes and writes with its old sequencer, straight over HTTP.
	ans := res.put(ctx, key, seqA, "a2")
	v, _ := res.value(ctx, key)
	log := res.accepted(ctx, key)
	t.Logf("%s: A (generation %d) after B (generation %d): %d %s; value %q; accept log %s",
		mode, genA, genB, ans.status, strings.TrimSpace(ans.body), v, fenceLogString(log))

	if mode == "unguarded-loses-update" {
		// The negative control: nothing stops A, and B's update is lost.
		if ans.status != http.StatusOK || v != "a2" {
			t.Fatalf("unguarded: A's stale write was not applied (%d %s, value %q): the control shows nothing", ans.status, ans.body, v)
		}
		if len(log) != 3 || log[1].Generation != genB || log[2].Generation != genA {
			t.Fatalf("unguarded accept log: %s", fenceLogString(log))
		}
		return
	}
	if ans.status != http.StatusConflict || ans.rej.Reason != kv.ReasonStale || ans.rej.Generation != genA || ans.rej.Highest != genB {
		t.Fatalf("A's stale write: %d %s", ans.status, ans.body)
	}
	if v != "b1" {
		t.Fatalf("stored value %q after A's stale write, want b1", v)
	}
	if len(log) != 2 || log[0].Generation != genA || log[1].Generation != genB || log[1].Lock != lock {
		t.Fatalf("accept log: %s", fenceLogString(log))
	}
	if got := res.srv.Accepted(); len(got) != 2 {
		t.Fatalf("server accept log: %+v", got)
	}
}

// Forged, altered and truncated sequencers are refused, with a Checker
// asking the cell: 400 when they do not parse, 409 when they parse but the
// cell does not recognise them (or they name another cell); never 200 and
// never 503, and nothing is stored. The real holder still writes after all
// of them (no forged generation fenced it out).
func TestKVRejectsForgedAndTruncated(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 90*time.Second)
	holder, checker := c.Client(t), c.Client(t)
	h := mustOpen(t, ctx, holder, c.Name("forge"), client.Read|client.Write|client.Create)
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	seq, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := sequencer.Parse(seq)
	otherKey := []byte("not the cell key, 32 bytes long!")
	forge := func(s sequencer.Sequencer) []byte { return sequencer.Sign(otherKey, s) }
	higher, otherCell := s, s
	higher.Generation += 1000
	otherCell.Cell = "u"
	flippedTag := append([]byte(nil), seq...)
	flippedTag[len(flippedTag)-1] ^= 1

	newKV := func(checked bool) *fenceKV {
		gc := sequencer.GuardConfig{Cell: c.Options().Cell}
		if checked {
			gc.Checker = checker
		}
		return fenceStartKV(t, kv.Config{Guard: sequencer.NewGuard(gc)})
	}
	res := newKV(true)
	type bad struct {
		name   string
		text   string // the header
		status int
		reason string
	}
	enc := sequencer.EncodeText
	cases := []bad{
		{"forged higher generation", enc(forge(higher)), 409, kv.ReasonForged},
		{"forged same generation", enc(forge(s)), 409, kv.ReasonForged},
		{"forged other cell", enc(forge(otherCell)), 409, kv.ReasonStale},
		{"flipped tag byte", enc(flippedTag), 409, kv.ReasonForged},
		{"not base64", "%%%not-base64", 400, kv.ReasonMalformed},
		{"truncated tag", enc(seq[:len(seq)-3]), 400, kv.ReasonMalformed},
		{"truncated to the version byte", enc(seq[:1]), 400, kv.ReasonMalformed},
	}
	// Every single-byte alteration and every truncation: 400 when it no
	// longer parses, else 409 (the cell refuses it).
	for i := range seq {
		alt := append([]byte(nil), seq...)
		alt[i] ^= 0x40
		want, reason := 400, kv.ReasonMalformed
		if p, err := sequencer.Parse(alt); err == nil {
			want, reason = 409, kv.ReasonForged
			if p.Cell != s.Cell {
				reason = kv.ReasonStale // the guard refuses other cells itself
			}
		}
		cases = append(cases, bad{fmt.Sprintf("byte %d altered", i), enc(alt), want, reason})
		if i > 0 {
			want, reason = 400, kv.ReasonMalformed
			if _, err := sequencer.Parse(seq[:i]); err == nil {
				want, reason = 409, kv.ReasonForged
			}
			cases = append(cases, bad{fmt.Sprintf("truncated to %d bytes", i), enc(seq[:i]), want, reason})
		}
	}
	rejected := 0
	for _, bc := range cases {
		for _, op := range []struct{ method, path string }{{"PUT", "/kv/x"}, {"POST", "/kv/n/incr"}} {
			ans := res.send(ctx, op.method, op.path, bc.text, "forged-"+bc.name)
			if ans.status != bc.status || ans.rej.Reason != bc.reason {
				t.Errorf("%s, %s: %d %s; want %d %s", bc.name, op.method, ans.status, strings.TrimSpace(ans.body), bc.status, bc.reason)
			}
			rejected++
		}
	}
	t.Logf("%d forged, altered or truncated writes refused", rejected)
	if _, ok := res.value(ctx, "x"); ok {
		t.Fatal("a refused write stored a value")
	}
	if _, ok := res.value(ctx, "n"); ok {
		t.Fatal("a refused incr stored a value")
	}
	if log := res.accepted(ctx, "x"); len(log) != 0 {
		t.Fatalf("accept log after refused writes: %s", fenceLogString(log))
	}
	if ans := res.put(ctx, "x", seq, "real"); ans.status != http.StatusOK || ans.res.Generation != s.Generation {
		t.Fatalf("the real holder after the forgeries: %d %s", ans.status, ans.body)
	}
	if v, _ := res.value(ctx, "x"); v != "real" {
		t.Fatalf("value %q", v)
	}
	if log := res.srv.Accepted(); len(log) != 1 || log[0].Generation != s.Generation {
		t.Fatalf("accept log: %s", fenceLogString(log))
	}

	// The documented limit of a guard without a Checker: it cannot verify
	// signatures, so a forged high generation is accepted and then fences
	// the real holder out. This is why untrusted clients need a Checker.
	t.Run("local-only guard is forgeable (documented)", func(t *testing.T) {
		loc := newKV(false)
		if ans := loc.put(ctx, "x", seq[:len(seq)-3], "t"); ans.status != 400 {
			t.Fatalf("truncated, local-only: %d %s", ans.status, ans.body)
		}
		if ans := loc.put(ctx, "x", forge(higher), "forged"); ans.status != http.StatusOK {
			t.Fatalf("forged, local-only: %d %s (if the guard now verifies signatures, update this test)", ans.status, ans.body)
		}
		if ans := loc.put(ctx, "x", seq, "real"); ans.status != http.StatusConflict {
			t.Fatalf("real holder after a forgery, local-only: %d %s", ans.status, ans.body)
		}
	})
}

// fenceOutcome is one incr a worker sent.
type fenceOutcome struct {
	worker int
	gen    uint64
	status int
	rej    kv.ErrorBody
	paused bool // the in-flight incr of a paused holder, retried on resume
	at     time.Time
}

// fenceWorker loops Acquire, GetSequencer, incr, Release on one lock.
type fenceWorker struct {
	id    int
	c     *fixtures.Cell
	t     *testing.T
	lock  string
	cut   *fixtures.Cutter
	cl    *client.Client
	h     *client.Handle
	pause chan chan fenceOutcome // a request to pause while holding the lock
	res   *fenceKV
	note  func(fenceOutcome)
	errs  map[string]int // error kinds seen, for the report
}

// dial gives the worker a new client (and a new Cutter). It runs on the
// worker's goroutine, so it reports failures with Errorf, not Fatal.
func (w *fenceWorker) dial(ctx context.Context) bool {
	w.cut = fixtures.NewCutter()
	cfg := w.c.ClientConfig()
	cfg.Dialer, cfg.ClientName = w.cut.Dial, fmt.Sprintf("worker-%d", w.id)
	w.h = nil
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, cfg)
	if err != nil {
		w.t.Errorf("worker %d: dial: %v", w.id, err)
		return false
	}
	w.cl = cl
	w.t.Cleanup(func() { cl.Close() })
	return true
}

func (w *fenceWorker) fail(what string, err error) {
	w.errs[what+": "+fenceErrKind(err)]++
	if errors.Is(err, client.ErrSessionExpired) {
		w.cl.Close()
		if !w.dial(context.Background()) {
			time.Sleep(time.Second)
		}
		return
	}
	if w.h != nil {
		w.h.Close() // releases the lock if we hold it, without lock-delay
		w.h = nil
	}
	time.Sleep(20 * time.Millisecond)
}

func fenceErrKind(err error) string {
	for _, k := range []error{context.DeadlineExceeded, context.Canceled, client.ErrNoMaster, client.ErrSessionExpired,
		client.ErrCanceled, client.ErrHandleInvalid, client.ErrNotHeld, client.ErrLockDelay} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return err.Error()
}

// run works until stop closes. ctx bounds the whole test.
func (w *fenceWorker) run(ctx context.Context, stop <-chan struct{}, key string) {
	const rw = client.Read | client.Write | client.Create
	for {
		select {
		case <-stop:
			return
		default:
		}
		if w.h == nil {
			h, err := w.cl.Open(ctx, w.lock, rw, client.WithLockDelay(500*time.Millisecond))
			if err != nil {
				w.fail("open", err)
				continue
			}
			w.h = h
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		go func() {
			select {
			case <-stop:
				cancel()
			case <-actx.Done():
			}
		}()
		err := w.h.Acquire(actx, client.Exclusive)
		cancel()
		if err != nil {
			w.fail("acquire", err)
			continue
		}
		seq, err := w.h.GetSequencer(ctx)
		if err != nil {
			w.fail("sequencer", err)
			continue
		}
		gen := fenceGen(w.t, seq)
		select {
		case done := <-w.pause:
			done <- w.pauseHolding(ctx, key, seq, gen)
			continue
		default:
		}
		ans := w.res.incr(ctx, key, seq)
		w.note(fenceOutcome{worker: w.id, gen: gen, status: ans.status, rej: ans.rej, at: time.Now()})
		if err := w.h.Release(ctx); err != nil {
			w.fail("release", err)
		}
	}
}

// pauseHolding is a pause of the holder between getting its sequencer and
// sending its incr: its links to the cell are cut for longer than its
// lease, so its session expires and the lock moves on. Once another
// holder's incr has been accepted, it resumes and sends its in-flight incr
// with its old sequencer; then, its client being dead, it dials a new one.
func (w *fenceWorker) pauseHolding(ctx context.Context, key string, seq []byte, gen uint64) fenceOutcome {
	w.cut.Cut()
	deadline := time.Now().Add(30 * time.Second)
	for {
		moved := false
		for _, e := range w.res.accepted(ctx, key) {
			moved = moved || e.Generation > gen
		}
		if moved {
			break
		}
		if time.Now().After(deadline) {
			w.t.Errorf("worker %d paused holding generation %d: no other holder wrote within 30 s", w.id, gen)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ans := w.res.incr(ctx, key, seq)
	o := fenceOutcome{worker: w.id, gen: gen, status: ans.status, rej: ans.rej, paused: true, at: time.Now()}
	w.note(o)
	w.cut.Heal() // the old session is over; let its Close tell it so
	w.cl.Close()
	w.dial(ctx)
	return o
}

// Six workers increment a counter at the kv server, each increment under
// the lock and its sequencer, while the master replica is stopped and
// restarted and two workers pause holding the lock (their sessions expire
// and they resume with their old sequencers). The counter equals the
// number of increments answered 200; the accepted generations never
// decrease; every 409 carried a generation older than one already
// accepted; and each paused holder's retried incr was fenced.
func TestCounterUnderFaultsNeverLosesUpdates(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 150*time.Second)
	const key, workers, work = "counter", 6, 12 * time.Second
	lock := c.Name("counter-lock")
	checker := c.Client(t)
	res := fenceStartKV(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell, Checker: checker})})

	var mu sync.Mutex
	var outcomes []fenceOutcome
	note := func(o fenceOutcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}
	var ws []*fenceWorker
	for i := range workers {
		w := &fenceWorker{id: i, c: c, t: t, lock: lock, pause: make(chan chan fenceOutcome, 1), res: res, note: note,
			errs: map[string]int{}}
		if !w.dial(ctx) {
			t.FailNow()
		}
		ws = append(ws, w)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, stop, key) }()
	}
	var stopped atomic.Bool
	halt := func() {
		if !stopped.Swap(true) {
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(halt) // on a Fatal, stop the workers before the cell goes

	start := time.Now()
	pauseWorker := func(w *fenceWorker) fenceOutcome {
		done := make(chan fenceOutcome, 1)
		w.pause <- done
		select {
		case o := <-done:
			return o
		case <-time.After(60 * time.Second):
			t.Fatalf("worker %d did not get to pause within 60 s", w.id)
		}
		return fenceOutcome{}
	}
	time.Sleep(1500 * time.Millisecond)
	p1 := pauseWorker(ws[1])
	t.Logf("%.1fs: worker 1 paused holding generation %d, resumed: %d %s", time.Since(start).Seconds(), p1.gen, p1.status, p1.rej.Error)
	// Stop the master replica. Its Close once hung for ever (see
	// fenceStopHangs, fixed in replica.Apply): a watchdog fails the test if
	// it comes back.
	old := c.WaitForMaster(30 * time.Second)
	closed := make(chan struct{})
	go func() { c.Stop(old); close(closed) }()
	stopHung := false
	select {
	case <-closed:
		t.Logf("%.1fs: master replica %d stopped", time.Since(start).Seconds(), old)
	case <-time.After(15 * time.Second):
		stopHung = true
		t.Logf("%.1fs: %s\nstuck goroutines:\n%s", time.Since(start).Seconds(), fenceStopHangs, fenceStacks("(*Replica).Apply"))
	}
	time.Sleep(2 * time.Second)
	c.Start(old)
	t.Logf("%.1fs: replica %d restarted; master is %d", time.Since(start).Seconds(), old, c.WaitForMaster(30*time.Second))
	time.Sleep(time.Second)
	p2 := pauseWorker(ws[4])
	t.Logf("%.1fs: worker 4 paused holding generation %d, resumed: %d %s", time.Since(start).Seconds(), p2.gen, p2.status, p2.rej.Error)
	if rest := work - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	halt()
	elapsed := time.Since(start)

	// The figures.
	mu.Lock()
	defer mu.Unlock()
	byStatus := map[int]int{}
	perWorker := make([]int, workers)
	var conflicts []fenceOutcome
	for _, o := range outcomes {
		byStatus[o.status]++
		if o.status == http.StatusOK {
			perWorker[o.worker]++
		}
		if o.status == http.StatusConflict {
			conflicts = append(conflicts, o)
		}
	}
	t.Logf("%.1fs of work: %d increments answered 200 (per worker %v), %d 409, other answers %v", elapsed.Seconds(),
		byStatus[200], perWorker, byStatus[409], byStatus)
	for _, w := range ws {
		if len(w.errs) > 0 {
			t.Logf("worker %d cell errors: %v", w.id, w.errs)
		}
	}
	for s, n := range byStatus {
		if s != http.StatusOK && s != http.StatusConflict && s != http.StatusServiceUnavailable {
			t.Errorf("%d answers with status %d", n, s)
		}
	}

	// No lost and no phantom update: the counter is the number of 200s.
	v, _ := res.value(ctx, key)
	if v != fmt.Sprint(byStatus[200]) {
		t.Fatalf("counter %q after %d increments answered 200", v, byStatus[200])
	}
	if byStatus[200] < 10 {
		t.Fatalf("only %d increments in %v: the run did not exercise anything", byStatus[200], elapsed)
	}
	// The accept log: one entry per 200, generations never decrease.
	log := res.accepted(ctx, key)
	if len(log) != byStatus[200] {
		t.Fatalf("accept log has %d entries for %d increments answered 200", len(log), byStatus[200])
	}
	accepted := map[uint64]bool{}
	for i, e := range log {
		if e.Op != "incr" || e.Lock != lock {
			t.Fatalf("accept log entry %+v", e)
		}
		if i > 0 && e.Generation < log[i-1].Generation {
			t.Fatalf("accepted generation %d after %d: %s", e.Generation, log[i-1].Generation, fenceLogString(log))
		}
		accepted[e.Generation] = true
	}
	// Every 409 carried a generation older than one already accepted (the
	// server names the highest it had accepted when it refused).
	for _, o := range conflicts {
		t.Logf("409: worker %d generation %d (paused holder: %v), highest accepted %d: %s", o.worker, o.gen, o.paused, o.rej.Highest, o.rej.Error)
		if o.rej.Reason != kv.ReasonStale || o.rej.Generation != o.gen || o.rej.Highest <= o.gen || !accepted[o.rej.Highest] {
			t.Errorf("409 of worker %d, generation %d, not below an accepted generation: %+v", o.worker, o.gen, o.rej)
		}
	}
	// Each paused holder's retried in-flight incr was fenced.
	for _, p := range []fenceOutcome{p1, p2} {
		if p.status != http.StatusConflict {
			t.Errorf("worker %d, paused holding generation %d, resumed and got %d: not fenced", p.worker, p.gen, p.status)
		}
	}
	if stopHung && !t.Failed() {
		t.Fatal("stopping the master hung: " + fenceStopHangs)
	}
}

// fenceStacks returns the stacks of the goroutines whose stack mentions
// frame.
func fenceStacks(frame string) string {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, frame) {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// fenceStopHangs describes a bug outside this file that the run above hits
// now and then (about 1 run in 8 on a loaded 2-core machine).
const fenceStopHangs = "stopping the master replica hung: cell.Server.Close waits in its client port's Wait " +
	"for a stream's goroutine stuck in replica.(*Replica).Apply: " +
	"Close closes the client connections first, which cancels the parked blocking Acquires, whose withdraw " +
	"applies CmdCancelWait while Raft shuts down; Apply " +
	"blocks on raft's ApplyFuture.Error() with no escape (its ctx is ignored once the entry is enqueued); " +
	"hashicorp/raft v1.8.0 never answers a future whose committed batch sat in the buffered fsmMutateCh " +
	"when Shutdown ran (runFSM returns on shutdownCh, fsm.go:260; hashicorp/raft#498). " +
	"Fix: in Replica.Apply wait for f.Error() in a goroutine and select on ctx.Done() and r.done too, " +
	"returning ErrUnknownOutcome/ErrClosed, as VerifyLeader already does"
