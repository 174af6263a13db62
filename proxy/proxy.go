// Package proxy is a Chubby proxy (`lockcelld proxy`): clients dial it
// exactly as they dial a replica, and it forwards their calls to the
// master, answering their KeepAlives itself from leases it keeps for all
// of their sessions with a few BatchKeepAlive calls (keepalive.go), so the
// master sees one KeepAlive stream per proxy instead of one per session;
// with Config.CacheReads it answers their file reads from a cache kept
// consistent as a cacher of the master's (readcache.go, cachegate.go).
//
// Identity: the proxy terminates its clients' TLS (a clientport.Port, the
// replicas' own client port, with its caps and budgets) and learns each
// one's principal; it calls the master as its own principal, naming on
// every call the principal it makes it for (wire.Header.OnBehalfOf), which
// the master honours only from a principal it trusts as a proxy.
//
// Ownership: a Proxy owns its listener, its port's connections, its
// connection to the master and the goroutines serving them; Close ends
// them all.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"lockcell/cell/clientport"
	"lockcell/wire"
)

// Anonymous is every client's principal on a proxy without TLS, as on a
// replica without it.
const Anonymous = "anonymous"

// Config is what a Proxy needs besides its listener.
type Config struct {
	// Peers are the replicas' client addresses; the proxy finds the
	// master among them and follows it.
	Peers []string
	// TLS, when set, is the mutual TLS the proxy's clients must complete
	// (as a replica's client port: certs.ServerConfig with a replica
	// certificate naming the proxy's host); each client's principal is
	// its certificate's name.
	TLS *tls.Config
	// Upstream, when set, is the TLS the proxy dials the master with: a
	// user certificate naming the proxy's own principal, which the cell
	// must trust as a proxy (`lockcelld serve --proxy-principals`).
	Upstream *tls.Config
	// Limits bound the proxy's client connections and calls, as a
	// replica's client port does (zero fields: clientport defaults).
	Limits clientport.Limits
	// Dialer, when set, makes the proxy's TCP connections to the
	// replicas (tests cut the proxy off the cell with one).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a connection to a replica (default 5 s).
	DialTimeout time.Duration
	// Logger receives the proxy's logs (default slog.Default()).
	Logger *slog.Logger
	// CacheReads turns the read cache on (readcache.go): the proxy
	// answers its clients' file reads from a cache it keeps consistent
	// through a cache session of its own, as Chubby's proxies do.
	CacheReads bool
	// CacheBytes bounds the read cache (default DefaultCacheBytes).
	CacheBytes int64
	// Metrics, when set, is where New registers the proxy's metrics
	// (lockcell_proxy_*, docs/operations.md "Proxies"); HTTPHandler
	// serves them with /healthz and /readyz. Unset, they are kept and
	// not exported.
	Metrics prometheus.Registerer
}

// Proxy serves clients on one listener and forwards their calls to the
// master. Its methods are safe for concurrent use.
type Proxy struct {
	cfg    Config
	port   *clientport.Port
	up     *upstream
	ka     *keeper
	rc     *readCache // nil unless Config.CacheReads
	m      *metrics
	ctx    context.Context
	cancel context.CancelFunc
	// loops are the keeper's batch loop, the master probe and the read
	// cache's loop (Serve's).
	loops sync.WaitGroup
	// forwardedReads counts the reads forwarded (Stats.ForwardedReads).
	forwardedReads atomic.Uint64
}

// New returns a Proxy serving ln once Serve is called; it owns ln from now
// on.
func New(ln net.Listener, cfg Config) (*Proxy, error) {
	if len(cfg.Peers) == 0 {
		ln.Close()
		return nil, errors.New("proxy: no peers: the replicas' client addresses are needed")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if (cfg.TLS == nil) != (cfg.Upstream == nil) {
		ln.Close()
		return nil, errors.New("proxy: TLS towards clients and towards the master go together")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, ctx: ctx, cancel: cancel, m: newMetrics()}
	p.up = newUpstream(cfg.Peers, cfg.Upstream, cfg.DialTimeout, p.m)
	p.up.dialer = cfg.Dialer
	p.ka = newKeeper(ctx, p.up, p.m, cfg.Logger)
	if cfg.CacheReads {
		p.rc = newReadCache(ctx, p.ka, p.up, p.m, cfg.Logger, ownPrincipal(cfg.Upstream), cfg.CacheBytes)
		p.ka.rc = p.rc
	}
	p.port = clientport.New(ln, clientport.Config{Limits: cfg.Limits, TLS: cfg.TLS, Anonymous: Anonymous, Logger: cfg.Logger},
		handler{p})
	if cfg.Metrics != nil {
		if err := p.m.register(cfg.Metrics, p); err != nil {
			cancel()
			p.port.Close()
			return nil, fmt.Errorf("proxy: metrics: %w", err)
		}
	}
	return p, nil
}

// Serve starts serving clients, keeping their sessions and probing the
// master; it does not block.
func (p *Proxy) Serve() {
	p.loops.Add(2)
	go func() {
		defer p.loops.Done()
		p.ka.run()
	}()
	if p.rc != nil {
		p.loops.Add(1)
		go func() {
			defer p.loops.Done()
			p.rc.run()
		}()
	}
	go func() {
		defer p.loops.Done()
		p.probeLoop()
	}()
	p.port.Serve()
}

// probeEvery is how often the proxy asks the master whether it serves
// (an empty BatchKeepAlive, answered at once); probeTimeout bounds one
// probe, dialling included, so a master that stops answering counts as
// none within it. A master that refused the proxy (it does not trust it,
// or does not know proxies) is asked only every probeRefusedEvery: the
// answer will not change before an operator acts, and each refusal is
// audited.
const (
	probeEvery        = time.Second
	probeTimeout      = 2 * time.Second
	probeRefusedEvery = 10 * time.Second
)

// probeLoop probes the master until the proxy closes (upstream.probe):
// what Ready and lockcell_proxy_has_master report.
func (p *Proxy) probeLoop() {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var next time.Time
	for {
		if now := time.Now(); !now.Before(next) {
			ctx, cancel := context.WithTimeout(p.ctx, probeTimeout)
			err := p.up.probe(ctx)
			cancel()
			if wire.CodeOf(err) == wire.CodePermission || errors.Is(err, errOldMaster) {
				next = now.Add(probeRefusedEvery)
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Ready reports whether the proxy can serve its clients: it has a master
// (its last probe, at most a second ago, found one serving, over a
// connection still open) and, when clients are present (a KeepAlive
// waiting, or heard within half a lease) whose sessions had a lease
// from the master, a lease fresh enough to tell them (a quarter lease
// or more) for at least one of those sessions. Otherwise it says why
// not.
func (p *Proxy) Ready() (bool, string) {
	ok, why := p.up.hasMaster()
	return p.readiness(ok, why, p.ka.leases(time.Now()))
}

// readiness is Ready's judgement on what it read. A session the proxy
// has just met (no lease from the master yet) counts neither way: its
// first batch may be held up to three quarters of a lease.
func (p *Proxy) readiness(hasMaster bool, why string, n leaseCounts) (bool, string) {
	switch {
	case p.ctx.Err() != nil:
		return false, "the proxy is closing"
	case !hasMaster:
		return false, "no master: " + why
	case n.Fresh == 0 && n.Stale > 0:
		return false, fmt.Sprintf("no fresh lease from the master for any of the %d sessions of its present clients", n.Stale)
	}
	return true, ""
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.port.Addr() }

// Close stops serving: clients' connections close (their parked
// KeepAlives answered NotMaster first), the connection to the master
// closes, and Close returns once every goroutine has.
func (p *Proxy) Close() {
	p.ka.endAll()
	p.cancel()
	p.port.Close()
	p.up.close()
	p.port.Wait()
	p.loops.Wait()
}

// Stats are a proxy's figures.
type Stats struct {
	// Sessions are the sessions whose KeepAlives the proxy answers.
	Sessions int
	// Batches counts the BatchKeepAlive calls made to the master, Failed
	// those that failed (no master, a lost connection).
	Batches, Failed uint64
	// Stale counts client KeepAlives answered NotMaster because the
	// proxy had no fresh lease from the master for their session.
	Stale uint64
	// Master is the replica the proxy believes leads ("" if none).
	Master string
	// Conns are the client port's connection figures.
	Conns clientport.Stats
	// Cache is the read cache's (zero without Config.CacheReads).
	Cache CacheStats
	// ForwardedReads counts the contents and stat reads forwarded to the
	// master (every one without the read cache).
	ForwardedReads uint64
}

// Stats reports the proxy's figures now.
func (p *Proxy) Stats() Stats {
	n, b, f, st := p.ka.stats()
	return Stats{Sessions: n, Batches: b, Failed: f, Stale: st, Master: p.up.masterAddr(), Conns: p.port.Stats(), Cache: p.rc.stats(),
		ForwardedReads: p.forwardedReads.Load()}
}

// handler is the proxy's side of its client port.
type handler struct{ p *Proxy }

// Call forwards a call to the master on its client's behalf. A master
// that cannot be reached, or is between terms, is Unavailable to the
// client (which backs off and asks this proxy again); every other answer
// is the master's own.
func (h handler) Call(ctx context.Context, caller clientport.Caller, hd *wire.Header, body []byte) (any, uint64, error) {
	if hd.Method == wire.MethodBatchKeepAlive {
		h.p.m.call(hd.Method, wire.CodePermission)
		return nil, 0, wire.Errorf(wire.CodePermission, "a proxy's clients may not send BatchKeepAlive")
	}
	fwd := *hd
	fwd.OnBehalfOf = caller.Principal
	fwd.KeepStream = false
	fwd.ProxyCache = 0 // the proxy's to name, never its client's
	var fill *fillToken
	if rc := h.p.rc; rc != nil && (hd.Method == wire.MethodGetContentsAndStat || hd.Method == wire.MethodGetStat) {
		var req wire.HandleRequest
		if wire.Decode(body, &req) == nil {
			if resp, epoch, ok := rc.serve(caller.Principal, hd, &req); ok {
				return resp, epoch, nil
			}
			if wait := rc.filling(hd, &req); wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return nil, 0, wire.Errorf(wire.CodeCanceled, "the client left the call")
				}
				if resp, epoch, ok := rc.serve(caller.Principal, hd, &req); ok {
					return resp, epoch, nil
				}
			}
			h.p.m.cacheReads.WithLabelValues("miss").Inc()
			fill, fwd.ProxyCache = rc.fillStart(hd, &req)
		}
	}
	if hd.Method == wire.MethodGetContentsAndStat || hd.Method == wire.MethodGetStat {
		h.p.forwardedReads.Add(1)
	}
	arrived := time.Now()
	st, resp, err := h.p.up.call(ctx, &fwd, body)
	if fill != nil {
		if err != nil {
			h.p.rc.fillDone(fill, caller.Principal, hd.Method, nil, nil)
		} else {
			h.p.rc.fillDone(fill, caller.Principal, hd.Method, &st, resp)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			h.p.m.call(hd.Method, wire.CodeCanceled)
			return nil, 0, wire.Errorf(wire.CodeCanceled, "the client left the call")
		}
		h.p.m.call(hd.Method, wire.CodeUnavailable)
		return nil, 0, wire.Errorf(wire.CodeUnavailable, "proxy: %v", err)
	}
	h.p.m.call(hd.Method, st.Code)
	if st.Code != wire.CodeOK {
		return nil, st.Epoch, st.Err()
	}
	if h.p.rc != nil {
		h.p.rc.noteCall(hd.Session, hd.Method, body, resp)
	}
	switch hd.Method {
	case wire.MethodCreateSession:
		var cr wire.CreateSessionResponse
		if wire.Decode(resp, &cr) == nil && cr.Session != 0 {
			h.p.ka.created(caller.Principal, cr.Session, cr.Epoch, arrived, time.Duration(cr.LeaseMillis)*time.Millisecond)
		}
	case wire.MethodCloseSession:
		h.p.ka.ended(hd.Session) // nothing more to keep
	case wire.MethodResumeSession:
		var req wire.ResumeSessionRequest
		if wire.Decode(body, &req) == nil {
			h.p.ka.ended(req.Session) // another incarnation now
		}
	}
	return msgpack.RawMessage(resp), st.Epoch, nil
}

// KeepAlive answers a client's KeepAlive from the leases the proxy keeps
// (keepalive.go).
func (h handler) KeepAlive(caller clientport.Caller, hd *wire.Header, body []byte, done func(any, uint64, error)) func() {
	return h.p.ka.keepAlive(caller.Principal, caller.Conn, hd, body, done)
}

// ConnClosed ends the KeepAlives parked over a client connection.
func (h handler) ConnClosed(conn uint64) { h.p.ka.connClosed(conn) }

// NotMaster: a proxy names no replica (its clients may not reach them);
// its clients look for a master among the addresses they were given.
func (h handler) NotMaster(st *wire.Status) { st.Leader = "" }

// String names the proxy for logs.
func (p *Proxy) String() string { return fmt.Sprintf("proxy %s", p.Addr()) }

// MapDialer returns a Config.Dialer that dials each address m names at
// the address it maps to, and any other at itself: a proxy placed where
// the replicas' own addresses do not reach them (behind NAT, or a test's
// per-node links) still follows the names the cell gives them.
func MapDialer(m map[string]string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := m[addr]; ok {
			addr = to
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}
