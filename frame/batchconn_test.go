package frame

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// A Write of a whole frame must leave it to the writing goroutine and
// return; these tests bound every wait with a deadline instead of hanging.
const batchTestWait = 30 * time.Second

// tcpPair is a connected pair of real loopback TCP connections.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// selfSigned is a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "batchconn test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// tlsOver runs a TLS 1.3 handshake over a TCP pair and returns both ends.
func tlsOver(t testing.TB, client, server net.Conn) (net.Conn, net.Conn) {
	t.Helper()
	cert, pool := selfSigned(t)
	sc := tls.Server(server, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	cc := tls.Client(client, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	ctx, cancel := context.WithTimeout(context.Background(), batchTestWait)
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- sc.HandshakeContext(ctx) }()
	if err := cc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); sc.Close() })
	return cc, sc
}

func quietMux() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.LogOutput = io.Discard
	return c
}

// echoMux serves yamux on conn: every stream gets back what it sent, and
// is closed after the client closed its side. It returns when the
// session ends; t's cleanup closes it and waits.
func echoMux(t testing.TB, conn net.Conn) {
	t.Helper()
	sess, err := yamux.Server(conn, quietMux())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				io.Copy(st, st)
			}()
		}
	}()
	t.Cleanup(func() { sess.Close(); wg.Wait() })
}

// echoCall sends msg on a new stream, closes its side and reads the echo.
func echoCall(sess *yamux.Session, msg []byte) error {
	st, err := sess.OpenStream()
	if err != nil {
		return err
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(batchTestWait))
	errs := make(chan error, 1)
	go func() {
		// Written beside the read: a message beyond the stream's window
		// goes out only as the echo is read.
		_, err := st.Write(msg)
		if err == nil {
			err = st.Close()
		}
		errs <- err
	}()
	got, rerr := io.ReadAll(st)
	if err := <-errs; err != nil {
		return fmt.Errorf("write %d bytes: %w", len(msg), err)
	}
	if rerr != nil {
		return fmt.Errorf("read the echo of %d bytes: %w", len(msg), rerr)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("sent %d bytes, got back %d, not the same", len(msg), len(got))
	}
	return nil
}

// randomMessage is mostly small (calls), sometimes larger than a stream's
// window and than the BatchConn's buffer.
func randomMessage(r *mrand.Rand) []byte {
	var n int
	switch r.IntN(10) {
	case 0:
		n = 64<<10 + r.IntN(300<<10)
	case 1, 2:
		n = r.IntN(16 << 10)
	default:
		n = r.IntN(512)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Many concurrent streams exchanging messages of random sizes through
// BatchConns on both ends of real TCP (and TLS) connections get every
// byte back, in order.
func TestBatchConnCarriesConcurrentStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
		max  int
	}{
		{"tcp", false, BatchConnBuffer},
		{"tls", true, BatchConnBuffer},
		// Frames larger than the buffer, and writers waiting for room.
		{"tcp, 1 KiB buffer", false, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := tcpPair(t)
			if tc.tls {
				cc, sc = tlsOver(t, cc, sc)
			}
			cb, sb := newBatchConn(cc, tc.max), newBatchConn(sc, tc.max)
			echoMux(t, sb)
			sess, err := yamux.Client(cb, quietMux())
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			const callers, calls = 16, 8
			errs := make(chan error, callers)
			for g := range callers {
				go func() {
					r := mrand.New(mrand.NewPCG(seed, uint64(g)))
					for range calls {
						if err := echoCall(sess, randomMessage(r)); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for range callers {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// countingConn records every write made to a real connection: its length
// and, when keep is set, its bytes.
type countingConn struct {
	net.Conn
	keep bool
	mu   sync.Mutex
	lens []int
	data []byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.lens = append(c.lens, len(p))
	if c.keep {
		c.data = append(c.data, p...)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// take returns what was recorded and starts afresh.
func (c *countingConn) take() (lens []int, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lens, data = c.lens, c.data
	c.lens, c.data = nil, nil
	return lens, data
}

// frameStats parses a recorded yamux byte stream independently of the
// BatchConn: frames and data frames in it, and how many writes ended
// inside a frame (cut it in two).
func frameStats(t *testing.T, lens []int, data []byte) (frames, dataFrames, cuts int) {
	t.Helper()
	ends := map[int]bool{0: true}
	for i := 0; i < len(data); {
		if len(data)-i < HeaderSize {
			t.Fatalf("%d bytes of a header at the end", len(data)-i)
		}
		h := data[i : i+HeaderSize]
		i += HeaderSize
		if h[1] == TypeData {
			dataFrames++
			i += int(binary.BigEndian.Uint32(h[8:12]))
		}
		frames++
		ends[i] = true
	}
	at := 0
	for _, n := range lens {
		at += n
		if !ends[at] {
			cuts++
		}
	}
	if at != len(data) {
		t.Fatalf("writes add up to %d bytes, %d recorded", at, len(data))
	}
	return frames, dataFrames, cuts
}

// A lone call's frames each go out in one write, header and body
// together, without waiting for anything after them (the call would not
// be answered otherwise); under concurrency frames share writes.
func TestBatchConnWritesWholeFramesAndBatches(t *testing.T) {
	cc, sc := tcpPair(t)
	cw, sw := &countingConn{Conn: cc, keep: true}, &countingConn{Conn: sc, keep: true}
	echoMux(t, NewBatchConn(sw))
	sess, err := yamux.Client(NewBatchConn(cw), quietMux())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	msg := bytes.Repeat([]byte("m"), 100)

	const lone = 20
	for range lone {
		if err := echoCall(sess, msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, side := range []struct {
		name string
		c    *countingConn
	}{{"client", cw}, {"server", sw}} {
		lens, data := side.c.take()
		frames, dataFrames, cuts := frameStats(t, lens, data)
		t.Logf("%s, %d lone calls: %d writes, %d frames (%d data)", side.name, lone, len(lens), frames, dataFrames)
		if cuts != 0 {
			t.Errorf("%s: %d of %d writes ended inside a frame", side.name, cuts, len(lens))
		}
		if len(lens) > frames {
			t.Errorf("%s: %d writes for %d frames", side.name, len(lens), frames)
		}
		if dataFrames < lone {
			t.Errorf("%s: %d data frames for %d calls", side.name, dataFrames, lone)
		}
	}

	const callers, calls = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				if err := echoCall(sess, msg); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var writes, frames int
	for _, side := range []struct {
		name string
		c    *countingConn
	}{{"client", cw}, {"server", sw}} {
		lens, data := side.c.take()
		f, d, cuts := frameStats(t, lens, data)
		t.Logf("%s, %d calls from %d goroutines: %d writes, %d frames (%d data)", side.name, callers*calls, callers, len(lens), f, d)
		if cuts != 0 {
			t.Errorf("%s: %d of %d writes ended inside a frame", side.name, cuts, len(lens))
		}
		writes += len(lens)
		frames += f
	}
	if writes >= frames {
		t.Errorf("%d writes for %d frames under concurrency: none were batched", writes, frames)
	}
}

// Over TLS a lone frame is one record: one write to the TCP connection
// per frame at most (two per data frame without batching).
func TestBatchConnOneRecordPerFrameOverTLS(t *testing.T) {
	cc, sc := tcpPair(t)
	cw := &countingConn{Conn: cc}
	ct, st := tlsOver(t, cw, sc)
	echoMux(t, NewBatchConn(st))
	// Counts the frames yamux writes, above the BatchConn.
	frames := &countingConn{Conn: NewBatchConn(ct), keep: true}
	sess, err := yamux.Client(frames, quietMux())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	cw.take() // the handshake
	const lone = 20
	for range lone {
		if err := echoCall(sess, bytes.Repeat([]byte("t"), 100)); err != nil {
			t.Fatal(err)
		}
	}
	lens, _ := cw.take()
	ylens, ydata := frames.take()
	n, d, _ := frameStats(t, ylens, ydata)
	t.Logf("%d lone calls over TLS: %d TCP writes, %d frames (%d data) in %d yamux writes", lone, len(lens), n, d, len(ylens))
	if len(lens) > n {
		t.Errorf("%d TCP writes for %d frames", len(lens), n)
	}
}

// dataFrame is a yamux data frame of n body bytes on stream 1.
func dataFrame(n int) []byte {
	f := make([]byte, HeaderSize+n)
	binary.BigEndian.PutUint32(f[4:8], 1)
	binary.BigEndian.PutUint32(f[8:12], uint32(n))
	return f
}

// waitFor polls cond until it holds or batchTestWait passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(batchTestWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A peer that never reads backs the writer up: Write blocks once the
// buffer is full, and Close returns it with net.ErrClosed and ends the
// writing goroutine, blocked in a write to the full socket.
func TestBatchConnCloseUnblocksABlockedWrite(t *testing.T) {
	cc, sc := tcpPair(t)
	cc.(*net.TCPConn).SetWriteBuffer(4 << 10)
	sc.(*net.TCPConn).SetReadBuffer(4 << 10)
	bc := newBatchConn(cc, 8<<10)
	errs := make(chan error, 1)
	go func() {
		f := dataFrame(1 << 10)
		for {
			if _, err := bc.Write(f); err != nil {
				errs <- err
				return
			}
		}
	}()
	waitFor(t, "a Write blocked for room behind a write in flight", func() bool {
		bc.mu.Lock()
		defer bc.mu.Unlock()
		return bc.waiting > 0 && bc.inflight > 0
	})
	closed := make(chan error, 1)
	go func() { closed <- bc.Close() }()
	select {
	case <-closed:
	case <-time.After(batchTestWait):
		t.Fatal("Close did not return")
	}
	if err := <-errs; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the blocked Write returned %v, want net.ErrClosed", err)
	}
	bc.mu.Lock()
	flushing := bc.flushing
	bc.mu.Unlock()
	if flushing {
		t.Fatal("the writing goroutine still runs after Close")
	}
	if _, err := bc.Write(dataFrame(1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// A write that fails (the peer reset the connection) closes the
// connection, and every later Write returns the error.
func TestBatchConnWriteErrorIsReturnedAndCloses(t *testing.T) {
	cc, sc := tcpPair(t)
	sc.(*net.TCPConn).SetLinger(0)
	sc.Close() // a reset
	bc := NewBatchConn(cc)
	defer bc.Close()
	f := dataFrame(100)
	var err error
	waitFor(t, "a Write to return the failed write's error", func() bool {
		_, err = bc.Write(f)
		return err != nil
	})
	if errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write returned %v, not the write's own error", err)
	}
	if _, again := bc.Write(f); again != err {
		t.Fatalf("the next Write returned %v, want %v", again, err)
	}
	waitFor(t, "the writing goroutine to end", func() bool {
		bc.mu.Lock()
		defer bc.mu.Unlock()
		return !bc.flushing
	})
	var b [1]byte
	if _, rerr := cc.Read(b[:]); !errors.Is(rerr, net.ErrClosed) {
		t.Fatalf("reading the connection after the failed write: %v, want it closed", rerr)
	}
}

// The scanner finds every frame end whichever way the stream is cut.
func TestFrameScannerFindsFrameEnds(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	var stream []byte
	ends := map[int]bool{}
	for range 200 {
		if r.IntN(3) == 0 {
			h := make([]byte, HeaderSize)
			h[1] = byte(1 + r.IntN(3)) // window update, ping, go away: no body
			binary.BigEndian.PutUint32(h[8:12], r.Uint32())
			stream = append(stream, h...)
		} else {
			stream = append(stream, dataFrame(r.IntN(40))...)
		}
		ends[len(stream)] = true
	}
	for range 50 {
		var s Scanner
		last := 0
		for at := 0; at < len(stream); {
			n := min(1+r.IntN(60), len(stream)-at)
			if end := s.Scan(stream[at : at+n]); end >= 0 {
				last = at + end
				if !ends[last] {
					t.Fatalf("scan reported a frame end at %d, inside a frame", last)
				}
			}
			for e := range ends {
				if e > last && e <= at+n {
					t.Fatalf("frame end at %d not reported (last reported %d, chunk ends at %d)", e, last, at+n)
				}
			}
			at += n
		}
		if last != len(stream) {
			t.Fatalf("last frame end %d, stream of %d", last, len(stream))
		}
	}
}
