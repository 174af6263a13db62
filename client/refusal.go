package client

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"lockcell/wire"
)

// connRefusedError is a replica's refusal of a connection: it matches
// ErrTooManyConnections and, through the replica's typed error, ErrTooMany.
type connRefusedError struct {
	addr string
	rej  *wire.Error
}

func tooManyConns(addr string, rej *wire.Error) error { return &connRefusedError{addr: addr, rej: rej} }

func (e *connRefusedError) Error() string {
	return fmt.Sprintf("%v to %s: %v; a Client carries all its calls over one connection per replica, "+
		"so share one Client among the goroutines of a process rather than dialling one each, set Config.ShareConnections, "+
		"or raise the replica's cap",
		ErrTooManyConnections, e.addr, e.rej)
}

// Is matches ErrTooManyConnections.
func (e *connRefusedError) Is(target error) bool { return target == ErrTooManyConnections }

// Unwrap returns the replica's typed error (CodeTooMany).
func (e *connRefusedError) Unwrap() error { return e.rej }

// refusedAt returns the replica that refused the connection, if err is
// such a refusal.
func refusedAt(err error) (string, bool) {
	var e *connRefusedError
	if errors.As(err, &e) {
		return e.addr, true
	}
	return "", false
}

// refusalConn reads a replica's refusal (wire.RPCRefused and a Status)
// where the first byte of its answer would be: under TLS, in place of
// the ServerHello (a cap checked at accept); on the connection yamux
// reads, in place of its first frame (a plain cell's caps, and a
// principal's after the handshake). It reports the refusal as the read's
// error and remembers it, so that whoever sees the connection fail
// (the handshake, or a call through yamux, which only says "session
// shutdown") can name the cause.
type refusalConn struct {
	net.Conn
	addr    string
	checked bool // the first byte was read; only one goroutine reads at a time

	mu  sync.Mutex
	err error // the refusal, once read
}

func (r *refusalConn) Read(b []byte) (int, error) {
	if r.checked || len(b) == 0 {
		return r.Conn.Read(b)
	}
	var first [1]byte
	n, err := r.Conn.Read(first[:])
	if n == 0 {
		return 0, err
	}
	r.checked = true
	if first[0] != wire.RPCRefused {
		b[0] = first[0]
		return 1, nil
	}
	rej, rerr := wire.ReadRefusal(r.Conn)
	if rerr != nil {
		return 0, rerr
	}
	refusal := tooManyConns(r.addr, rej)
	r.mu.Lock()
	r.err = refusal
	r.mu.Unlock()
	return 0, refusal
}

// refusal returns the replica's refusal, if it sent one (nil on a nil r).
func (r *refusalConn) refusal() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
