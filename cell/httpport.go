package cell

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/cell/certs"
	"lockcell/cell/clientport"
	"lockcell/internal/fdlimit"
)

// The HTTP port's connections. Operators' tools need few of them, so each
// remote IP address and the port in all get a cap, checked and taken in one
// step in the listener's Accept, before any TLS work: a connection over a
// cap is reset at once and counted by reason. Every connection has a time
// to deliver its request headers and its request, a time for its reply,
// and a time it may sit idle between requests; a keep-alive connection
// that sends nothing more is closed after the idle time. And all HTTP
// ports of the process together hold at most an eighth of its file
// descriptors (httpFDDivisor), so that no number of HTTP callers can take
// the descriptors the client and Raft ports need (docs/limits.md, "The
// HTTP port").

// HTTPLimits bound the HTTP port (Config.MetricsAddr). Zero fields take
// DefaultHTTPLimits; a default MaxConns is lowered to the HTTP port's share
// of the process's file descriptors (HTTPFDShare) when that is smaller,
// and a MaxConns set above that share is refused (ErrFDReserve).
type HTTPLimits struct {
	// MaxConnsPerIP caps open HTTP connections from one remote IP
	// address; more are reset as soon as they are accepted.
	MaxConnsPerIP int
	// MaxConns caps the HTTP port's open connections.
	MaxConns int
	// ReadHeaderTimeout bounds a new request's headers (and, with TLS, the
	// handshake before the first one).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request's handling and reply, from the end of
	// its headers. A profile (/debug/pprof/profile?seconds=N) must take
	// less than this.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no next
	// request for this long.
	IdleTimeout time.Duration
}

// DefaultHTTPLimits are the HTTP port's limits when none are set: room
// for a Prometheus, probes and a few operators' browsers (six connections
// each), and a minute for a reply, which a 30-second CPU profile needs.
var DefaultHTTPLimits = HTTPLimits{MaxConnsPerIP: 32, MaxConns: 256, ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout: 10 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 30 * time.Second}

// httpMaxHeaderBytes bounds one request's headers (net/http's default is
// 1 MiB a connection, which the connection caps would multiply).
const httpMaxHeaderBytes = 64 << 10

// httpFDDivisor: the HTTP ports of one process together hold at most
// 1/httpFDDivisor of its file descriptors.
const httpFDDivisor = 8

// httpLogEvery is how often refused HTTP connections are reported, as one
// line with counts.
const httpLogEvery = 10 * time.Second

// ErrFDReserve is the error (under errors.Is) of a configuration whose
// HTTP or client connection cap exceeds that port's share of the process's
// file descriptors: honoured, it could leave the other ports (Raft's above
// all) none.
var ErrFDReserve = errors.New("cell: a connection cap exceeds its port's share of file descriptors")

// HTTPNames says who sees names (locks, principals, client names) on the
// HTTP port's status page and /status.json.
type HTTPNames string

const (
	// HTTPNamesAuthenticated (the default) shows them to callers the cell
	// can authenticate, as its client port would: on a TLS cell a caller
	// presenting a user certificate of the cell's CA sees what its
	// principal may read (the admin everything), and a caller without one
	// sees counts only; on a plain cell every caller is
	// AnonymousPrincipal, as on its client port.
	HTTPNamesAuthenticated HTTPNames = "authenticated"
	// HTTPNamesHidden shows counts only, to everyone.
	HTTPNamesHidden HTTPNames = "hidden"
)

// HTTPFDShare returns the most connections the HTTP ports of this process
// may hold together, an eighth of its file-descriptor limit, and that
// limit (the soft RLIMIT_NOFILE, which Go raises to the hard limit at
// start); (0, 0) when the limit cannot be read, and then there is no such
// share.
func HTTPFDShare() (share int, limit uint64) {
	limit = fdlimit.Soft()
	if limit == 0 {
		return 0, 0
	}
	return int(min(limit/httpFDDivisor, uint64(1<<30))), limit
}

// httpFDs counts the HTTP connections of every Server of the process
// against HTTPFDShare (a development cell runs five in one process).
var httpFDs struct {
	once sync.Once
	max  int64 // 0: no share known
	open atomic.Int64
}

// takeHTTPFD takes one place in the process's HTTP share, unless it is
// full.
func takeHTTPFD() bool {
	httpFDs.once.Do(func() {
		share, _ := HTTPFDShare()
		httpFDs.max = int64(share)
	})
	for {
		n := httpFDs.open.Load()
		if httpFDs.max > 0 && n >= httpFDs.max {
			return false
		}
		if httpFDs.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func giveHTTPFD() { httpFDs.open.Add(-1) }

// validateHTTP checks the HTTP port's settings (part of Validate).
func (c *Config) validateHTTP() error {
	h := c.HTTP
	for _, v := range []struct {
		name string
		n    int64
	}{{"MaxConnsPerIP (--http-max-conns-per-ip)", int64(h.MaxConnsPerIP)}, {"MaxConns (--http-max-conns)", int64(h.MaxConns)},
		{"ReadHeaderTimeout (--http-read-header-timeout)", int64(h.ReadHeaderTimeout)},
		{"ReadTimeout (--http-read-timeout)", int64(h.ReadTimeout)}, {"WriteTimeout (--http-write-timeout)", int64(h.WriteTimeout)},
		{"IdleTimeout (--http-idle-timeout)", int64(h.IdleTimeout)}} {
		if v.n < 0 {
			return fmt.Errorf("cell: the HTTP port's %s is negative", v.name)
		}
	}
	switch c.HTTPNames {
	case "", HTTPNamesAuthenticated, HTTPNamesHidden:
	default:
		return fmt.Errorf("cell: HTTPNames (--http-names) is %q, not %q or %q", c.HTTPNames, HTTPNamesAuthenticated, HTTPNamesHidden)
	}
	if c.MetricsAddr == "" {
		return nil
	}
	if c.Insecure && !c.InsecureAnyAddress && !IsLoopbackAddr(c.MetricsAddr) {
		return fmt.Errorf("cell: a plain (Insecure) cell's HTTP port shows its callers every name, as its client port serves "+
			"them everything, so it listens on loopback only, and %s is not (InsecureAnyAddress lifts this)", c.MetricsAddr)
	}
	if share, limit := HTTPFDShare(); share > 0 && h.MaxConns > share {
		return fmt.Errorf("%w: MaxConns (--http-max-conns) is %d, and the file-descriptor limit %d leaves the HTTP ports %d "+
			"(an eighth); raise the limit (LimitNOFILE=, ulimit -n) or lower the cap", ErrFDReserve, h.MaxConns, limit, share)
	}
	return nil
}

// withDefaults fills zero fields with DefaultHTTPLimits, the default
// MaxConns no higher than the process's HTTP share (logged when lowered).
func (l HTTPLimits) withDefaults(log *slog.Logger) HTTPLimits {
	d := DefaultHTTPLimits
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
		if share, limit := HTTPFDShare(); share > 0 && share < l.MaxConns {
			l.MaxConns = max(share, 1)
			log.Warn("HTTP port: connection cap lowered to an eighth of the file-descriptor limit, so that the client and Raft ports keep the rest",
				"max_conns", l.MaxConns, "default", d.MaxConns, "fd_limit", limit)
		}
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = d.MaxConnsPerIP
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// Reasons an HTTP connection is refused at accept.
const (
	httpRefusedPerIP = iota
	httpRefusedTotal
	httpRefusedFDShare
	httpRefusedReasons
)

// httpRefusalNames label lockcell_http_connections_refused_total.
var httpRefusalNames = [httpRefusedReasons]string{"per_ip", "total", "fd_share"}

// httpListener admits the HTTP port's connections under its caps.
type httpListener struct {
	net.Listener
	lim HTTPLimits
	log *slog.Logger

	mu    sync.Mutex
	open  int
	perIP map[string]int

	refused [httpRefusedReasons]atomic.Uint64

	logMu   sync.Mutex
	logged  time.Time                  // the last report
	pending [httpRefusedReasons]uint64 // refusals since it
	example string
}

func newHTTPListener(ln net.Listener, lim HTTPLimits, log *slog.Logger) *httpListener {
	return &httpListener{Listener: ln, lim: lim, log: log, perIP: map[string]int{}}
}

// Accept returns the next connection within the caps; connections over
// one are reset and counted here, so the server above (and its TLS
// handshake) never sees them.
func (l *httpListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err // net/http backs off on temporary errors (EMFILE)
		}
		ip := clientport.RemoteIP(c)
		if why := l.admit(ip); why >= 0 {
			// Counted before the reset: a caller that sees its connection
			// refused then finds the refusal in the stats and metrics.
			l.refuse(why, c.RemoteAddr().String())
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // reset: no TIME_WAIT kept for a refused caller
			}
			c.Close()
			continue
		}
		return &httpConn{Conn: c, l: l, ip: ip}, nil
	}
}

// admit counts a new connection from ip, or returns the reason it is
// refused: its address, the port or the process's share is full.
func (l *httpListener) admit(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perIP[ip] >= l.lim.MaxConnsPerIP:
		return httpRefusedPerIP
	case l.open >= l.lim.MaxConns:
		return httpRefusedTotal
	case !takeHTTPFD():
		return httpRefusedFDShare
	}
	l.perIP[ip]++
	l.open++
	return -1
}

func (l *httpListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	giveHTTPFD()
	l.open--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
}

// refuse counts a refusal and logs the refusals since the last report
// when that is at least httpLogEvery old: one line, never one a caller.
func (l *httpListener) refuse(why int, remote string) {
	l.refused[why].Add(1)
	l.logMu.Lock()
	l.pending[why]++
	l.example = remote + ": " + httpRefusalNames[why]
	now := time.Now()
	if now.Sub(l.logged) < httpLogEvery {
		l.logMu.Unlock()
		return
	}
	l.logged = now
	counts, example := l.pending, l.example
	l.pending = [httpRefusedReasons]uint64{}
	l.logMu.Unlock()
	args := []any{}
	for i, n := range counts {
		if n > 0 {
			args = append(args, httpRefusalNames[i], n)
		}
	}
	args = append(args, "example", example, "max_conns_per_ip", l.lim.MaxConnsPerIP, "max_conns", l.lim.MaxConns,
		"next_report_in", httpLogEvery)
	l.log.Warn("HTTP port: connections refused over their caps since the last report (counted, not logged one by one)", args...)
}

// HTTPStats is what the HTTP port holds and has refused since the server
// started.
type HTTPStats struct {
	// Open are the HTTP connections open now; MaxConns and MaxConnsPerIP
	// the caps in force (after defaults).
	Open, MaxConns, MaxConnsPerIP int
	// RefusedPerIP, RefusedTotal and RefusedFDShare are connections reset
	// at accept because their address held MaxConnsPerIP, the port held
	// MaxConns, or the process's HTTP ports held their share of file
	// descriptors (HTTPFDShare).
	RefusedPerIP, RefusedTotal, RefusedFDShare uint64
}

// HTTPStats reports the HTTP port's connections (zero without one).
func (s *Server) HTTPStats() HTTPStats {
	l := s.httpLn
	if l == nil {
		return HTTPStats{}
	}
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return HTTPStats{Open: open, MaxConns: l.lim.MaxConns, MaxConnsPerIP: l.lim.MaxConnsPerIP,
		RefusedPerIP: l.refused[httpRefusedPerIP].Load(), RefusedTotal: l.refused[httpRefusedTotal].Load(),
		RefusedFDShare: l.refused[httpRefusedFDShare].Load()}
}

// httpConn is an admitted HTTP connection; its first Close frees its
// place.
type httpConn struct {
	net.Conn
	l      *httpListener
	ip     string
	closed atomic.Bool
}

func (c *httpConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.ip)
	}
	return err
}

// httpTLSConfig is the HTTP port's TLS configuration, made from the
// client port's (Config.TLS, whose certificate reload it follows through
// GetConfigForClient): the same certificate, CA and TLS 1.3, but a client
// certificate is asked for, not required, so that probes and scrapers
// without one reach /healthz, /readyz and /metrics. A certificate that is
// given must verify and be a user certificate with a valid principal,
// or the handshake fails. HTTP/1.1 only: one request at a time per
// connection, which the connection caps then bound.
func httpTLSConfig(base *tls.Config) *tls.Config {
	adapt := func(c *tls.Config) *tls.Config {
		c = c.Clone()
		c.ClientAuth = tls.VerifyClientCertIfGiven
		c.VerifyConnection = verifyHTTPCaller
		c.NextProtos = []string{"http/1.1"}
		return c
	}
	out := adapt(base)
	if get := base.GetConfigForClient; get != nil {
		out.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(h)
			if err != nil || c == nil {
				return c, err
			}
			return adapt(c), nil
		}
	}
	return out
}

// verifyHTTPCaller accepts a caller without a certificate (it sees no
// names) or with a user certificate (certs.VerifyUser).
func verifyHTTPCaller(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	return certs.VerifyUser(cs)
}

// serveMetrics serves the HTTP port on addr until the server closes:
// /metrics, /healthz, /readyz, the status page and, with Config.Pprof,
// /debug/pprof/ (http.go), over TLS when the client port has it.
func (s *Server) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	lim := s.cfg.HTTP.withDefaults(s.log)
	hl := newHTTPListener(ln, lim, s.log)
	var served net.Listener = hl
	if s.cfg.TLS != nil {
		served = tls.NewListener(hl, httpTLSConfig(s.cfg.TLS))
	}
	srv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes,
		// net/http logs every failed TLS handshake: a line per
		// stranger's connection. Kept at debug level.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	s.metricsSrv, s.httpLn = srv, hl
	s.metricsAddr = ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(served); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("HTTP port stopped", "err", err)
		}
	}()
	return nil
}

// MetricsAddr returns the address of the HTTP port, where /metrics,
// /healthz, /readyz and the status page are served ("" when off).
func (s *Server) MetricsAddr() string { return s.metricsAddr }
