// Package clientport is a replica's client port: it accepts client
// connections (TLS and the protocol byte, then yamux), admits them under
// caps per address, per principal and for the process, bounds the memory
// and streams each may hold in bytes and counts, reads each stream's
// request, hands it to a Handler, and writes the reply. It knows the wire
// framing and nothing of what a call means: the master (behind Handler)
// does.
//
// Ownership: a Port owns its listener, every connection and stream it
// accepted, and the goroutines serving them; Close ends them all and Wait
// returns once they have. The caps and budgets are described on Limits and
// in budget.go; docs/limits.md lists them with their figures.
package clientport

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/wire"
)

// Caller is who sent a call: the principal its connection's handshake
// named (Config.Anonymous without TLS) and the connection, by an id
// unique within the Port.
type Caller struct {
	Principal string
	Conn      uint64
}

// Handler serves the calls a Port reads. Its methods are called from many
// goroutines at once.
type Handler interface {
	// Call serves one call and returns its reply (a wire message), the
	// master epoch it was served in, or an error, which must be a
	// *wire.Error. ctx ends when the client leaves the call or the Port
	// closes.
	Call(ctx context.Context, caller Caller, h *wire.Header, body []byte) (resp any, epoch uint64, err error)
	// KeepAlive serves a KeepAlive without a goroutine waiting on it:
	// done is called once with its outcome, maybe before KeepAlive
	// returns (then it returns nil). Otherwise it returns cancel, which
	// ends the parked call (done is then called with its end).
	KeepAlive(caller Caller, h *wire.Header, body []byte, done func(resp any, epoch uint64, err error)) (cancel func())
	// ConnClosed ends every call still parked on a connection that has
	// closed.
	ConnClosed(conn uint64)
	// NotMaster completes the status of a CodeNotMaster answer: it names
	// the leader the client should try, or changes the code when this
	// replica leads but cannot serve yet.
	NotMaster(status *wire.Status)
}

// Config is what a Port needs besides its listener and Handler.
type Config struct {
	// Limits bound connections, streams, bytes and times; zero fields
	// take DefaultLimits.
	Limits Limits
	// TLS, when set, is the mutual TLS every connection must complete
	// first; principals are then client certificate names.
	TLS *tls.Config
	// Anonymous is every caller's principal when TLS is nil.
	Anonymous string
	// Logger receives refusals (rationed) and debugging lines.
	Logger *slog.Logger
	// Observe, when set, is told each call's method, outcome and time
	// from its request read to its reply written (for metrics).
	Observe func(method wire.Method, code wire.Code, took time.Duration)
}

// Port serves clients on one listener. Its methods are safe for
// concurrent use.
type Port struct {
	cfg     Config
	h       Handler
	log     *slog.Logger
	ln      net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	limits  Limits
	connsMu sync.Mutex
	conns   map[*yamux.Session]struct{}
	perIP   map[string]int // open connections by remote IP
	// open counts the connections admitted (connlimits.go), perPrincipal
	// those whose handshake named each principal.
	open         int
	perPrincipal map[string]int
	closed       bool
	connSeq      atomic.Uint64 // connection ids for Caller.Conn
	stats        connCounters
	budget       *budgets // memory budgets (budget.go)
	// draining counts refused connections being read before their close,
	// refusals the refusals not yet logged (connrefusal.go).
	draining atomic.Int64
	refusals refusalLog
}

// New returns a Port that will serve ln with h once Serve is called. The
// Port owns ln from now on.
func New(ln net.Listener, cfg Config, h Handler) *Port {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Port{cfg: cfg, h: h, log: cfg.Logger, ln: ln, ctx: ctx, cancel: cancel, limits: cfg.Limits.WithDefaults(),
		conns: map[*yamux.Session]struct{}{}, perIP: map[string]int{}, perPrincipal: map[string]int{}}
	p.budget = newBudgets(p.limits, cfg.TLS != nil, p.log)
	return p
}

// Serve starts accepting connections, in a goroutine of the Port's; it
// does not block.
func (p *Port) Serve() {
	p.wg.Add(1)
	go p.acceptLoop()
}

// Addr returns the address the Port listens on.
func (p *Port) Addr() net.Addr { return p.ln.Addr() }

// Close stops accepting, closes every connection and ends the calls in
// flight (their contexts end; parked calls end through
// Handler.ConnClosed). It does not wait: Wait does. A second Close does
// nothing.
func (p *Port) Close() {
	p.connsMu.Lock()
	if p.closed {
		p.connsMu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.connsMu.Unlock()
	p.cancel()
	p.ln.Close()
}

// Wait returns once every goroutine the Port started has returned. A
// call still in its Handler holds it, so the Handler must be stopped
// (its waiting calls answered) for Wait to return.
func (p *Port) Wait() { p.wg.Wait() }
