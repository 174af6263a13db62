package cell_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/wire"
)

// Hostile clients on the client port: raw TCP and hand-built yamux
// streams. Every bad input must end in a typed error Status or a closed
// connection or stream, never a crash or a hang, and the cell must keep
// serving well-behaved clients.

const hostileWait = 15 * time.Second

func hostileDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	conn.SetDeadline(time.Now().Add(2 * hostileWait))
	t.Cleanup(func() { conn.Close() })
	return conn
}

// hostileExpectClosed reads until the peer closes: an EOF or a reset, never
// a timeout.
func hostileExpectClosed(t *testing.T, conn net.Conn, what string, within time.Duration) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	if hostileTimeout(err) {
		t.Fatalf("%s: the server kept the connection open for %v", what, within)
	}
}

func hostileTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func hostileMux(t *testing.T, addr string) *yamux.Session {
	t.Helper()
	conn := hostileDial(t, addr)
	if _, err := conn.Write([]byte{wire.RPCMultiplex}); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Time{})
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.ConnectionWriteTimeout = 5 * time.Second
	cfg.StreamOpenTimeout = 5 * time.Second
	sess, err := yamux.Client(conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// frame prefixes b with its length.
func frame(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func encodeFrames(t *testing.T, vals ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, vals...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostileCall writes raw bytes on a fresh stream (half-closing it when
// closeWrite) and returns the Status the server answered, or ok=false when
// it closed the stream without one.
func hostileCall(t *testing.T, sess *yamux.Session, raw []byte, closeWrite bool) (st wire.Status, ok bool) {
	t.Helper()
	s, err := sess.OpenStream()
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(hostileWait))
	if _, err := s.Write(raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	if closeWrite {
		s.Close() // yamux Close is a half-close: the read side stays open
	}
	err = wire.ReadMessage(s, &st)
	if hostileTimeout(err) || errors.Is(err, yamux.ErrTimeout) {
		t.Fatalf("no answer and no close within %v", hostileWait)
	}
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			t.Fatalf("the server's reply did not decode: %v", err)
		}
		return st, false
	}
	// The status is followed by its (empty) body frame.
	if _, err := wire.ReadFrame(s); err != nil {
		t.Fatalf("status %+v without a body: %v", st, err)
	}
	return st, true
}

func hostileWantCode(t *testing.T, what string, st wire.Status, ok bool, codes ...wire.Code) {
	t.Helper()
	if !ok {
		t.Fatalf("%s: stream closed without a status, want one of %v", what, codes)
	}
	for _, c := range codes {
		if st.Code == c {
			return
		}
	}
	t.Fatalf("%s: status %+v, want one of %v", what, st, codes)
}

// hostileBodyBombs are msgpack bombs that the decoder rejects cheaply (the
// ones it does not are in TestHostileAllocationBombs).
func hostileBodyBombs() map[string][]byte {
	return map[string][]byte{
		"array32":             {0xdd, 0xff, 0xff, 0xff, 0xff},
		"str32":               {0xdb, 0xff, 0xff, 0xff, 0xff},
		"map32":               {0xdf, 0xff, 0xff, 0xff, 0xff},
		"bin32":               {0xc6, 0xff, 0xff, 0xff, 0xff},
		"array16 chain":       bytes.Repeat([]byte{0xdc, 0xff, 0xff}, 500),
		"map16 chain":         bytes.Repeat([]byte{0xde, 0xff, 0xff}, 500),
		"map32 of array32":    {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'p', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"field array32":       {0x81, 0xa1, 'p', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"field map32":         {0x81, 0xa1, 'p', 0xdf, 0xff, 0xff, 0xff, 0xff},
		"unknown field chain": append([]byte{0x81, 0xa2, 'z', 'z'}, bytes.Repeat([]byte{0xdc, 0xff, 0xff}, 500)...),
		"nested fixarrays":    bytes.Repeat([]byte{0x91}, 20000),
		"never-used byte":     {0xc1},
		"empty":               {},
		// Every request type has one of these fields, with the wrong type.
		"wrong field types":    {0x85, 0xa1, 'h', 0xa1, 'x', 0xa1, 'a', 0xa1, 'x', 0xa1, 'p', 0x05, 0xa1, 'f', 0xa1, 'x', 0xa1, 'n', 0x05},
		"truncated str in map": {0x81, 0xa1, 'p', 0xa9, 'a'},
	}
}

func TestHostileClientPort(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	mi := c.WaitForMaster(30 * time.Second)
	master := c.Server(mi)
	addr := master.ClientAddr()
	_, epoch := master.IsMaster()
	runtime.GC()
	baseline := runtime.NumGoroutine()

	t.Run("wrong protocol byte", func(t *testing.T) {
		for _, first := range []byte{0, 'G', 0x16 /* TLS */, wire.RPCMultiplex + 1, 0xff} {
			conn := hostileDial(t, addr)
			conn.Write([]byte{first, 0, 0, 0, 0, 1, 2, 3})
			hostileExpectClosed(t, conn, fmt.Sprintf("first byte %#x", first), hostileWait)
		}
	})

	t.Run("silent client", func(t *testing.T) {
		// Never sends the protocol byte: dropped after the hello timeout.
		conn := hostileDial(t, addr)
		hostileExpectClosed(t, conn, "silent client", hostileWait)
	})

	t.Run("garbage after protocol byte", func(t *testing.T) {
		// yamux frame header: version, type, flags(2), stream id(4), length(4).
		for name, junk := range map[string][]byte{
			"http":                 []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
			"bad yamux type":       {0, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
			"bad version":          {7, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 1, 2, 3, 4},
			"SYN data over window": {0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
			"random":               bytes.Repeat([]byte{0xa5, 0x5a, 0x00, 0xff}, 64),
		} {
			conn := hostileDial(t, addr)
			conn.Write(append([]byte{wire.RPCMultiplex}, junk...))
			hostileExpectClosed(t, conn, name, hostileWait)
		}
		// Valid yamux that names no stream, or announces 4 GiB of data for
		// one it never opened: yamux drains it, and a peer that never
		// answers keep-alive pings is dropped (interval + write timeout).
		idle := map[string]net.Conn{}
		for name, junk := range map[string][]byte{
			"frame, no SYN":      {0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 1, 2, 3, 4},
			"4 GiB for no one":   {0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
			"nothing after byte": nil,
		} {
			conn := hostileDial(t, addr)
			conn.Write(append([]byte{wire.RPCMultiplex}, junk...))
			idle[name] = conn
		}
		for name, conn := range idle { // the waits overlap
			hostileExpectClosed(t, conn, name, 2*hostileWait)
		}
	})

	t.Run("yamux streams", func(t *testing.T) {
		sess := hostileMux(t, addr)
		good := func() {
			t.Helper()
			st, ok := hostileCall(t, sess, encodeFrames(t, &wire.Header{Method: wire.MethodCellStatus}, &wire.CellStatusRequest{}), false)
			hostileWantCode(t, "cell status on the same session", st, ok, wire.CodeOK)
		}
		good()

		// Frame headers claiming more than the limit, up to 4 GiB.
		for _, n := range []uint32{wire.MaxFrameSize + 1, 1<<31 - 1, 1<<32 - 1} {
			raw := binary.BigEndian.AppendUint32(nil, n)
			st, ok := hostileCall(t, sess, append(raw, 0x80), false)
			hostileWantCode(t, fmt.Sprintf("header frame of %d bytes", n), st, ok, wire.CodeTooLarge)
			// The same as the body's frame, behind a valid header.
			raw = append(encodeFrames(t, &wire.Header{Method: wire.MethodOpen, Epoch: epoch, Seq: 1}), raw...)
			st, ok = hostileCall(t, sess, raw, false)
			hostileWantCode(t, fmt.Sprintf("body frame of %d bytes", n), st, ok, wire.CodeTooLarge)
		}

		// Bombs as the Header.
		for name, bomb := range hostileBodyBombs() {
			raw := append(frame(bomb), frame([]byte{0x80})...)
			st, ok := hostileCall(t, sess, raw, false)
			hostileWantCode(t, "header "+name, st, ok, wire.CodeBadRequest)
		}

		// Valid headers of unknown methods.
		for _, m := range []wire.Method{0, 99, 200, 255} {
			st, ok := hostileCall(t, sess, encodeFrames(t, &wire.Header{Method: m, Epoch: epoch, Seq: 1}, &wire.Empty{}), false)
			hostileWantCode(t, fmt.Sprintf("method %d", m), st, ok, wire.CodeBadRequest)
		}
		// An unknown method with the wrong epoch is refused on the epoch.
		st, ok := hostileCall(t, sess, encodeFrames(t, &wire.Header{Method: 200, Epoch: epoch + 100}, &wire.Empty{}), false)
		hostileWantCode(t, "method 200, wrong epoch", st, ok, wire.CodeBadEpoch)
		if st.Epoch != epoch {
			t.Fatalf("bad-epoch status names epoch %d, want %d", st.Epoch, epoch)
		}

		// Valid headers followed by bomb bodies, for every method that
		// decodes a body (the body is decoded before the session is looked
		// up).
		for _, m := range []wire.Method{wire.MethodCreateSession, wire.MethodKeepAlive, wire.MethodOpen, wire.MethodSetContents,
			wire.MethodAcquire, wire.MethodCancelAcquire, wire.MethodClose, wire.MethodGetStat, wire.MethodDelete, wire.MethodRelease} {
			for name, bomb := range hostileBodyBombs() {
				h := &wire.Header{Method: m, Epoch: epoch, Seq: 1, Session: 1}
				raw := append(encodeFrames(t, h), frame(bomb)...)
				st, ok := hostileCall(t, sess, raw, false)
				hostileWantCode(t, fmt.Sprintf("%s with body %s", m, name), st, ok, wire.CodeBadRequest)
			}
		}

		// Truncated requests, then close: no answer is owed, but the
		// stream must end.
		hdr := encodeFrames(t, &wire.Header{Method: wire.MethodOpen, Epoch: epoch, Seq: 1})
		body := encodeFrames(t, &wire.OpenRequest{Path: c.Name("x"), Flags: wire.OpenRead})
		for name, raw := range map[string][]byte{
			"nothing":               nil,
			"half a length":         {0, 0},
			"truncated header":      hdr[:len(hdr)-1],
			"header only":           hdr,
			"header, half a length": append(append([]byte(nil), hdr...), 0, 0),
			"truncated body":        append(append([]byte(nil), hdr...), body[:len(body)-2]...),
			"body claims more":      append(append([]byte(nil), hdr...), 0, 0, 1, 0, 0x80),
		} {
			st, ok := hostileCall(t, sess, raw, true)
			if ok {
				t.Fatalf("%s: answered %+v to a truncated request", name, st)
			}
		}

		// A stream reset mid-request.
		s, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		s.Write(hdr[:3])
		s.Close()

		// Many streams that stall mid-request do not stop other calls.
		var stalled []net.Conn
		for range 50 {
			s, err := sess.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			s.Write([]byte{0, 0, 0, 9, 0x85})
			stalled = append(stalled, s)
		}
		good()
		for _, s := range stalled {
			s.Close()
		}
		// After everything, the same session still works.
		good()
	})

	t.Run("a client still works", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		cl := c.Client(t)
		h, err := cl.Open(ctx, c.Name("after-hostile"), client.Read|client.Write|client.Create, client.WithContents([]byte("still here")))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, []byte("written")); err != nil {
			t.Fatal(err)
		}
		data, _, err := h.GetContentsAndStat(ctx)
		if err != nil || string(data) != "written" {
			t.Fatalf("read back %q %v", data, err)
		}
		if ok, e := master.IsMaster(); !ok || e != epoch {
			t.Fatalf("master changed: serving %v epoch %d (was %d)", ok, e, epoch)
		}
		h.Close()
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	})

	// The server let go of everything the hostile clients opened.
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= baseline+50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the hostile clients", n, baseline)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A few bytes must not make the master allocate gigabytes: an 8-byte body
// claiming 4 GiB of contents, and a Header claiming a 4 GiB unknown field
// (msgpack v5.4.1 grows its pooled buffer on each; wire.Decode bounds every
// length by the frame first).
func TestHostileAllocationBombs(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	master := c.Server(c.WaitForMaster(30 * time.Second))
	_, epoch := master.IsMaster()
	sess := hostileMux(t, master.ClientAddr())
	measure := func(what string, raw []byte, times int) {
		t.Helper()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		for range times {
			st, ok := hostileCall(t, sess, raw, false)
			hostileWantCode(t, what, st, ok, wire.CodeBadRequest)
		}
		runtime.ReadMemStats(&b)
		if d := b.TotalAlloc - a.TotalAlloc; d > uint64(times)*(64<<20) {
			t.Errorf("%s x%d: the process allocated %d MiB", what, times, d>>20)
		}
	}
	hdr := encodeFrames(t, &wire.Header{Method: wire.MethodOpen, Epoch: epoch, Seq: 1})
	measure("open with a 4 GiB contents claim", append(hdr, frame([]byte{0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff})...), 1)
	measure("header with a 4 GiB unknown field", append(frame([]byte{0x81, 0xa1, 'z', 0xdb, 0xff, 0xff, 0xff, 0xff}), frame([]byte{0x80})...), 30)
}

// hostileSession creates a session over sess with raw frames and returns
// its id.
func hostileSession(t *testing.T, sess *yamux.Session, epoch uint64) uint64 {
	t.Helper()
	s, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(hostileWait))
	if _, err := s.Write(encodeFrames(t, &wire.Header{Method: wire.MethodCreateSession, Epoch: epoch, Seq: 1}, &wire.CreateSessionRequest{})); err != nil {
		t.Fatal(err)
	}
	var st wire.Status
	var resp wire.CreateSessionResponse
	if err := wire.ReadMessage(s, &st); err != nil || st.Code != wire.CodeOK {
		t.Fatalf("create session: %+v %v", st, err)
	}
	if err := wire.ReadMessage(s, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Session
}

// Bytes a client sends after a parked call's request cancel the call and
// stay counted against the connection's budget for as long as the stream
// holds them, not only while a handler runs: streams cannot park them
// unaccounted. Closing the streams releases them; a connection that keeps
// piling them up is cut.
func TestHostileTrailingBytesOnParkedCalls(t *testing.T) {
	const budget = 4 << 20
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 12 * time.Second, ConnLimits: cell.ConnLimits{MaxConnBuffer: budget}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	_, epoch := srv.IsMaster()
	sess := hostileMux(t, srv.ClientAddr())
	id := hostileSession(t, sess, epoch)
	const trailing = 100 << 10
	parked := func(n int) []*yamux.Stream {
		raw := append(encodeFrames(t, &wire.Header{Method: wire.MethodKeepAlive, Session: id, Epoch: epoch}, &wire.KeepAliveRequest{}),
			make([]byte, trailing)...)
		var out []*yamux.Stream
		for range n {
			s, err := sess.OpenStream()
			if err != nil {
				return out // cut
			}
			s.SetWriteDeadline(time.Now().Add(hostileWait))
			if _, err := s.Write(raw); err != nil {
				return out
			}
			out = append(out, s)
		}
		return out
	}
	// Ten parked KeepAlives with 100 KiB after each: the calls end, the
	// bytes stay counted while the streams hold them (but the one byte
	// each call's watcher read).
	streams := parked(10)
	deadline := time.Now().Add(hostileWait)
	for srv.ConnStats().RequestBytes < 10*(trailing-1) {
		if time.Now().After(deadline) {
			t.Fatalf("bytes after parked requests are not counted: %+v", srv.ConnStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range streams {
		s.Close()
	}
	deadline = time.Now().Add(hostileWait)
	for srv.ConnStats().RequestBytes != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("closing the streams did not release their bytes: %+v", srv.ConnStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A hundred more, never closed: 10 MiB for a 4 MiB budget.
	parked(100)
	select {
	case <-sess.CloseChan():
	case <-time.After(2 * hostileWait):
		t.Fatalf("a connection piling up bytes after its requests was not cut: %+v", srv.ConnStats())
	}
	if st := srv.ConnStats(); st.OverBudgetConn == 0 || st.RequestBytesPeak > budget+64<<10 {
		t.Fatalf("after the cut: %+v (budget %d)", st, budget)
	}
}
