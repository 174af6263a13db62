package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// DefaultPeerHandshakeTimeout bounds a Raft connection's TLS handshake, on
// either end, so a peer that connects and stalls holds nothing for long.
const DefaultPeerHandshakeTimeout = 5 * time.Second

// tlsStreamLayer is raft's StreamLayer over mutual TLS: every connection,
// accepted or dialled, is a TLS connection whose peer presented a
// certificate the configuration verifies and that verify accepts (cell
// passes certs.VerifyReplica, so only replica certificates speak Raft;
// replica cannot import certs itself: it is a leaf package).
type tlsStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	server    *tls.Config // for accepted connections
	client    *tls.Config // template for dialled ones (ServerName set per dial)
	handshake time.Duration
}

// newTLSStreamLayer listens on bind. cfg must require and verify client
// certificates (it serves both ends of Raft connections); verify runs on
// every connection after the chain is verified.
func newTLSStreamLayer(bind string, advertise net.Addr, cfg *tls.Config, verify func(tls.ConnectionState) error, handshake time.Duration) (*tlsStreamLayer, error) {
	if verify == nil {
		return nil, errors.New("PeerTLS needs VerifyPeer: the Raft port must check that peers are replicas")
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, errors.New("PeerTLS must require and verify client certificates (tls.RequireAndVerifyClientCert)")
	}
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		return nil, errors.New("PeerTLS has no certificate")
	}
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %v cannot be advertised to peers", advertise)
	}
	if handshake <= 0 {
		handshake = DefaultPeerHandshakeTimeout
	}
	c := cfg.Clone()
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
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return &tlsStreamLayer{ln: ln, advertise: advertise, server: c, client: c, handshake: handshake}, nil
}

// Accept returns the next connection. Its handshake runs on the first
// Read or Write, in the goroutine raft gives the connection, bounded by
// the handshake timeout, so a stalled peer never blocks raft's accept loop.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.server), timeout: l.handshake}, nil
}

// Close stops listening.
func (l *tlsStreamLayer) Close() error { return l.ln.Close() }

// Addr is the address advertised to peers.
func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to a peer and completes the handshake: the peer must
// present a certificate valid for the dialled host and accepted by verify.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, err
	}
	cfg := l.client
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	timeout = min(timeout, l.handshake)
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(address))
}

// handshakeConn completes a server-side TLS handshake, within a deadline,
// before its first Read or Write.
type handshakeConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			c.Conn.Close()
		}
	})
	return c.err
}

// Read completes the handshake, then reads.
func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// Write completes the handshake, then writes.
func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
