package cell_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/wire"
)

// rawSession is a session spoken over the raw wire, so a test can break
// the protocol's rules the client library keeps (here: never acknowledge
// an event).
type rawSession struct {
	t       *testing.T
	mux     *fixtures.WireMux
	session uint64
	epoch   uint64
	seq     uint64
}

// dialRawMux connects to addr (with TLS when cfg is set) and speaks the
// multiplexed wire protocol; the connection closes when the test ends.
func dialRawMux(t *testing.T, addr string, cfg *tls.Config) *fixtures.WireMux {
	t.Helper()
	var conn net.Conn
	var err error
	if cfg != nil {
		conn, err = tls.Dial("tcp", addr, cfg)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	mux, err := fixtures.NewWireMux(conn, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mux.Close)
	return mux
}

// dialRawSession creates a session over a new raw connection to addr.
func dialRawSession(t *testing.T, ctx context.Context, addr string, cfg *tls.Config) *rawSession {
	t.Helper()
	return newRawSession(t, ctx, dialRawMux(t, addr, cfg))
}

// newRawSession creates a session over mux.
func newRawSession(t *testing.T, ctx context.Context, mux *fixtures.WireMux) *rawSession {
	t.Helper()
	r := &rawSession{t: t, mux: mux}
	var resp wire.CreateSessionResponse
	if st := r.call(ctx, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "raw"}, &resp); st.Code != wire.CodeOK {
		t.Fatalf("create session: %+v", st)
	}
	r.session, r.epoch = resp.Session, resp.Epoch
	return r
}

// heard sends one prompt KeepAlive, acknowledging nothing, so that the
// master has heard from the session: it registers no cacher before.
func (r *rawSession) heard(ctx context.Context) {
	r.t.Helper()
	if st := r.call(ctx, wire.MethodKeepAlive, &wire.KeepAliveRequest{Prompt: true}, &wire.KeepAliveResponse{}); st.Code != wire.CodeOK {
		r.t.Fatalf("KeepAlive: %+v", st)
	}
}

// call runs one call and returns its status (the response is decoded
// into resp when the call succeeded).
func (r *rawSession) call(ctx context.Context, m wire.Method, req, resp any) wire.Status {
	st, err := r.try(ctx, m, req, resp)
	if err != nil {
		r.t.Fatalf("%s: %v", m, err)
	}
	return st
}

// try is call that returns a failed call's error instead of failing the
// test; a mutating call takes the session's next request id.
func (r *rawSession) try(ctx context.Context, m wire.Method, req, resp any) (wire.Status, error) {
	h := wire.Header{Method: m, Session: r.session, Epoch: r.epoch}
	if m.Mutating() {
		r.seq++
		h.Seq = r.seq
	}
	return r.mux.Call(ctx, h, req, resp)
}

// A session that caches a file and keeps its lease alive with KeepAlives
// that never acknowledge the invalidation holds a write of that file for
// at most the lease it had when the invalidation was sent; then it and its
// principal may cache nothing more, so the next writes do not wait for it,
// and an honest cacher of the same file stays consistent throughout.
func TestNonAckingCacherHoldsAWriteAtMostOneLease(t *testing.T) {
	const lease = 2 * time.Second
	set := fixtures.TestCerts(t, "bob", "mallory")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: lease})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	name := c.Name("f")

	writer := c.Client(t) // the admin
	hw := mustOpen(t, ctx, writer, name, client.Read|client.Write|client.Create, client.WithContents([]byte("v0")))

	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	hb := mustOpen(t, ctx, bob, name, client.Read)
	bobReads := func(want string) func() error {
		return func() error {
			data, _, err := hb.GetContentsAndStat(ctx)
			if err == nil && string(data) != want {
				err = fmt.Errorf("bob read %q, want %q", data, want)
			}
			return err
		}
	}
	expectMiss(t, bob, "bob's first read", bobReads("v0"))
	expectHit(t, bob, "bob's second read", bobReads("v0"))

	// mallory caches the file, then keeps her session alive without ever
	// acknowledging anything.
	mal := dialRawSession(t, ctx, c.Addrs()[m], set.ClientTLS(t, "mallory"))
	mal.heard(ctx)
	var open wire.OpenResponse
	if st := mal.call(ctx, wire.MethodOpen, &wire.OpenRequest{Path: name, Flags: wire.OpenRead, Cache: true}, &open); st.Code != wire.CodeOK {
		t.Fatalf("mallory's open: %+v", st)
	}
	cachedRead := func(r *rawSession, handle uint64) bool {
		var resp wire.ContentsResponse
		if st := r.call(ctx, wire.MethodGetContentsAndStat, &wire.HandleRequest{Handle: handle, Cache: true}, &resp); st.Code != wire.CodeOK {
			t.Fatalf("mallory's read: %+v", st)
		}
		return resp.Cacheable
	}
	if !cachedRead(mal, open.Handle) {
		t.Fatal("mallory's first read was not cacheable: the test exercises nothing")
	}
	var replies atomic.Int64
	kaCtx, stopKA := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for kaCtx.Err() == nil {
			var resp wire.KeepAliveResponse
			st, err := mal.try(kaCtx, wire.MethodKeepAlive, &wire.KeepAliveRequest{AckEvent: 0}, &resp)
			if err != nil || st.Code != wire.CodeOK {
				return
			}
			replies.Add(1)
		}
	}()
	defer func() {
		stopKA()
		mal.mux.Close()
		wg.Wait()
	}()

	// The first write waits for mallory at most her lease.
	start := time.Now()
	if err := hw.SetContents(ctx, []byte("v1")); err != nil {
		t.Fatalf("write v1: %v", err)
	}
	if took := time.Since(start); took > lease+time.Second {
		t.Fatalf("a write waited %v for a cacher that never acknowledges; its lease is %v", took, lease)
	} else {
		t.Logf("the first write waited %v for mallory (lease %v)", took.Round(time.Millisecond), lease)
	}
	if err := bobReads("v1")(); err != nil {
		t.Fatalf("honest cacher after the write: %v", err)
	}
	expectHit(t, bob, "bob's read after the write", bobReads("v1"))

	// mallory's session, and any new session of hers, may cache nothing:
	// her reads are answered uncacheable, so no later write waits for her.
	if cachedRead(mal, open.Handle) {
		t.Fatal("a session with an unacknowledged invalidation was registered as a cacher again")
	}
	fresh := dialRawSession(t, ctx, c.Addrs()[m], set.ClientTLS(t, "mallory"))
	fresh.heard(ctx) // so only the bar can make its reads uncacheable
	var open2 wire.OpenResponse
	if st := fresh.call(ctx, wire.MethodOpen, &wire.OpenRequest{Path: name, Flags: wire.OpenRead, Cache: true}, &open2); st.Code != wire.CodeOK {
		t.Fatalf("mallory's second session's open: %+v", st)
	}
	if open2.Cacheable || cachedRead(fresh, open2.Handle) {
		t.Fatal("a new session of a principal that ignored an invalidation was allowed to cache")
	}
	// The next writes and a TryAcquire go through without waiting a lease.
	start = time.Now()
	for i := 2; i <= 4; i++ {
		if err := hw.SetContents(ctx, []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatalf("write v%d: %v", i, err)
		}
		if err := bobReads(fmt.Sprintf("v%d", i))(); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := hw.TryAcquire(ctx, client.Exclusive); err != nil || !ok {
		t.Fatalf("TryAcquire: %v %v", ok, err)
	}
	if took := time.Since(start); took > lease/2 {
		t.Fatalf("three writes and an acquire took %v after mallory was barred (lease %v)", took, lease)
	}
	if err := hw.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Ignoring events does not buy a KeepAlive answered in a loop: the
	// master sends them again at once once, then parks the call as usual.
	before := replies.Load()
	time.Sleep(lease) // a window to count replies in, not synchronisation
	if n := replies.Load() - before; n > 10 {
		t.Fatalf("mallory's KeepAlives were answered %d times in one lease: a busy loop", n)
	}
	if st := c.Server(m).Master().InvalidationStats(); st.Late == 0 {
		t.Fatalf("no invalidation was counted late: %+v", st)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test context ran out")
	}
}
