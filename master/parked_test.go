package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"lockcell/wire"
)

// KeepAlives parked as data (parked.go), through keepAliveAsync as the
// transport calls it: each park ends, and is answered once, by its
// timer, an event, the stale signal, stop, or its connection's end.

// asyncResult collects the answer of one keepAliveAsync.
type asyncResult struct {
	ch    chan keepAliveResult
	calls int
	mu    sync.Mutex
}

func (r *asyncResult) done(resp *wire.KeepAliveResponse, err error) {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	r.ch <- keepAliveResult{resp, err}
}

// parkAsync runs one KeepAlive of session over conn and returns its
// answer's channel, checking it parked.
func parkAsync(t *testing.T, ss *sessions, session, conn, ack uint64) (*asyncResult, *parkedCall) {
	t.Helper()
	r := &asyncResult{ch: make(chan keepAliveResult, 2)}
	p := ss.keepAliveAsync(keepAliveArgs{session: session, epoch: testEpoch, clientEpoch: testEpoch, ack: ack,
		admit: func() error { return errors.New("no lease") }}, conn, r.done)
	if p == nil {
		t.Fatalf("the KeepAlive of session %d did not park: %+v", session, <-r.ch)
	}
	return r, p
}

// once waits for the answer and checks no second one follows.
func (r *asyncResult) once(t *testing.T) keepAliveResult {
	t.Helper()
	got := answered(t, r.ch)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls != 1 || len(r.ch) != 0 {
		t.Fatalf("answered %d times; want once", r.calls)
	}
	return got
}

func TestParkedKeepAliveIsAnsweredAtItsHoldDeadline(t *testing.T) {
	ss, clock, _ := newTestSessions(t)
	ss.created(1, 7)
	armed := clock.armed()
	r, _ := parkAsync(t, ss, 1, 7, 0)
	if n, conns := ss.parkedCount(); n != 1 || conns != 1 || clock.armed() != armed+1 {
		t.Fatalf("%d parked over %d connections, %d timers; want 1, 1 and one more timer", n, conns, clock.armed())
	}
	clock.Advance(testLease*3/4 - time.Millisecond)
	parked(t, r.ch)
	clock.Advance(time.Millisecond)
	got := r.once(t)
	if got.err != nil || got.resp.HeldMillis != (testLease*3/4).Milliseconds() || got.resp.LeaseMillis != testLease.Milliseconds() {
		t.Fatalf("answer %+v, %v; want held %v with a full lease", got.resp, got.err, testLease*3/4)
	}
	if n, conns := ss.parkedCount(); n != 0 || conns != 0 || clock.armed() != armed {
		t.Fatalf("after the answer: %d parked over %d connections, %d timers; want none left", n, conns, clock.armed())
	}
}

func TestParkedKeepAliveIsAnsweredAtOnceWhenAnEventIsQueued(t *testing.T) {
	ss, clock, _ := newTestSessions(t)
	ss.created(1, 7)
	armed := clock.armed()
	r, _ := parkAsync(t, ss, 1, 7, 0)
	// No time passes: the event alone ends the hold.
	ss.observe([]sessionEvent{{1, wire.Event{Kind: wire.EventContents, Path: "/ls/c/f", Handle: 7}}}, nil)
	got := r.once(t)
	if got.err != nil || got.resp.HeldMillis != 0 || len(got.resp.Events) != 1 || got.resp.Events[0].Path != "/ls/c/f" {
		t.Fatalf("answer %+v, %v; want the event at once", got.resp, got.err)
	}
	if n, _ := ss.parkedCount(); n != 0 || clock.armed() != armed {
		t.Fatalf("after the answer: %d parked, %d timers armed; want none left", n, clock.armed())
	}
	// Two calls of one session parked at once are both woken.
	r1, _ := parkAsync(t, ss, 1, 7, got.resp.Events[0].Seq)
	r2, _ := parkAsync(t, ss, 1, 8, got.resp.Events[0].Seq)
	if _, _, _, ok := ss.queueInvalidation(1, "/ls/c/g"); !ok {
		t.Fatal("no live lease to queue an invalidation on")
	}
	for _, r := range []*asyncResult{r1, r2} {
		if got := r.once(t); got.err != nil || len(got.resp.Events) != 1 || got.resp.Events[0].Kind != wire.EventInvalidate {
			t.Fatalf("answer %+v, %v; want the invalidation", got.resp, got.err)
		}
	}
}

// switchableStale is alwaysLeader with a stale signal the test closes and
// renews, as proveLoop does.
type switchableStale struct {
	alwaysLeader
	mu sync.Mutex
	ch chan struct{}
}

func (a *switchableStale) stale() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ch
}

func (a *switchableStale) set(stale bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stale {
		close(a.ch)
	} else {
		a.ch = make(chan struct{})
	}
}

func TestParkedKeepAliveIsAnsweredNotMasterWhenTheStaleSignalFires(t *testing.T) {
	clock := newFakeClock()
	auth := &switchableStale{alwaysLeader: alwaysLeader{clock}, ch: make(chan struct{})}
	ss := newSessions(clock, testLease, auth, &masterStats{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ss.start(testEpoch, nil)
	defer func() { ss.stop(); ss.wait() }()
	ss.created(1, 7)
	ss.created(2, 7)
	r1, _ := parkAsync(t, ss, 1, 7, 0)
	r2, _ := parkAsync(t, ss, 2, 7, 0)
	auth.set(true) // the clock does not move: only the signal ends the parks
	for _, r := range []*asyncResult{r1, r2} {
		if got := r.once(t); !errors.Is(got.err, errStopped) {
			t.Fatalf("parked KeepAlive at an unproven master: %+v, %v; want errStopped (NotMaster)", got.resp, got.err)
		}
	}
	// While unproven, a KeepAlive is refused on arrival.
	var refused error
	if p := ss.keepAliveAsync(keepAliveArgs{session: 1, epoch: testEpoch, clientEpoch: testEpoch},
		7, func(_ *wire.KeepAliveResponse, err error) { refused = err }); p != nil || !errors.Is(refused, errStopped) {
		t.Fatalf("KeepAlive at an unproven master: parked %v, %v; want errStopped at once", p != nil, refused)
	}
	// A proof came back: calls park again, and the next stale signal
	// ends them too.
	auth.set(false)
	r3, _ := parkAsync(t, ss, 1, 7, 0)
	parked(t, r3.ch)
	auth.set(true)
	if got := r3.once(t); !errors.Is(got.err, errStopped) {
		t.Fatalf("KeepAlive parked after the proof came back, at the next stale signal: %v; want errStopped", got.err)
	}
}

func TestParkedKeepAliveIsAnsweredNotMasterAtStop(t *testing.T) {
	ss, clock, _ := newTestSessions(t)
	ss.created(1, 7)
	armed := clock.armed()
	r, _ := parkAsync(t, ss, 1, 7, 0)
	ss.stop()
	if got := r.once(t); !errors.Is(got.err, errStopped) {
		t.Fatalf("parked KeepAlive at stop: %+v, %v; want errStopped (NotMaster)", got.resp, got.err)
	}
	ss.wait()
	if n, conns := ss.parkedCount(); n != 0 || conns != 0 || clock.armed() != armed {
		t.Fatalf("after stop: %d parked over %d connections, %d timers; want none left", n, conns, clock.armed())
	}
	// A call admitted in the term that ended is refused.
	var refused error
	if p := ss.keepAliveAsync(keepAliveArgs{session: 1, epoch: testEpoch, clientEpoch: testEpoch, prompt: true},
		7, func(_ *wire.KeepAliveResponse, err error) { refused = err }); p != nil || !errors.Is(refused, errStopped) {
		t.Fatalf("KeepAlive after stop: parked %v, %v; want errStopped", p != nil, refused)
	}
}

func TestParkedKeepAlivesEndWithTheirConnection(t *testing.T) {
	ss, clock, _ := newTestSessions(t)
	armed := clock.armed()
	var onConn7 []*asyncResult
	for id := uint64(1); id <= 5; id++ {
		ss.created(id, 0)
		r, _ := parkAsync(t, ss, id, 7, 0)
		onConn7 = append(onConn7, r)
	}
	ss.created(6, 0)
	other, _ := parkAsync(t, ss, 6, 8, 0)
	ss.connClosed(7)
	for _, r := range onConn7 {
		if got := r.once(t); !errors.Is(got.err, context.Canceled) {
			t.Fatalf("parked KeepAlive whose connection closed: %+v, %v; want canceled", got.resp, got.err)
		}
	}
	parked(t, other.ch)
	if n, conns := ss.parkedCount(); n != 1 || conns != 1 || clock.armed() != armed+1 {
		t.Fatalf("after the connection closed: %d parked over %d connections, %d timers; want the other connection's 1", n, conns, clock.armed())
	}
	// One call ended by its client (cancel) leaves the others of its
	// connection parked, and its answer is not given twice.
	ss.created(9, 0)
	r9, p9 := parkAsync(t, ss, 9, 8, 0)
	ss.cancelParked(p9, errClientLeft)
	if got := r9.once(t); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled KeepAlive: %v; want canceled", got.err)
	}
	ss.cancelParked(p9, errClientLeft)
	parked(t, other.ch)
	clock.Advance(testLease)
	if got := other.once(t); got.err != nil {
		t.Fatalf("the other connection's KeepAlive at its deadline: %v", got.err)
	}
	if n, conns := ss.parkedCount(); n != 0 || conns != 0 || clock.armed() != armed {
		t.Fatalf("at the end: %d parked over %d connections, %d timers; want none", n, conns, clock.armed())
	}
}
