package cell_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/fixtures"
	"lockcell/wire"
)

// A stream that delivers part of its request and then nothing is closed
// once RequestTimeout has passed (a slow-loris stream holds nothing for
// long), whether it stalls in the header or in the body; the connection
// and the server go on serving.
func TestStalledRequestIsClosedAfterRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{RequestTimeout: timeout}})
	addr := c.Addrs()[c.WaitForMaster(30*time.Second)]
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	mux, err := fixtures.NewWireMux(conn, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, &wire.Header{Method: wire.MethodCreateSession}); err != nil {
		t.Fatal(err)
	}
	header := buf.Bytes() // one frame: 4-byte length, then the header
	for name, partial := range map[string][]byte{
		"header": header[:len(header)-1],
		"body":   append(append([]byte{}, header...), 0, 0, 0, 100, 0x80), // a 100-byte body announced, one byte sent
	} {
		s, err := mux.S.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(partial); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		s.SetReadDeadline(start.Add(20 * time.Second)) // the test's bound, far above the server's
		_, err = s.Read(make([]byte, 1))
		took := time.Since(start)
		s.Close()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("stalled in the %s: read got %v after %v; want the server to close the stream (EOF)", name, err, took)
		}
		if took < timeout/2 {
			t.Fatalf("stalled in the %s: closed after %v, before the request timeout %v", name, took, timeout)
		}
	}
	// The same connection still serves calls.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp wire.CreateSessionResponse
	st, err := mux.Call(ctx, wire.Header{Method: wire.MethodCreateSession}, &wire.CreateSessionRequest{ClientName: "after"}, &resp)
	if err != nil || st.Code != wire.CodeOK {
		t.Fatalf("a call after the stalled streams: %v %+v", err, st)
	}
}
