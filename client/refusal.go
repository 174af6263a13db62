package client

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"lockcell/cell/wire"
)

// ErrTooManyConnections means a replica refused the connection because a
// cap on connections was full: its connections from this address
// (--max-conns-per-ip, 64 by default), of this principal
// (--max-conns-per-principal) or in all (--max-conns). The error also
// matches ErrTooMany, and its message names the cap and its value.
//
// A Client is one session and holds one connection per replica it talks
// to (in practice the master's), however many goroutines call through it
// and however many handles, locks and parked calls it has: every call in
// flight is a stream of that one connection. A process that dials one
// Client per goroutine or per worker uses one connection to the master
// for each, and meets the per-address cap at 64; it should share one
// Client (or a few) among them instead, set Config.ShareConnections on
// its Clients (their sessions then share one connection per replica), or
// the operator raise the cap.
//
// Dial fails with it at once when the replica named as the master refused
// the connection, or every replica did; a Client that Dial has returned
// keeps retrying through RetryTimeout (a place may come free), and then
// fails with ErrNoMaster wrapping it.
var ErrTooManyConnections = errors.New("lockcell: connection refused: too many connections")

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
