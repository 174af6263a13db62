package cell_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/cell/wire"
	"lockcell/client"
	"lockcell/fixtures"
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
