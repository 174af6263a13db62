package clientport_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell/clientport"
	"lockcell/wire"
)

// handler is a Handler that answers every call with the caller it saw,
// parks KeepAlives until the test answers them, and records the
// connections it was told closed.
type handler struct {
	mu     sync.Mutex
	parked []func(any, uint64, error)
	closed map[uint64]bool
	seen   []clientport.Caller
	parkCh chan struct{}
}

func (h *handler) Call(ctx context.Context, c clientport.Caller, hd *wire.Header, body []byte) (any, uint64, error) {
	h.mu.Lock()
	h.seen = append(h.seen, c)
	h.mu.Unlock()
	if hd.Method == wire.MethodOpen {
		return nil, 0, wire.Errorf(wire.CodeNotMaster, "not master")
	}
	return &wire.KeepAliveResponse{}, 7, nil
}

func (h *handler) KeepAlive(c clientport.Caller, hd *wire.Header, body []byte, done func(any, uint64, error)) func() {
	h.mu.Lock()
	h.parked = append(h.parked, done)
	h.mu.Unlock()
	h.parkCh <- struct{}{}
	return func() { done(nil, 0, wire.Errorf(wire.CodeUnavailable, "left")) }
}

func (h *handler) ConnClosed(conn uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed[conn] = true
}

func (h *handler) NotMaster(st *wire.Status) { st.Leader = "10.0.0.9:7000" }

// dial opens a client connection to the port the way the client library
// does: the protocol byte, then yamux.
func dial(t *testing.T, addr string) *yamux.Session {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{wire.RPCMultiplex}); err != nil {
		t.Fatal(err)
	}
	s, err := yamux.Client(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// call sends one request on a new stream and reads its status and body.
func call(t *testing.T, s *yamux.Session, h wire.Header) (wire.Status, []byte) {
	t.Helper()
	st, err := s.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(10 * time.Second))
	if err := wire.WriteMessage(st, &h, &wire.Empty{}); err != nil {
		t.Fatal(err)
	}
	var status wire.Status
	if err := wire.ReadMessage(st, &status); err != nil {
		t.Fatal(err)
	}
	body, err := wire.ReadFrame(st)
	if err != nil {
		t.Fatal(err)
	}
	return status, body
}

// The port is transport only: every call reaches the Handler with the
// anonymous principal and its connection's id, the Handler's answer and
// epoch reach the client, a NotMaster is completed by the Handler, a
// parked KeepAlive holds no reply until the Handler answers it, and the
// end of a connection is reported to the Handler; Close and Wait end
// everything the port started.
func TestPortServesAHandler(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{closed: map[uint64]bool{}, parkCh: make(chan struct{}, 1)}
	var observed sync.WaitGroup
	observed.Add(3)
	p := clientport.New(ln, clientport.Config{Anonymous: "anon",
		Observe: func(wire.Method, wire.Code, time.Duration) { observed.Done() }}, h)
	p.Serve()
	t.Cleanup(func() { p.Close(); p.Wait() })

	s := dial(t, p.Addr().String())
	st, _ := call(t, s, wire.Header{Method: wire.MethodCellStatus})
	if st.Code != wire.CodeOK || st.Epoch != 7 {
		t.Fatalf("call status %+v; want OK at epoch 7", st)
	}
	st, _ = call(t, s, wire.Header{Method: wire.MethodOpen})
	if st.Code != wire.CodeNotMaster || st.Leader != "10.0.0.9:7000" {
		t.Fatalf("NotMaster status %+v; want the Handler's leader", st)
	}
	h.mu.Lock()
	if len(h.seen) != 2 || h.seen[0].Principal != "anon" || h.seen[0].Conn == 0 || h.seen[1].Conn != h.seen[0].Conn {
		t.Fatalf("callers seen %+v; want the anonymous principal on one connection", h.seen)
	}
	conn := h.seen[0].Conn
	h.mu.Unlock()

	// A KeepAlive parks in the Handler with no reply until answered.
	got := make(chan wire.Status, 1)
	go func() {
		st, _ := call(t, s, wire.Header{Method: wire.MethodKeepAlive, Session: 1})
		got <- st
	}()
	<-h.parkCh
	select {
	case st := <-got:
		t.Fatalf("a parked KeepAlive was answered before its Handler did: %+v", st)
	case <-time.After(100 * time.Millisecond):
	}
	h.mu.Lock()
	done := h.parked[0]
	h.mu.Unlock()
	done(&wire.KeepAliveResponse{}, 9, nil)
	if st := <-got; st.Code != wire.CodeOK || st.Epoch != 9 {
		t.Fatalf("KeepAlive status %+v; want OK at epoch 9", st)
	}
	observed.Wait() // every call was observed

	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		ok := h.closed[conn]
		h.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Handler was never told the connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.Stats().Conns; n != 0 {
		// The connection's place is given back when its goroutine ends,
		// just after ConnClosed.
		for time.Now().Before(deadline) && p.Stats().Conns != 0 {
			time.Sleep(10 * time.Millisecond)
		}
		if n := p.Stats().Conns; n != 0 {
			t.Fatalf("%d connections held after the only one closed", n)
		}
	}
	p.Close()
	p.Wait()
	if c, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
		// Only a listener bound since (another test's) would accept.
		c.Close()
		t.Logf("a dial after Close connected: %s was bound again", p.Addr())
	}
}
