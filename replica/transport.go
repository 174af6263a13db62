package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// DefaultPeerHandshakeTimeout bounds a Raft connection's TLS handshake,
// on either end, so a peer that connects and stalls holds nothing for long.
const DefaultPeerHandshakeTimeout = 5 * time.Second

// streamLayer is raft's StreamLayer for the Raft port, over TCP or mutual
// TLS. It, not raft, accepts connections: a connection over the caps of
// RaftLimits is closed at once, before any TLS work; a TLS handshake runs
// in the layer, bounded in time and in number, and a connection reaches
// raft only once its peer proved to be a replica. Raft then reads through
// a serverConn (idle deadline, request bounds). Refusals and failures are
// counted and reported once per interval, never logged one by one.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config // nil: plain TCP
	client    *tls.Config // template for dialled ones (ServerName set per dial)
	handshake time.Duration
	lim       RaftLimits
	stats     *portStats

	ready chan net.Conn // established connections for raft's Accept
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pending int
	perIP   map[string]*ipCount
	conns   map[net.Conn]struct{} // pending and established, closed by Close
}

// ipCount is one remote address's connections on the Raft port.
type ipCount struct{ pending, all int }

// newStreamLayer listens on bind. With cfg nil it speaks plain TCP;
// otherwise cfg must require and verify client certificates (it serves
// both ends of Raft connections) and verify runs on every connection after
// the chain is verified.
func newStreamLayer(bind string, advertise net.Addr, cfg *tls.Config, verify func(tls.ConnectionState) error,
	handshake time.Duration, lim RaftLimits, log *slog.Logger) (*streamLayer, error) {
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %v cannot be advertised to peers", advertise)
	}
	var c *tls.Config
	if cfg != nil {
		if verify == nil {
			return nil, errors.New("PeerTLS needs VerifyPeer: the Raft port must check that peers are replicas")
		}
		if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
			return nil, errors.New("PeerTLS must require and verify client certificates (tls.RequireAndVerifyClientCert)")
		}
		if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
			return nil, errors.New("PeerTLS has no certificate")
		}
		c = cfg.Clone()
		prev := c.VerifyConnection
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if prev != nil {
				if err := prev(cs); err != nil {
					return err
				}
			}
			return verify(cs)
		}
		if c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
	}
	if handshake <= 0 {
		handshake = DefaultPeerHandshakeTimeout
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	l := &streamLayer{ln: ln, advertise: advertise, server: c, client: c, handshake: handshake, lim: lim,
		stats: &portStats{log: log, interval: lim.LogInterval},
		ready: make(chan net.Conn), ctx: ctx, stop: stop, perIP: map[string]*ipCount{}, conns: map[net.Conn]struct{}{}}
	l.wg.Add(2)
	go l.acceptLoop()
	go func() {
		defer l.wg.Done()
		l.stats.run(ctx.Done())
	}()
	return l, nil
}

// Accept returns the next connection whose peer is established (with TLS:
// handshake done and peer verified). It fails only once the layer is
// closed, so raft's accept loop has nothing to log per connection.
func (l *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// acceptLoop accepts TCP connections and admits them under the caps.
func (l *streamLayer) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			// Out of file descriptors or the like: back off, as
			// net/http does, and count it rather than log each.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.stats.count(statRefused, "accept: "+err.Error())
			select {
			case <-time.After(delay):
			case <-l.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if why := l.admit(c); why != "" {
			// Counted before the reset, so a refused caller finds it counted.
			l.stats.count(statRefused, c.RemoteAddr().String()+": "+why)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // reset: no TIME_WAIT kept for a refused stranger
			}
			c.Close()
			continue
		}
		if l.server == nil {
			l.establish(c, c)
			continue
		}
		l.wg.Add(1)
		go l.handshakeTLS(c)
	}
}

// remoteIP is the connection's remote IP address as a map key.
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// admit takes a place for c under the caps, or says why there is none.
func (l *streamLayer) admit(c net.Conn) string {
	ip := remoteIP(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.perIP[ip]
	if n == nil {
		n = &ipCount{}
	}
	switch {
	case l.closed:
		return "closing"
	case len(l.conns) >= l.lim.MaxConns:
		return fmt.Sprintf("%d connections open", len(l.conns))
	case n.all >= l.lim.MaxConnsPerIP:
		return fmt.Sprintf("%d connections open from this address", n.all)
	case l.server != nil && l.pending >= l.lim.MaxPending:
		return fmt.Sprintf("%d TLS handshakes in progress", l.pending)
	case l.server != nil && n.pending >= l.lim.MaxPendingPerIP:
		return fmt.Sprintf("%d TLS handshakes in progress from this address", n.pending)
	}
	l.perIP[ip] = n
	n.all++
	if l.server != nil {
		n.pending++
		l.pending++
	}
	l.conns[c] = struct{}{}
	return ""
}

// handshakeTLS completes the server side of c's handshake within the
// handshake timeout, then hands the connection to raft.
func (l *streamLayer) handshakeTLS(c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.server)
	ctx, cancel := context.WithTimeout(l.ctx, l.handshake)
	err := tc.HandshakeContext(ctx)
	cancel()
	ip := remoteIP(c)
	l.mu.Lock()
	l.pending--
	l.perIP[ip].pending--
	l.mu.Unlock()
	if err != nil {
		if l.ctx.Err() == nil {
			l.stats.count(statHandshake, c.RemoteAddr().String()+": "+err.Error())
		}
		l.forget(c, ip)
		c.Close()
		return
	}
	l.establish(c, tc)
}

// establish hands conn (raw, or its TLS connection) to raft's Accept.
func (l *streamLayer) establish(raw, conn net.Conn) {
	sc := &serverConn{Conn: conn, layer: l, raw: raw, ip: remoteIP(raw), idle: l.lim.IdleTimeout}
	select {
	case l.ready <- sc:
	case <-l.ctx.Done():
		sc.Close()
	}
}

// release frees an established connection's place.
func (l *streamLayer) release(c *serverConn) { l.forget(c.raw, c.ip) }

func (l *streamLayer) forget(raw net.Conn, ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[raw]; !ok {
		return
	}
	delete(l.conns, raw)
	if n := l.perIP[ip]; n != nil {
		if n.all--; n.all == 0 {
			delete(l.perIP, ip)
		}
	}
}

// Stats counts what the port refused or dropped so far.
func (l *streamLayer) Stats() RaftPortStats { return l.stats.snapshot() }

// Close stops listening, ends every connection the port accepted (raft's
// handlers then return) and waits for the layer's goroutines.
func (l *streamLayer) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	conns := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	l.stop()
	err := l.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	l.wg.Wait()
	return err
}

// Addr is the address advertised to peers.
func (l *streamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to a peer; with TLS it completes the handshake: the peer
// must present a certificate valid for the dialled host and accepted by
// verify. The connection redials by itself when raft reuses it after a
// long idle time (redialConn).
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial, err := l.dialer(string(address), timeout)
	if err != nil {
		return nil, err
	}
	c, err := dial()
	if err != nil {
		return nil, err
	}
	return &redialConn{dial: dial, stale: l.lim.IdleTimeout / 2, cur: c, last: time.Now()}, nil
}

func (l *streamLayer) dialer(address string, timeout time.Duration) (func() (net.Conn, error), error) {
	if l.client == nil {
		return func() (net.Conn, error) { return net.DialTimeout("tcp", address, timeout) }, nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	cfg := l.client
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	timeout = min(timeout, l.handshake)
	return func() (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return d.DialContext(ctx, "tcp", address)
	}, nil
}
