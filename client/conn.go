package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell/certs"
	"lockcell/frame"
	"lockcell/wire"
)

// conn is one TCP connection to one replica, multiplexed with yamux: every
// call in flight has a stream of its own, so calls never queue behind a
// parked KeepAlive and cancelling one call closes only its stream. A
// stream whose call ended with its answer is kept for the next call
// (wire.Header.KeepStream), so a call costs no stream setup and teardown.
type conn struct {
	addr string
	mux  *yamux.Session
	tls  *watchedConn // nil without TLS
	// rej reads a replica's refusal where yamux's first frame would be
	// (refusal.go).
	rej *refusalConn
	// shared is the connection's entry among those the process's Clients
	// share (sharedconns.go); nil for a Client's own.
	shared *sharedConn
	// sending bounds the request bytes in flight on the connection
	// (sendbudget.go).
	sending *sendBudget

	keptMu sync.Mutex
	kept   []keptStream // most recently used last
}

// keptStream is a stream between calls, and when its last call ended.
type keptStream struct {
	s     *yamux.Stream
	since time.Time
}

const (
	// maxKeptStreams bounds the streams one connection keeps between
	// calls: as many as calls ran at once recently, up to this.
	maxKeptStreams = 64
	// keptStreamReuse is how long a stream is reused after its last
	// call: replicas close a kept stream idle for their stream idle
	// timeout (30 s by default), and a call sent on a stream the replica
	// is closing has to be sent again on a fresh one (call).
	keptStreamReuse = 10 * time.Second
)

// refusedConn reports whether err is a refused TCP connection.
func refusedConn(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// remoteAlert reports whether err is a TLS alert the peer sent.
func remoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// watchedConn remembers the first error reading a TLS connection. In TLS
// 1.3 a replica refuses a client certificate after the client's side of
// the handshake is done, so the refusal (an alert) arrives on the first
// read, inside yamux, which reports only "session shutdown"; this is how
// a call learns the real cause.
type watchedConn struct {
	net.Conn
	mu  sync.Mutex
	err error
}

func (w *watchedConn) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return n, err
}

// refusal returns ErrCertificateRefused, wrapped with the replica's alert,
// if the replica refused the certificate.
func (w *watchedConn) refusal(addr string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if remoteAlert(w.err) {
		return fmt.Errorf("%w: %s: %v", ErrCertificateRefused, addr, w.err)
	}
	return nil
}

func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// A dead or paused replica is noticed within about 4 s.
	c.KeepAliveInterval = 2 * time.Second
	c.ConnectionWriteTimeout = 2 * time.Second
	c.StreamCloseTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// dialOpts say how to reach a replica: the TCP dialer (nil: net.Dialer),
// the TLS configuration (nil: plain TCP) and the timeout of connecting
// and handshaking.
type dialOpts struct {
	dialer  func(context.Context, string, string) (net.Conn, error)
	tls     *tls.Config
	timeout time.Duration
}

// dialOptsOf is how a Client with cfg reaches replicas.
func dialOptsOf(cfg *Config) *dialOpts {
	return &dialOpts{dialer: cfg.Dialer, tls: cfg.TLS, timeout: cfg.DialTimeout}
}

// dial connects to the replica at addr: TCP (through o.dialer), then TLS
// when configured, then the protocol byte and a yamux session. A nil o
// dials plain TCP with timeout.
func dial(ctx context.Context, o *dialOpts, addr string, timeout time.Duration) (*conn, error) {
	if o == nil {
		o = &dialOpts{}
	}
	if o.timeout > 0 {
		timeout = o.timeout
	}
	dialer := o.dialer
	if dialer == nil {
		dialer = (&net.Dialer{}).DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc, err := dialer(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := tc.(*net.TCPConn); ok {
		tcp.SetNoDelay(true)
	}
	// A replica over a connection cap says so in place of its first
	// answer: before TLS, its ServerHello.
	rej := &refusalConn{Conn: tc, addr: addr}
	tc = rej
	var watched *watchedConn
	if o.tls != nil {
		cfg, err := certs.ForAddr(o.tls, addr)
		if err != nil {
			tc.Close()
			return nil, err
		}
		tlsConn := tls.Client(tc, cfg)
		if err := tlsConn.HandshakeContext(dctx); err != nil {
			tc.Close()
			if r := rej.refusal(); r != nil {
				return nil, r
			}
			if remoteAlert(err) {
				return nil, fmt.Errorf("%w: %s: %v", ErrCertificateRefused, addr, err)
			}
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		watched = &watchedConn{Conn: tlsConn}
		// After the handshake, a principal's cap is told over TLS.
		rej = &refusalConn{Conn: watched, addr: addr}
		tc = rej
	}
	tc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := tc.Write([]byte{wire.RPCMultiplex}); err != nil {
		tc.Close()
		return nil, err
	}
	tc.SetWriteDeadline(time.Time{})
	// yamux writes each frame's header and body separately and one frame
	// at a time; the BatchConn puts a frame in one write, and frames that
	// queue meanwhile in the next.
	mux, err := yamux.Client(frame.NewBatchConn(tc), muxConfig())
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &conn{addr: addr, mux: mux, tls: watched, rej: rej, sending: newSendBudget(maxBytesInFlight)}, nil
}

func (c *conn) alive() bool { return !c.mux.IsClosed() }

func (c *conn) close() {
	c.mux.Close()
	c.keptMu.Lock()
	c.kept = nil // closed with the connection
	c.keptMu.Unlock()
}

// stream returns a kept stream used within keptStreamReuse (reused true),
// or a new one.
func (c *conn) stream() (s *yamux.Stream, reused bool, err error) {
	now := time.Now()
	c.keptMu.Lock()
	if n := len(c.kept); n > 0 {
		k := c.kept[n-1]
		c.kept[n-1] = keptStream{}
		c.kept = c.kept[:n-1]
		if now.Sub(k.since) < keptStreamReuse {
			c.keptMu.Unlock()
			return k.s, true, nil
		}
		// The most recent is stale, so all are: close them.
		stale := append(c.kept, k)
		c.kept = nil
		c.keptMu.Unlock()
		for _, k := range stale {
			k.s.Close()
		}
	} else {
		c.keptMu.Unlock()
	}
	s, err = c.mux.OpenStream()
	return s, false, err
}

// keep puts s, whose call ended with its answer, among the kept streams,
// or closes it when enough are kept or the connection is closed.
func (c *conn) keep(s *yamux.Stream) {
	c.keptMu.Lock()
	if len(c.kept) < maxKeptStreams && !c.mux.IsClosed() {
		c.kept = append(c.kept, keptStream{s: s, since: time.Now()})
		c.keptMu.Unlock()
		return
	}
	c.keptMu.Unlock()
	s.Close()
}

// callsSent counts every call put on the wire by any Client in this
// process, KeepAlives included: tests read it (testhook.CallsSent) to
// prove a cached read made none.
var callsSent atomic.Uint64

// errTransport marks a failure of the connection rather than an answer.
var errTransport = errors.New("transport")

// call runs one request on a stream of its own: a kept one when there is
// one (conn), else a new one. A transport failure is wrapped with
// errTransport; an answer, good or bad, comes back as the Status.
//
// A kept stream may have been closed by the replica (its idle timeout)
// while the request was on its way: the reply is then the stream's end,
// before any byte of an answer. The replica closes only streams that are
// idle, so the request was never read, and call sends it again once, on
// a new stream. (A mutating call is safe to send again in any case: its
// request id makes the cell apply it at most once.)
func (c *conn) call(ctx context.Context, h *wire.Header, req, resp any) (wire.Status, error) {
	callsSent.Add(1)
	if weight := requestWeight(req); weight >= smallRequest {
		if err := c.sending.acquire(ctx, weight); err != nil {
			return wire.Status{}, c.linkErr(ctx, "send to", err)
		}
		defer c.sending.release(weight)
	}
	h.KeepStream = true
	for {
		s, reused, err := c.stream()
		if err != nil {
			if r := c.rej.refusal(); r != nil {
				return wire.Status{}, r
			}
			return wire.Status{}, fmt.Errorf("%w: open stream to %s: %v", errTransport, c.addr, err)
		}
		st, closedIdle, err := c.callOn(ctx, s, h, req, resp)
		if reused && closedIdle && ctx.Err() == nil {
			continue
		}
		return st, err
	}
}

// callOn runs one request on s and keeps s for the next call if the
// call ended with its answer. closedIdle reports that s ended before any
// byte of an answer arrived.
func (c *conn) callOn(ctx context.Context, s *yamux.Stream, h *wire.Header, req, resp any) (st wire.Status, closedIdle bool, err error) {
	answered := false
	stop := context.AfterFunc(ctx, func() {
		s.Close() // tells the master to abandon a parked call
		s.SetReadDeadline(time.Now())
	})
	defer func() {
		if stop() && answered {
			c.keep(s)
		} else {
			s.Close()
		}
	}()
	if err := wire.WriteMessage(s, h, req); err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return st, false, we // too large: the caller's fault, not the link's
		}
		return st, streamEnded(err), c.linkErr(ctx, "send to", err)
	}
	if err := wire.ReadMessage(s, &st); err != nil {
		return st, streamEnded(err), c.linkErr(ctx, "receive from", err)
	}
	body, err := wire.ReadFrame(s)
	if err != nil {
		return st, false, c.linkErr(ctx, "receive from", err)
	}
	if st.Code == wire.CodeOK && resp != nil {
		if err := wire.Decode(body, resp); err != nil {
			return st, false, fmt.Errorf("%w: %s sent a malformed reply: %v", errTransport, c.addr, err)
		}
	}
	answered = true
	return st, false, nil
}

// streamEnded reports whether err is the end of a stream the replica
// closed or reset, before any byte of an answer.
func streamEnded(err error) bool {
	return err == io.EOF || errors.Is(err, yamux.ErrConnectionReset) || errors.Is(err, yamux.ErrStreamClosed)
}

// linkErr describes a failed send or receive: the replica's refusal of
// our certificate or of the connection (a cap on connections), the
// caller's cancellation, or a transport failure.
func (c *conn) linkErr(ctx context.Context, what string, err error) error {
	if r := c.tls.refusal(c.addr); r != nil {
		return r
	}
	if r := c.rej.refusal(); r != nil {
		return r
	}
	return ctxOr(ctx, fmt.Errorf("%w: %s %s: %v", errTransport, what, c.addr, err))
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
