package cell_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/wire"
)

// keptCall runs one call on s, asking the replica to keep the stream when
// keep is set, and returns the reply's status.
func keptCall(t *testing.T, s *yamux.Stream, h wire.Header, req, resp any, keep bool) wire.Status {
	t.Helper()
	h.KeepStream = keep
	s.SetDeadline(time.Now().Add(hostileWait))
	defer s.SetDeadline(time.Time{})
	if err := wire.WriteMessage(s, &h, req); err != nil {
		t.Fatalf("%v: send: %v", h.Method, err)
	}
	var st wire.Status
	if err := wire.ReadMessage(s, &st); err != nil {
		t.Fatalf("%v: status: %v", h.Method, err)
	}
	body, err := wire.ReadFrame(s)
	if err != nil {
		t.Fatalf("%v: body: %v", h.Method, err)
	}
	if st.Code == wire.CodeOK && resp != nil {
		if err := wire.Decode(body, resp); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// streamEnds waits for the replica to end s: a read returns io.EOF.
func streamEnds(t *testing.T, s *yamux.Stream, within time.Duration) {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(within))
	var b [1]byte
	if n, err := s.Read(b[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("the replica did not end the stream: read %d bytes, %v", n, err)
	}
}

// A stream the client asks to keep carries one call after another:
// session calls, a KeepAlive that parks and is answered at its hold's
// end, a lock acquired and released; one not kept ends with its reply.
func TestKeptStreamCarriesCallAfterCall(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 2 * time.Second})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	_, epoch := srv.IsMaster()
	mux := hostileMux(t, srv.ClientAddr())
	s, err := mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var created wire.CreateSessionResponse
	if st := keptCall(t, s, wire.Header{Method: wire.MethodCreateSession, Epoch: epoch}, &wire.CreateSessionRequest{}, &created, true); st.Code != wire.CodeOK {
		t.Fatalf("create session: %+v", st)
	}
	session := wire.Header{Session: created.Session, Epoch: epoch}
	// A KeepAlive parks until a quarter of the lease is left.
	h := session
	h.Method = wire.MethodKeepAlive
	began := time.Now()
	if st := keptCall(t, s, h, &wire.KeepAliveRequest{}, nil, true); st.Code != wire.CodeOK {
		t.Fatalf("keepalive: %+v", st)
	}
	if held := time.Since(began); held < 500*time.Millisecond {
		t.Fatalf("the KeepAlive was answered after %v: it did not park", held)
	}
	seq := uint64(1)
	mutate := func(m wire.Method, req, resp any) wire.Status {
		h := session
		h.Method, h.Seq = m, seq
		seq++
		return keptCall(t, s, h, req, resp, true)
	}
	var opened wire.OpenResponse
	if st := mutate(wire.MethodOpen, &wire.OpenRequest{Path: c.Name("kept"), Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate}, &opened); st.Code != wire.CodeOK {
		t.Fatalf("open: %+v", st)
	}
	var acquired wire.AcquireResponse
	if st := mutate(wire.MethodAcquire, &wire.AcquireRequest{Handle: opened.Handle, Mode: wire.LockExclusive, Wait: true}, &acquired); st.Code != wire.CodeOK || acquired.LockGen == 0 {
		t.Fatalf("acquire: %+v %+v", st, acquired)
	}
	if st := mutate(wire.MethodRelease, &wire.HandleRequest{Handle: opened.Handle}, nil); st.Code != wire.CodeOK {
		t.Fatalf("release: %+v", st)
	}
	// The last call does not ask to keep the stream: the replica ends it.
	h = session
	h.Method = wire.MethodGetStat
	if st := keptCall(t, s, h, &wire.HandleRequest{Handle: opened.Handle}, nil, false); st.Code != wire.CodeOK {
		t.Fatalf("get stat: %+v", st)
	}
	streamEnds(t, s, hostileWait)
}

// A kept stream that waits longer than StreamIdleTimeout is closed by the
// replica, and counted; while it waits it counts against
// MaxStreamsPerConn like a call in flight, and its close frees the slot.
func TestKeptStreamsIdleOutAndCount(t *testing.T) {
	const idle = 300 * time.Millisecond
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: tlsLease,
		ConnLimits: cell.ConnLimits{MaxStreamsPerConn: 2, StreamIdleTimeout: idle}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	mux := hostileMux(t, srv.ClientAddr())
	var kept []*yamux.Stream
	for range 2 {
		s, err := mux.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if st := keptCall(t, s, wire.Header{Method: wire.MethodCellStatus}, &wire.CellStatusRequest{}, nil, true); st.Code != wire.CodeOK {
			t.Fatalf("status: %+v", st)
		}
		kept = append(kept, s)
	}
	// Two kept streams fill the connection's two slots.
	if code, err := statusCall(mux); err != nil || code != wire.CodeTooMany {
		t.Fatalf("a third stream beside two kept ones: %v %v, want %v", code, err, wire.CodeTooMany)
	}
	// Closing one frees its slot, once the replica has seen the close.
	kept[0].Close()
	deadline := time.Now().Add(hostileWait)
	for {
		code, err := statusCall(mux)
		if err != nil {
			t.Fatal(err)
		}
		if code == wire.CodeOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a kept stream's close: %v", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The other is closed by the replica once idle for StreamIdleTimeout.
	began := time.Now()
	streamEnds(t, kept[1], hostileWait)
	if waited := time.Since(began); waited > idle+2*time.Second {
		t.Fatalf("the idle stream was closed after %v, idle timeout %v", waited, idle)
	}
	if n := srv.ConnStats().IdleStreamsClosed; n != 1 {
		t.Fatalf("IdleStreamsClosed = %d, want 1", n)
	}
}

// A client keeps its streams between calls. When the replica has closed
// one for idleness, the next call on it is sent again on a new stream:
// it succeeds, on the same connection.
func TestClientResendsOnStreamClosedForIdleness(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: tlsLease,
		ConnLimits: cell.ConnLimits{StreamIdleTimeout: 100 * time.Millisecond}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	var dials atomic.Int32
	cfg := c.ClientConfig()
	cfg.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	cl := c.ClientWith(t, cfg)
	ctx := context.Background()
	h, err := cl.Open(ctx, c.Name("idle"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	dialled := dials.Load()
	for i := range 3 {
		closed := srv.ConnStats().IdleStreamsClosed
		deadline := time.Now().Add(hostileWait)
		for srv.ConnStats().IdleStreamsClosed == closed {
			if time.Now().After(deadline) {
				t.Fatal("the replica never closed the client's idle stream")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := h.SetContents(ctx, []byte{byte(i)}); err != nil {
			t.Fatalf("write %d on a stream the replica closed: %v", i, err)
		}
	}
	got, _, err := h.GetContentsAndStat(ctx)
	if err != nil || len(got) != 1 || got[0] != 2 {
		t.Fatalf("contents %v %v, want [2]", got, err)
	}
	if d := dials.Load(); d != dialled {
		t.Fatalf("the client dialled %d more times: a closed idle stream cost it its connection", d-dialled)
	}
}

// tlsMuxFrom opens a yamux session to addr over mutual TLS as user, from
// the local IP from.
func tlsMuxFrom(t *testing.T, certs *fixtures.CertSet, user, from, addr string) *yamux.Session {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := tls.DialWithDialer(d, "tcp", addr, certs.ClientTLS(t, user))
	if err != nil {
		t.Fatalf("dial %s as %s from %s: %v", addr, user, from, err)
	}
	if _, err := conn.Write([]byte{wire.RPCMultiplex}); err != nil {
		t.Fatal(err)
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.StreamOpenTimeout = 5 * time.Second
	sess, err := yamux.Client(conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// openKept opens a stream on sess and runs CellStatus on it asking the
// replica to keep it: the stream, kept if the answer is OK, and the code.
func openKept(sess *yamux.Session) (*yamux.Stream, wire.Code, error) {
	s, err := sess.OpenStream()
	if err != nil {
		return nil, 0, err
	}
	s.SetDeadline(time.Now().Add(hostileWait))
	defer s.SetDeadline(time.Time{})
	if err := wire.WriteMessage(s, &wire.Header{Method: wire.MethodCellStatus, KeepStream: true}, &wire.CellStatusRequest{}); err != nil {
		return nil, 0, err
	}
	var st wire.Status
	if err := wire.ReadMessage(s, &st); err != nil {
		return nil, 0, err
	}
	if _, err := wire.ReadFrame(s); err != nil {
		return nil, 0, err
	}
	return s, st.Code, nil
}

// keepManyStreams opens tries kept streams at once, spread over sessions, and
// returns those the replica kept; every other one must be refused with
// too many.
func keepManyStreams(t *testing.T, sessions []*yamux.Session, tries int) []*yamux.Stream {
	t.Helper()
	var mu sync.Mutex
	var kept []*yamux.Stream
	errs := make(chan error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, code, err := openKept(sessions[i%len(sessions)])
			switch {
			case err != nil:
				errs <- err
			case code == wire.CodeOK:
				mu.Lock()
				kept = append(kept, s)
				mu.Unlock()
			case code != wire.CodeTooMany:
				errs <- fmt.Errorf("a stream answered %v, want OK or too many", code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return kept
}

// Kept streams are counted at their address, their principal and the
// process, and each cap is exact under concurrency: streams racing past
// it are refused with too many at exactly the cap, counted by the cap
// that refused them, and the replica never holds more (so the memory they
// cost is bounded by the caps); a stream's close gives its place back.
func TestStreamCapsAreExactUnderConcurrency(t *testing.T) {
	const perIP, perPrincipal, total = 30, 50, 80
	certs := fixtures.TestCerts(t, "mallory", "trudy")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{
		MaxStreamsPerIP: perIP, MaxStreamsPerPrincipal: perPrincipal, MaxStreams: total, StreamIdleTimeout: 10 * time.Minute}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	addr := srv.ClientAddr()
	base := srv.ConnStats()
	mux := func(user, from string, n int) []*yamux.Session {
		var out []*yamux.Session
		for range n {
			out = append(out, tlsMuxFrom(t, certs, user, from, addr))
		}
		return out
	}
	waitKept := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(hostileWait)
		for {
			st := srv.ConnStats()
			if st.Streams == want && st.StreamsKept == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d streams open, %d kept; want %d of each", st.Streams, st.StreamsKept, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// One address, three connections: exactly its cap.
	if kept := keepManyStreams(t, mux("mallory", "127.0.0.2", 3), 2*perIP); len(kept) != perIP {
		t.Fatalf("%d kept streams from one address, the cap is %d", len(kept), perIP)
	}
	waitKept(perIP)
	if n := srv.ConnStats().StreamsRefusedIP - base.StreamsRefusedIP; n != perIP {
		t.Fatalf("%d streams refused at the address's cap, want %d", n, perIP)
	}
	// The same principal from another address: the principal's cap.
	if kept := keepManyStreams(t, mux("mallory", "127.0.0.3", 2), 2*perIP); len(kept) != perPrincipal-perIP {
		t.Fatalf("%d kept streams of the principal from a second address, want %d", len(kept), perPrincipal-perIP)
	}
	waitKept(perPrincipal)
	if n := srv.ConnStats().StreamsRefusedPrincipal - base.StreamsRefusedPrincipal; n != 2*perIP-(perPrincipal-perIP) {
		t.Fatalf("%d streams refused at the principal's cap, want %d", n, 2*perIP-(perPrincipal-perIP))
	}
	// Another principal from two more addresses: the process's cap.
	other := append(mux("trudy", "127.0.0.4", 2), mux("trudy", "127.0.0.5", 2)...)
	trudy := keepManyStreams(t, other, 2*perIP)
	if len(trudy) != total-perPrincipal {
		t.Fatalf("%d kept streams of a second principal, want %d (the process's cap)", len(trudy), total-perPrincipal)
	}
	waitKept(total)
	st := srv.ConnStats()
	refused := st.StreamsRefusedProcess - base.StreamsRefusedProcess + st.StreamsRefusedIP - base.StreamsRefusedIP - perIP
	if refused != uint64(2*perIP-(total-perPrincipal)) || st.StreamsRefusedProcess == base.StreamsRefusedProcess {
		t.Fatalf("%d streams refused at the process's (or an address's) cap, want %d: %+v", refused, 2*perIP-(total-perPrincipal), st)
	}
	if st.StreamsPeak != total {
		t.Fatalf("the replica held %d streams at once, the cap is %d", st.StreamsPeak, total)
	}
	// A stream's close frees its place, for anyone.
	trudy[0].Close()
	deadline := time.Now().Add(hostileWait)
	for {
		_, code, err := openKept(other[1])
		if err != nil {
			t.Fatal(err)
		}
		if code == wire.CodeOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a kept stream's close: %v", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Connections gone, nothing is counted.
	for _, s := range other {
		s.Close()
	}
	c.Close()
	if st := srv.ConnStats(); st.Streams != 0 || st.StreamsKept != 0 {
		t.Fatalf("after the cell closed: %d streams, %d kept", st.Streams, st.StreamsKept)
	}
}

// rawKeeper opens kept streams on a client-port connection with
// hand-written yamux frames, so that the client side holds nothing per
// stream: a stream's whole cost is the replica's. It answers the
// replica's pings and discards everything else it sends.
type rawKeeper struct {
	conn   net.Conn
	mu     sync.Mutex // one frame at a time
	nextID uint32
	done   chan struct{}
}

func newRawKeeper(t testing.TB, addr string) *rawKeeper {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte{wire.RPCMultiplex}); err != nil {
		t.Fatal(err)
	}
	k := &rawKeeper{conn: conn, nextID: 1, done: make(chan struct{})}
	go k.drain()
	t.Cleanup(func() {
		conn.Close()
		<-k.done
	})
	return k
}

// frame writes one yamux frame.
func (k *rawKeeper) frame(typ byte, flags uint16, id, length uint32, payload []byte) error {
	var h [12]byte
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:4], flags)
	binary.BigEndian.PutUint32(h[4:8], id)
	binary.BigEndian.PutUint32(h[8:12], length)
	k.mu.Lock()
	defer k.mu.Unlock()
	_, err := k.conn.Write(append(h[:], payload...))
	return err
}

// drain reads what the replica sends until the connection ends: pings are
// answered, the rest dropped.
func (k *rawKeeper) drain() {
	defer close(k.done)
	r := bufio.NewReader(k.conn)
	var h [12]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		typ, flags, length := h[1], binary.BigEndian.Uint16(h[2:4]), binary.BigEndian.Uint32(h[8:12])
		switch {
		case typ == 0: // data
			if _, err := r.Discard(int(length)); err != nil {
				return
			}
		case typ == 2 && flags&1 != 0: // ping: answer with its opaque value
			// Not under keep's lock: keep may be blocked writing
			// while the replica waits for the answer.
			go k.frame(2, 2, 0, length, nil)
		}
	}
}

// keep opens n streams, each carrying a CellStatus that asks the replica
// to keep it.
func (k *rawKeeper) keep(n int) error {
	var req bytes.Buffer
	if err := wire.WriteMessage(&req, &wire.Header{Method: wire.MethodCellStatus, KeepStream: true}, &wire.CellStatusRequest{}); err != nil {
		return err
	}
	for range n {
		id := k.nextID
		k.nextID += 2
		if err := k.frame(1, 1, id, 0, nil); err != nil { // window update, SYN: open
			return err
		}
		if err := k.frame(0, 0, id, uint32(req.Len()), req.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkKeptStreamMemory measures what a kept stream waiting for its
// next call costs the replica: the heap it holds (live after a
// collection) divided by the streams, reported as B/kept-stream. The
// client side is hand-written frames, so the whole figure is the
// replica's: yamux's stream (its channels, deadlines, header buffers,
// its session's map entry) and ours (the call's record, its byte
// account and idle timer).
func BenchmarkKeptStreamMemory(b *testing.B) {
	const perConn, conns = 8000, 4
	c := fixtures.NewCell(b, 1, fixtures.Options{LeaseTTL: 12 * time.Second, ConnLimits: cell.ConnLimits{
		MaxStreamsPerConn: perConn, MaxCallsPerSession: perConn, MaxStreamsPerIP: perConn * conns, MaxStreamsPerPrincipal: perConn * conns,
		MaxStreams: perConn * conns, StreamIdleTimeout: 10 * time.Minute}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	for b.Loop() {
		b.StopTimer()
		var keepers []*rawKeeper
		for range conns {
			keepers = append(keepers, newRawKeeper(b, srv.ClientAddr()))
		}
		before := liveHeap()
		open := srv.ConnStats().StreamsKept
		b.StartTimer()
		// In steps below yamux's accept backlog (1,024 streams waiting
		// to be accepted; it resets those beyond).
		want := open
		for _, k := range keepers {
			for step := 0; step < perConn; step += 500 {
				if err := k.keep(500); err != nil {
					b.Fatal(err)
				}
				want += 500
				deadline := time.Now().Add(time.Minute)
				for srv.ConnStats().StreamsKept < want {
					if time.Now().After(deadline) {
						b.Fatalf("%d streams kept of %d: %+v", srv.ConnStats().StreamsKept, want, srv.ConnStats())
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		b.StopTimer()
		after := liveHeap()
		b.ReportMetric(float64(after-before)/float64(perConn*conns), "B/kept-stream")
		for _, k := range keepers {
			k.conn.Close()
			<-k.done
		}
		deadline := time.Now().Add(time.Minute)
		for srv.ConnStats().Streams != 0 {
			if time.Now().After(deadline) {
				b.Fatalf("streams left open: %+v", srv.ConnStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
}

// liveHeap is the heap left live after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// The caps on streams kept idle for a next call hold exactly under
// concurrency at the address, the principal and the process: every call
// is answered, the replica keeps exactly what each cap leaves and closes
// the rest after their calls (counted). A client that does not close its
// side of the streams the replica closed has them counted as lingering,
// and once its address has as many lingering as it may keep, its new
// streams are refused.
func TestKeptStreamCapsCloseInsteadOfKeeping(t *testing.T) {
	// Bursts of 8: the streams a burst has ended linger until the test
	// closes them, and stay under an address's kept cap meanwhile.
	const perIP, perPrincipal, total, burst = 6, 10, 14, 8
	certs := fixtures.TestCerts(t, "mallory", "trudy", "oscar")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{
		MaxKeptStreamsPerIP: perIP, MaxKeptStreamsPerPrincipal: perPrincipal, MaxKeptStreams: total,
		StreamIdleTimeout: 10 * time.Minute}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	addr := srv.ClientAddr()
	base := srv.ConnStats()
	mux := func(user, from string, n int) []*yamux.Session {
		var out []*yamux.Session
		for range n {
			out = append(out, tlsMuxFrom(t, certs, user, from, addr))
		}
		return out
	}
	wait := func(kept int64, refused uint64) {
		t.Helper()
		deadline := time.Now().Add(hostileWait)
		for {
			st := srv.ConnStats()
			if st.StreamsKept == kept && st.KeptStreamsRefused-base.KeptStreamsRefused == refused {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d streams kept, %d closed over a cap; want %d and %d", st.StreamsKept,
					st.KeptStreamsRefused-base.KeptStreamsRefused, kept, refused)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	// ended reports whether the replica closed s: a read sees its end
	// rather than waiting.
	ended := func(s *yamux.Stream) bool {
		s.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		defer s.SetReadDeadline(time.Time{})
		_, err := s.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	// sort closes (our side too, as an honest client does) the streams
	// the replica ended, and returns how many and the ones it kept.
	sort := func(ss []*yamux.Stream) (kept []*yamux.Stream, gone int) {
		t.Helper()
		for _, s := range ss {
			if ended(s) {
				s.Close()
				gone++
			} else {
				kept = append(kept, s)
			}
		}
		return kept, gone
	}
	var kept []*yamux.Stream
	// Every call is answered (no too many: the stream caps are far off).
	for i, ph := range []struct {
		sessions []*yamux.Session
		kept     int64
	}{
		{mux("mallory", "127.0.0.2", 3), perIP},
		{mux("mallory", "127.0.0.3", 3), perPrincipal},
		{append(mux("trudy", "127.0.0.4", 2), mux("trudy", "127.0.0.5", 2)...), total},
	} {
		ss := keepManyStreams(t, ph.sessions, burst)
		if len(ss) != burst {
			t.Fatalf("phase %d: %d of %d calls answered OK", i, len(ss), burst)
		}
		wait(ph.kept, uint64((i+1)*burst)-uint64(ph.kept))
		k, gone := sort(ss)
		kept = append(kept, k...)
		if int64(len(kept)) != ph.kept || gone != burst-len(k) {
			t.Fatalf("phase %d: %d streams kept in all, %d of this burst ended; want %d kept", i, len(kept), gone, ph.kept)
		}
	}
	// The kept ones carry a next call.
	for _, s := range kept {
		s.SetDeadline(time.Now().Add(hostileWait))
		var st wire.Status
		err := wire.WriteMessage(s, &wire.Header{Method: wire.MethodCellStatus}, &wire.CellStatusRequest{})
		if err == nil {
			err = wire.ReadMessage(s, &st)
		}
		if err != nil || st.Code != wire.CodeOK {
			t.Fatalf("a kept stream's next call: %v %v", st.Code, err)
		}
		s.Close()
	}
	// A client that leaves the ended streams open: oscar's address keeps
	// perIP streams (the process's kept streams are free again), and each
	// stream after them is ended and lingers; with perIP lingering, its
	// next stream is refused too many, and closing them lets it open
	// streams again.
	lingerWait := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(hostileWait)
		for srv.ConnStats().StreamsLingering != want || srv.ConnStats().StreamsKept != perIP {
			if time.Now().After(deadline) {
				st := srv.ConnStats()
				t.Fatalf("%d streams lingering, %d kept; want %d and %d", st.StreamsLingering, st.StreamsKept, want, perIP)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	osc := mux("oscar", "127.0.0.6", 2)
	var mine, lingering []*yamux.Stream
	for range perIP {
		s, code, err := openKept(osc[0])
		if err != nil || code != wire.CodeOK {
			t.Fatalf("oscar's stream: %v %v", code, err)
		}
		mine = append(mine, s)
	}
	lingerWait(0)
	for i := range perIP {
		s, code, err := openKept(osc[1])
		if err != nil || code != wire.CodeOK {
			t.Fatalf("oscar's stream %d over the kept cap: %v %v", i, code, err)
		}
		lingering = append(lingering, s) // ended by the replica, not closed here
		lingerWait(int64(i + 1))
	}
	if _, code, err := openKept(osc[0]); err != nil || code != wire.CodeTooMany {
		t.Fatalf("a stream from an address with %d lingering: %v %v; want too many", perIP, code, err)
	}
	for _, s := range lingering {
		if !ended(s) {
			t.Fatal("a stream over the kept cap was not ended")
		}
		s.Close()
	}
	lingerWait(0)
	s2, code, err := openKept(osc[1])
	if err != nil || code != wire.CodeOK {
		t.Fatalf("oscar's address after closing its lingering streams: %v %v", code, err)
	}
	s2.Close()
	for _, s := range mine {
		s.Close()
	}
}
