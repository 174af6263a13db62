package cell

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"lockcell/audit"
	"lockcell/cell/certs"
	"lockcell/frame"
	"lockcell/master"
	"lockcell/replica"
	"lockcell/wire"
)

// Server is one replica process: replica, master and client port.
type Server struct {
	cfg     Config
	log     *slog.Logger
	rep     *replica.Replica
	master  *Master
	ln      net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	limits  ConnLimits
	connsMu sync.Mutex
	conns   map[*yamux.Session]struct{}
	perIP   map[string]int // open connections by remote IP
	// open counts the connections admitted (connlimits.go), perPrincipal
	// those whose handshake named each principal.
	open         int
	perPrincipal map[string]int
	closed       bool
	connSeq      atomic.Uint64 // connection ids for master.Caller.Conn
	stats        connCounters
	budget       *budgets // memory budgets of the client port (budget.go)
	// draining counts refused connections being read before their close,
	// refusals the refusals not yet logged (connrefusal.go).
	draining atomic.Int64
	refusals refusalLog

	hashes *hashGate // rations CellStatus state hashes

	metrics     *metrics
	metricsSrv  *http.Server
	metricsAddr string
	httpLn      *httpListener // the HTTP port's connections (httpport.go)
}

// Master is the master type served by this package (an alias so that
// callers of cell need not import master).
type Master = master.Server

// New opens the replica and listens on its client address. It does not
// block: Raft elects a master in the background.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		closeTransport(cfg.Transport)
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	self := cfg.self()
	ln, err := net.Listen("tcp", self.ClientAddr)
	if err != nil {
		closeTransport(cfg.Transport)
		return nil, fmt.Errorf("cell: listen for clients on %s: %w", self.ClientAddr, err)
	}
	var peers []replica.Peer
	for _, p := range cfg.Peers {
		peers = append(peers, replica.Peer{ID: p.ID, RaftAddr: p.RaftAddr})
	}
	rcfg := replica.Config{ID: cfg.Self, Cell: cfg.Cell, Dir: cfg.Dir, RaftAddr: self.RaftAddr,
		Peers: peers, Timings: cfg.Timings, Logger: cfg.Logger, Transport: cfg.Transport, Join: cfg.Join,
		Audit: audit.Options{RetainBytes: cfg.AuditRetainBytes}}
	if cfg.PeerTLS != nil {
		// Only replica certificates of the cell's CA speak Raft
		// (docs/spec.md#the-raft-port).
		rcfg.PeerTLS, rcfg.VerifyPeer = cfg.PeerTLS, certs.VerifyReplica
	}
	rep, err := replica.Open(rcfg)
	if err != nil {
		ln.Close()
		// replica.Open closes an injected transport on some failures
		// only; a second Close is harmless.
		closeTransport(cfg.Transport)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger.With("replica", cfg.Self), rep: rep, ln: ln, ctx: ctx, cancel: cancel,
		limits: cfg.Limits.withDefaults(), conns: map[*yamux.Session]struct{}{}, perIP: map[string]int{},
		perPrincipal: map[string]int{}}
	s.budget = newBudgets(s.limits, cfg.TLS != nil, s.log)
	if cfg.TLS == nil {
		s.log.Warn("no TLS: every caller is principal " + master.AnonymousPrincipal + ", the admin; do not expose this port")
	} else if cfg.Admin == "" {
		s.log.Info("mutual TLS on: principals are client certificate names; the admin is " + cfg.admin())
	}
	s.master = master.New(master.Config{Cell: cfg.Cell, LeaseTTL: cfg.LeaseTTL, MaxLeaseTTL: cfg.MaxLeaseTTL, KeepAliveTarget: cfg.KeepAliveTarget,
		DefaultLockDelay: cfg.DefaultLockDelay,
		Logger:           s.log, Audit: cfg.auditLogger(), Admin: cfg.admin(), Limits: cfg.SessionLimits,
		Members: cfg.bootstrapMembers()}, rep, rep.FSM())
	s.hashes = &hashGate{interval: cfg.StateHashInterval, now: time.Now}
	if s.hashes.interval <= 0 {
		s.hashes.interval = DefaultStateHashInterval
	}
	s.metrics = newMetrics(s)
	if cfg.MetricsAddr != "" {
		if err := s.serveMetrics(cfg.MetricsAddr); err != nil {
			cancel()
			ln.Close()
			rep.Close()
			return nil, fmt.Errorf("cell: metrics on %s: %w", cfg.MetricsAddr, err)
		}
	}
	s.wg.Add(2)
	go s.monitorLeadership()
	go s.acceptLoop()
	return s, nil
}

// closeTransport closes an injected Raft transport (Config.Transport) when
// New fails: a TCP one would otherwise hold its port, and a retry could
// not bind it.
func closeTransport(t raft.Transport) {
	if c, ok := t.(io.Closer); ok {
		c.Close()
	}
}

// ID returns the replica's id.
func (s *Server) ID() string { return s.cfg.Self }

// ClientAddr returns the address clients dial.
func (s *Server) ClientAddr() string { return s.ln.Addr().String() }

// Replica returns the replica (for tests and status).
func (s *Server) Replica() *replica.Replica { return s.rep }

// Master returns this replica's master (serving or not).
func (s *Server) Master() *Master { return s.master }

// IsMaster reports whether this replica's master serves, and its epoch.
func (s *Server) IsMaster() (bool, uint64) { return s.master.Serving() }

// monitorLeadership runs exactly one master at a time: Start on gaining
// Raft leadership (retrying until it serves or loses leadership), Stop on
// losing it (Consul's monitorLeadership shape).
func (s *Server) monitorLeadership() {
	defer s.wg.Done()
	var run *leaderRun
	stopLeading := func() {
		if run == nil {
			return
		}
		run.cancel()
		<-run.done
		s.master.Stop()
		run = nil
	}
	defer stopLeading()
	for {
		select {
		case isLeader, ok := <-s.rep.Leadership():
			if !ok {
				return
			}
			if !isLeader {
				stopLeading()
			} else if run == nil {
				run = s.startLeading()
			}
		case <-s.ctx.Done():
			return
		}
	}
}

// leaderRun is one term of leadership's attempt to start the master.
type leaderRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startLeading starts the master, retrying until it serves, leadership is
// lost, or the run is cancelled.
func (s *Server) startLeading() *leaderRun {
	ctx, cancel := context.WithCancel(s.ctx)
	run := &leaderRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		for ctx.Err() == nil {
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.master.Start(sctx)
			scancel()
			if err == nil || !s.rep.IsLeader() {
				return
			}
			s.log.Warn("master start failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return run
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("accept failed", "err", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		ip := remoteIP(conn)
		if r := s.admit(ip); r != connAdmitted {
			s.refuseConn(conn, conn, r, "")
			continue
		}
		s.wg.Add(1)
		go s.serveConn(conn, ip)
	}
}

// remoteIP is the address a connection comes from, without its port.
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// connCounters count what the client port refused, by reason.
type connCounters struct {
	perIP, handshake, streams atomic.Uint64
	// connections refused over MaxConns, the file-descriptor share and
	// MaxConnsPerPrincipal (connlimits.go)
	connsTotal, connsFDShare, connsPrincipal atomic.Uint64
	idleStreams                              atomic.Uint64 // kept streams ended by their idle timeout
	keptRefused                              atomic.Uint64 // streams closed, not kept, over a cap on kept streams
}

// ConnStats counts what the client port refused since the server started.
type ConnStats struct {
	// RefusedPerIP are connections closed at once because their address
	// held MaxConnsPerIP already; RefusedTotal because the replica held
	// MaxConns; RefusedFDShare because the process's client ports held
	// their share of file descriptors (ClientFDShare); RefusedPerPrincipal
	// closed after their handshake because the principal it named held
	// MaxConnsPerPrincipal.
	RefusedPerIP, RefusedTotal, RefusedFDShare, RefusedPerPrincipal uint64
	// Conns are the client connections the replica holds now.
	Conns int
	// FailedHandshakes are connections dropped before their protocol byte:
	// TLS refused (no, foreign, expired or not-yet-valid certificate),
	// too slow (HandshakeTimeout), or a wrong protocol byte.
	FailedHandshakes uint64
	// RefusedStreams are calls answered wire.CodeTooMany because a cap on
	// streams (MaxStreamsPerConn, MaxStreamsPerIP, MaxStreamsPerPrincipal,
	// MaxStreams) or MaxCallsPerSession was reached.
	RefusedStreams uint64
	// StreamsRefusedConn, StreamsRefusedIP, StreamsRefusedPrincipal and
	// StreamsRefusedProcess are the streams refused at accept, unread, by
	// the cap that was reached: the connection's, the address's, the
	// principal's, the process's.
	StreamsRefusedConn, StreamsRefusedIP, StreamsRefusedPrincipal, StreamsRefusedProcess uint64
	// Streams are the streams open now (calls in flight, parked calls,
	// kept streams), StreamsKept the kept streams among them waiting for
	// their next call, StreamsPeak the most ever open at once.
	Streams, StreamsKept, StreamsPeak int64
	// StreamsLingering are the streams the replica has closed and their
	// clients not yet (counted against MaxKeptStreamsPerIP and
	// MaxKeptStreamsPerPrincipal when a new stream comes).
	StreamsLingering int64
	// IdleStreamsClosed are kept streams (wire.Header.KeepStream) the
	// replica closed because no call came on them for StreamIdleTimeout;
	// KeptStreamsRefused those it closed after their call instead of
	// keeping them, over MaxKeptStreamsPerIP, MaxKeptStreamsPerPrincipal
	// or MaxKeptStreams.
	IdleStreamsClosed, KeptStreamsRefused uint64
	// OverBudgetConn, OverBudgetIP and OverBudgetProcess are connections
	// closed because they held bytes over a memory budget (MaxConnBuffer,
	// MaxIPBuffer, MaxBuffer: the level that bound) and freed none for
	// BufferStall.
	OverBudgetConn, OverBudgetIP, OverBudgetProcess uint64
	// RequestBytes are the request bytes the client port holds now
	// (received, not yet served), and RequestBytesPeak the most it ever
	// held; ReplyBytes are the reply bytes being written now.
	RequestBytes, RequestBytesPeak, ReplyBytes int64
	// RequestHeld is what the request budget counts now: RequestBytes
	// and the memory holding them costs beyond their size (yamux's
	// receive buffers, frame buffers allocated ahead of their bytes);
	// RequestHeldPeak the most it ever counted. ReplyHeld is ReplyBytes
	// with the rest of the buffers they are encoded in.
	RequestHeld, RequestHeldPeak, ReplyHeld int64
	// RateWait is the time connections' reads waited, added up, because
	// their IP address read more than MaxIPRate.
	RateWait time.Duration
	// ReserveReads are reads admitted while the process held MaxBuffer of
	// requests or more, into BufferReserve, because their address and
	// principal held less than their fair shares.
	ReserveReads uint64
}

// ConnStats reports what the client port has refused and the bytes it
// holds.
func (s *Server) ConnStats() ConnStats {
	b := s.budget
	return ConnStats{RefusedPerIP: s.stats.perIP.Load(), FailedHandshakes: s.stats.handshake.Load(),
		RefusedTotal: s.stats.connsTotal.Load(), RefusedFDShare: s.stats.connsFDShare.Load(),
		RefusedPerPrincipal: s.stats.connsPrincipal.Load(), Conns: s.openConns(),
		RefusedStreams: s.stats.streams.Load(), IdleStreamsClosed: s.stats.idleStreams.Load(), KeptStreamsRefused: s.stats.keptRefused.Load(),
		OverBudgetConn: b.over[levelConn].Load(), OverBudgetIP: b.over[levelIP].Load(), OverBudgetProcess: b.over[levelProcess].Load(),
		RequestBytes: b.in.used.Load(), RequestBytesPeak: b.inPeak.Load(), ReplyBytes: b.out.used.Load(),
		RequestHeld: b.in.held(), RequestHeldPeak: b.inHeldPeak.Load(), ReplyHeld: b.out.held(),
		RateWait: time.Duration(b.slowed.Load()), ReserveReads: b.reserveReads.Load(),
		StreamsRefusedConn: b.refusedStreams[levelConn].Load(), StreamsRefusedIP: b.refusedStreams[levelIP].Load(),
		StreamsRefusedPrincipal: b.refusedStreams[levelPrincipal].Load(), StreamsRefusedProcess: b.refusedStreams[levelProcess].Load(),
		Streams: b.streams.Load(), StreamsKept: b.kept.Load(), StreamsPeak: b.streamsPeak.Load(),
		StreamsLingering: b.lingering.Load()}
}

func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = 1024
	c.KeepAliveInterval = 5 * time.Second
	c.ConnectionWriteTimeout = 5 * time.Second
	c.StreamCloseTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// hello runs a new connection's TLS handshake (when configured) and reads
// its protocol byte, all within HandshakeTimeout, and returns the
// connection to speak on and its principal.
func (s *Server) hello(conn net.Conn) (net.Conn, string, error) {
	deadline := time.Now().Add(s.limits.HandshakeTimeout)
	conn.SetDeadline(deadline)
	principal := master.AnonymousPrincipal
	if s.cfg.TLS != nil {
		tc := tls.Server(conn, s.cfg.TLS)
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("TLS handshake: %w", err)
		}
		cs := tc.ConnectionState()
		p, err := certs.PrincipalOf(&cs)
		if err != nil {
			return nil, "", err
		}
		conn, principal = tc, p
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return nil, "", fmt.Errorf("protocol byte: %w", err)
	}
	if b[0] != wire.RPCMultiplex {
		return nil, "", fmt.Errorf("protocol byte %#x is not %#x", b[0], wire.RPCMultiplex)
	}
	conn.SetDeadline(time.Time{})
	return conn, principal, nil
}

func (s *Server) serveConn(raw net.Conn, ip string) {
	defer s.wg.Done()
	released := false
	defer func() {
		if !released {
			s.release(ip)
		}
	}()
	conn, principal, err := s.hello(raw)
	if err != nil {
		s.stats.handshake.Add(1)
		s.log.Debug("connection dropped", "remote", raw.RemoteAddr().String(), "err", err)
		drop(raw, err)
		return
	}
	if !s.admitPrincipal(principal) {
		// Its place goes back before its client hears why, so a client
		// that tries again at once is not refused by this connection.
		s.release(ip)
		released = true
		s.refuseConn(conn, raw, connRefusedPerPrincipal, principal)
		return
	}
	defer s.releasePrincipal(principal)
	cb := s.budget.conn(ip, principal)
	defer cb.end() // after the session has closed: nothing is read any more
	// The budget sees yamux's writes as yamux makes them; the BatchConn
	// below it puts each frame, and the frames queued meanwhile, in one
	// write.
	sess, err := yamux.Server(&budgetConn{Conn: frame.NewBatchConn(conn), raw: raw, c: cb}, yamuxConfig())
	if err != nil {
		conn.Close()
		return
	}
	s.connsMu.Lock()
	if s.closed {
		s.connsMu.Unlock()
		sess.Close()
		return
	}
	s.conns[sess] = struct{}{}
	s.connsMu.Unlock()
	caller := master.Caller{Principal: principal, Conn: s.connSeq.Add(1)}
	// The connection's end ends its parked KeepAlives (one list per
	// connection at the master), after the session has closed: a call
	// that parks later sees it closed (serveStream).
	defer s.master.ConnClosed(caller.Conn)
	defer func() {
		s.connsMu.Lock()
		delete(s.conns, sess)
		s.connsMu.Unlock()
		sess.Close()
	}()
	calls := &sessionCalls{max: s.limits.MaxCallsPerSession, n: map[uint64]int{}}
	var inflight atomic.Int64
	leave := func() {
		inflight.Add(-1)
		cb.leaveStream()
	}
	leaveConnOnly := func() { inflight.Add(-1) }
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		sb := cb.accepted(st.StreamID())
		cb.handling(sb, st)
		// Only this goroutine adds to inflight, so the connection's check
		// and take are one step; takeStream takes the other levels'.
		level := levelConn
		if inflight.Load() < int64(s.limits.MaxStreamsPerConn) {
			level = cb.takeStream()
		} else {
			s.budget.refusedStreams[levelConn].Add(1)
		}
		if level != levelNone {
			s.refuseStream(st, cb, sb, level)
			continue
		}
		inflight.Add(1)
		s.wg.Add(1)
		leaveThis := leave
		if cb.holdSlot(sb) {
			// The stream's place in the address's, principal's and
			// process's caps goes when yamux drops it (connBudget.forget).
			leaveThis = leaveConnOnly
		}
		go s.serveStream(st, caller, calls, cb, sb, leaveThis)
	}
}

// drop closes a connection that failed its hello. After a refused TLS
// handshake it first half-closes and drains what the client already sent
// (its protocol byte, yamux frames), for at most a second: closing with
// unread bytes would reset the connection, and a reset can discard the
// TLS alert that tells the client why (TLS 1.3 clients read it after
// their side of the handshake is done). A connection that was too slow
// is closed at once.
func drop(raw net.Conn, err error) {
	defer raw.Close()
	tcp, ok := raw.(*net.TCPConn)
	var ne net.Error
	if !ok || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return
	}
	tcp.CloseWrite()
	tcp.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(tcp, 64<<10))
}

// refuseStream answers a stream over a cap on streams (level names which:
// its connection's, address's, principal's or the process's) with TooMany
// without reading its request. It runs in the connection's accept loop,
// so a client that opens streams faster than it reads answers is slowed
// to one refusal at a time; the write deadline keeps one that reads
// nothing from stalling the loop for long. The reply is a few dozen bytes
// written one at a time, so it is not charged to the reply budget; the
// request bytes the stream holds stay charged until the client closes it.
func (s *Server) refuseStream(st *yamux.Stream, cb *connBudget, sb *streamBytes, level budgetLevel) {
	s.stats.streams.Add(1)
	var msg string
	switch l := s.limits; level {
	case levelIP:
		msg = fmt.Sprintf("more than %d streams open from one address", l.MaxStreamsPerIP)
	case levelPrincipal:
		msg = fmt.Sprintf("more than %d streams open of one principal", l.MaxStreamsPerPrincipal)
	case levelProcess:
		msg = fmt.Sprintf("more than %d streams open on this replica", l.MaxStreams)
	default:
		msg = fmt.Sprintf("more than %d calls in flight on one connection", l.MaxStreamsPerConn)
	}
	st.SetWriteDeadline(time.Now().Add(time.Second))
	wire.WriteMessage(st, &wire.Status{Code: wire.CodeTooMany, Msg: msg}, &wire.Empty{})
	st.Close()
	cb.finished(sb, 0)
}

// streamReader counts the bytes a handler reads off its stream: they are
// released from the request budget once the call no longer holds them.
// It tells the budget what each read moves out of yamux's buffer and the
// room it reads into (budget.go, "What a held byte costs").
type streamReader struct {
	st *yamux.Stream
	cb *connBudget
	sb *streamBytes
	n  atomic.Int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	r.cb.reading(r.sb, len(p))
	n, err := r.st.Read(p)
	r.n.Add(int64(n))
	// yamux keeps a stream's receive buffer once it is drained, sized to
	// the most that ever waited in it (and doubled past its first frame):
	// memory the budget would have to keep charging while the handler
	// waits for the rest of a frame. Drop it; the next frame brings one
	// of its own size.
	r.st.Shrink()
	r.cb.read(r.sb, n)
	return n, err
}

// streamCall is one stream and the call it carries: what it holds until
// its reply is written (the stream, its request bytes, its place among its
// session's calls and its connection's streams, the server's wait group).
// A stream the client asked to keep (wire.Header.KeepStream) carries one
// call after another; between them it waits, with no goroutine, for the
// next request or its idle timeout (idle).
type streamCall struct {
	st      *yamux.Stream
	cb      *connBudget
	sb      *streamBytes
	in      streamReader // in the call: one allocation less per stream
	calls   *sessionCalls
	caller  master.Caller
	h       wire.Header
	entered bool        // counted in calls
	broken  atomic.Bool // the stream cannot carry another call
	leave   func()      // the connection's count of streams in flight

	// state moves a kept stream between its calls: streamBusy while a
	// call runs, streamIdle while it waits; whichever of the next
	// request and the idle timer takes it from idle runs.
	state    atomic.Int32
	idleStop *time.Timer

	// parkMu orders a parked KeepAlive's watch (serveCall) against its
	// completion, which may come first, from another goroutine: a watch
	// set after the completion would take the place of the kept stream's
	// own (idle) and swallow its next request.
	parkMu   sync.Mutex
	answered bool // the KeepAlive in flight has its answer
}

const (
	streamBusy int32 = iota
	streamIdle
)

// endCall releases what the stream holds: it is closed, its request
// bytes released, and it leaves its session's and connection's counts.
func (s *Server) endCall(c *streamCall) {
	if c.entered {
		c.calls.leave(c.h.Session)
		c.entered = false
	}
	c.st.Close()
	c.cb.finished(c.sb, c.in.n.Swap(0))
	c.leave()
	s.wg.Done()
}

// callDone follows a call whose reply is written: the stream ends, unless
// the client asked to keep it and it is sound, in which case it waits for
// the next call (idle).
func (s *Server) callDone(c *streamCall) {
	if !c.h.KeepStream || c.broken.Load() || s.ctx.Err() != nil {
		s.endCall(c)
		return
	}
	if c.entered {
		c.calls.leave(c.h.Session)
		c.entered = false
	}
	c.cb.consumed(c.sb, c.in.n.Swap(0))
	if !c.cb.takeKept() {
		s.stats.keptRefused.Add(1)
		s.endCall(c)
		return
	}
	s.idle(c)
}

// idle parks a kept stream between calls without a goroutine: the
// connection's frame reader wakes it when the next request's first bytes
// arrive, or when the client closes or resets the stream, or when the
// connection ends (watchPeer); a timer ends it after StreamIdleTimeout.
// The stream still counts against the caps on streams (MaxStreamsPerConn
// and its address's, principal's and the process's).
func (s *Server) idle(c *streamCall) {
	c.h = wire.Header{}
	c.state.Store(streamIdle)
	if c.idleStop == nil {
		c.idleStop = time.AfterFunc(s.limits.StreamIdleTimeout, func() {
			if s.unidle(c) {
				s.stats.idleStreams.Add(1)
				s.endCall(c)
			}
		})
	} else {
		c.idleStop.Reset(s.limits.StreamIdleTimeout)
	}
	if !c.cb.watchPeer(c.sb, func() { s.wake(c) }) {
		// Not counted by the frame reader (so nothing would wake it):
		// end it now rather than at its timer.
		if s.unidle(c) {
			c.idleStop.Stop()
			s.endCall(c)
		}
	}
}

// unidle takes a kept stream out of its wait, for whichever of its next
// request, its idle timer or its end comes first: it reports whether the
// caller was first.
func (s *Server) unidle(c *streamCall) bool {
	if !c.state.CompareAndSwap(streamIdle, streamBusy) {
		return false
	}
	c.cb.leaveKept()
	return true
}

// wake runs the next call of a kept stream, in the goroutine watchPeer
// started, unless its idle timer ended it first.
func (s *Server) wake(c *streamCall) {
	if !s.unidle(c) {
		return
	}
	c.idleStop.Stop()
	s.serveCall(c)
}

// serveStream runs the calls of one stream: request frames in, response
// frames out, one call at a time (serveCall). A blocking call (KeepAlive,
// waiting Acquire) is cancelled when the client closes or resets its
// stream, or sends anything after its request.
func (s *Server) serveStream(st *yamux.Stream, caller master.Caller, calls *sessionCalls, cb *connBudget, sb *streamBytes, leave func()) {
	c := &streamCall{st: st, cb: cb, sb: sb, in: streamReader{st: st, cb: cb, sb: sb}, calls: calls, caller: caller, leave: leave}
	s.serveCall(c)
}

// serveCall runs one call on c's stream, then hands the stream to
// callDone.
//
// A KeepAlive leaves no goroutine behind while it is parked: the master
// gets a completion (Master.DispatchKeepAlive) that writes the reply and
// releases the stream, and serveCall returns. Nothing reads a parked
// KeepAlive's stream: the connection's frame reader, which already
// charges every frame to its stream (budget.go), ends the call when the
// client sends more on it or closes or resets it (watchPeer), and the end
// of the connection ends all of its parked calls at once
// (Master.ConnClosed). A goroutine reading each stream would cost a
// stack per parked call.
func (s *Server) serveCall(c *streamCall) {
	st, cb, sb, in, calls := c.st, c.cb, c.sb, &c.in, c.calls
	// One timer bounds the whole request. A read deadline on the stream
	// would do it too, but yamux arms a new timer on every Read that has
	// to wait while one is set, and a client trickling a large request
	// (or hundreds of them) turned that into the master's top cost under
	// attack: timer allocations, clock reads and garbage.
	var reading sync.Mutex
	expired, done := false, false
	expire := time.AfterFunc(s.limits.RequestTimeout, func() {
		reading.Lock()
		defer reading.Unlock()
		if !done {
			expired = true
			st.SetReadDeadline(time.Now()) // the waiting Read returns ErrTimeout
		}
	})
	h := &c.h
	err := wire.ReadMessage(in, h)
	var body []byte
	if err == nil {
		body, err = wire.ReadFrame(in)
	}
	expire.Stop()
	reading.Lock()
	done = true
	if expired {
		st.SetReadDeadline(time.Time{})
	}
	reading.Unlock()
	if err != nil {
		s.replyErr(st, cb, err)
		s.endCall(c)
		return
	}
	// A parked call keeps its stream for minutes: let yamux drop the
	// receive buffer the request arrived in (it is empty now).
	st.Shrink()
	if !calls.enter(h.Session) {
		s.stats.streams.Add(1)
		s.writeReply(st, cb, &wire.Status{Code: wire.CodeTooMany,
			Msg: fmt.Sprintf("session %d has more than %d calls in flight", h.Session, calls.max)}, &wire.Empty{})
		s.endCall(c)
		return
	}
	c.entered = true
	started := time.Now()
	if h.Method == wire.MethodKeepAlive {
		c.parkMu.Lock()
		c.answered = false
		c.parkMu.Unlock()
		cancel := s.master.DispatchKeepAlive(c.caller, h, body, func(resp any, epoch uint64, err error) {
			c.parkMu.Lock()
			c.answered = true
			c.parkMu.Unlock()
			// Stop watching before the reply goes out: the client may
			// send its next call on a kept stream as soon as it has it.
			cb.unwatch(sb)
			s.reply(c, started, resp, epoch, err)
			s.callDone(c)
		})
		if cancel == nil {
			return // answered
		}
		// Anything more from the client on the stream, or its close or
		// reset, means it is gone or misbehaving: the connection's frame
		// reader ends the call (bytes after a request are charged to the
		// connection until the call ends and the stream closes). The
		// stream is not kept after such an end: what the client sent is
		// unread.
		c.parkMu.Lock()
		if !c.answered {
			// The request is decoded, its frames garbage: a parked
			// KeepAlive holds none of the request budget, so a
			// connection that only carries KeepAlives never stalls on
			// its bytes (budget.go, "Fair shares"). Under parkMu, so the
			// release cannot land on the stream's next call.
			cb.consumed(sb, in.n.Swap(0))
			cb.watchPeer(sb, func() {
				c.broken.Store(true)
				cancel()
			})
		}
		c.parkMu.Unlock()
		if st.Session().IsClosed() {
			// The connection closed while the call parked, maybe after
			// its ConnClosed: end it now rather than at its timer.
			s.master.ConnClosed(c.caller.Conn)
		}
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	var stopWatching func()
	if h.Method == wire.MethodAcquire || h.Method == wire.MethodAuditRead { // calls that may wait long
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			// Any read result but the deadline below means the client
			// is gone or misbehaving (bytes after a request are charged
			// to the connection until the call ends and the stream
			// closes).
			var b [1]byte
			if _, err := in.Read(b[:]); !errors.Is(err, yamux.ErrTimeout) {
				c.broken.Store(true)
			}
			cancel()
		}()
		// Stopped before the reply goes out: the client may send its
		// next call on a kept stream as soon as it has the reply.
		stopWatching = func() {
			st.SetReadDeadline(time.Now()) // unblocks the watcher
			<-watched
			st.SetReadDeadline(time.Time{})
		}
	}
	var resp any
	var epoch uint64
	switch h.Method {
	case wire.MethodCellStatus:
		resp, err = s.cellStatus(ctx, c.caller, body)
	case wire.MethodAuditRead:
		resp, err = s.auditRead(ctx, c.caller, body)
	default:
		resp, epoch, err = s.master.Dispatch(ctx, c.caller, h, body)
	}
	cancel()
	if stopWatching != nil {
		stopWatching()
	}
	body = nil // garbage now: s.reply releases its bytes
	s.reply(c, started, resp, epoch, err)
	s.callDone(c)
}

// reply writes a call's outcome on its stream and counts it in the
// metrics: the request's bytes are released first, so replies never wait
// on requests; a NotMaster says who leads, when that is known.
func (s *Server) reply(c *streamCall, started time.Time, resp any, epoch uint64, err error) {
	st, cb := c.st, c.cb
	defer func() { s.metrics.observe(c.h.Method, wire.CodeOf(err), time.Since(started)) }()
	// The request's frames are garbage now: release their bytes before
	// the reply waits for room, so replies never wait on requests.
	cb.consumed(c.sb, c.in.n.Swap(0))
	status := wire.Status{Code: wire.CodeOf(err), Epoch: epoch}
	if err != nil {
		status.Msg = err.(*wire.Error).Msg
		if status.Code == wire.CodeNotMaster {
			status.Leader = s.leaderHint()
			if status.Leader == s.ClientAddr() {
				if serving, _ := s.master.Serving(); serving {
					// Raft says we lead and the master serves, yet it
					// could not confirm its leadership with a quorum
					// (master/leadership.go): it may be deposed without
					// knowing, as with a stalled disk. Name no leader,
					// so the client looks elsewhere instead of waiting
					// here.
					status.Leader = ""
				} else {
					// Raft says we lead but the master is not serving yet.
					status.Code, status.Msg, status.Leader = wire.CodeUnavailable, "master is starting", ""
				}
			}
		}
		s.writeReply(st, cb, &status, &wire.Empty{})
		return
	}
	if wrote, werr := s.writeReply(st, cb, &status, resp); werr != nil {
		s.log.Debug("write response", "method", c.h.Method, "err", werr)
		if !wrote {
			// Nothing went out: the reply could not be encoded, most
			// likely too large for a frame. Say so instead of closing
			// the stream without a status.
			we := &wire.Error{Code: wire.CodeInternal, Msg: "reply not encoded: " + werr.Error()}
			errors.As(werr, &we)
			err = we // for the metrics
			s.writeReply(st, cb, &wire.Status{Code: we.Code, Msg: we.Msg, Epoch: epoch}, &wire.Empty{})
		}
	}
}

// writeReply writes a call's reply frames once the reply budget has room,
// charging them while they are written, with RequestTimeout to do it. It
// reports whether any byte was handed to the stream. A connection whose
// replies hold the budget and are not read within BufferStall is closed.
func (s *Server) writeReply(st *yamux.Stream, cb *connBudget, vals ...any) (wrote bool, err error) {
	deadline := time.Now().Add(s.limits.RequestTimeout)
	st.SetWriteDeadline(deadline)
	cb.outMu.Lock()
	if err := cb.await(cb.fullOut, &cb.out.used, "replies", deadline); err != nil {
		cb.outMu.Unlock()
		if errors.Is(err, errOverBudget) {
			st.Session().Close()
		}
		return false, err
	}
	w := replyWriter{st: st, cb: cb, locked: true}
	err = wire.WriteMessage(&w, vals...)
	if w.locked {
		cb.outMu.Unlock()
	}
	cb.chargeOut(-w.charged, -w.extra)
	return w.charged > 0, err
}

// replyWriter charges an encoded reply to the reply budget, then lets the
// next reply of the connection be admitted while this one is written.
type replyWriter struct {
	st      *yamux.Stream
	cb      *connBudget
	charged int64
	extra   int64
	locked  bool // holds cb.outMu
}

// Write charges the reply's bytes and the rest of the buffer they were
// encoded into (it grows by doubling, so up to as much again), which stays
// allocated until the write returns.
func (w *replyWriter) Write(b []byte) (int, error) {
	w.cb.chargeOut(int64(len(b)), int64(cap(b)-len(b)))
	w.charged += int64(len(b))
	w.extra += int64(cap(b) - len(b))
	if w.locked {
		w.locked = false
		w.cb.outMu.Unlock()
	}
	return w.st.Write(b)
}

func (s *Server) replyErr(st *yamux.Stream, cb *connBudget, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return // the stream broke; nobody to tell
	}
	s.writeReply(st, cb, &wire.Status{Code: we.Code, Msg: we.Msg}, &wire.Empty{})
}

// leaderHint returns the client address of the replica Raft says leads
// (membership.go: from the member table, so a member added after this
// process started is named too).
func (s *Server) leaderHint() string {
	id, _ := s.rep.Leader()
	if id == "" {
		return ""
	}
	return s.clientAddrOf(id)
}

// Close stops serving clients, steps the master down and shuts the replica
// down (Raft, transport, store). It waits for every goroutine it started.
// A master first hands its leadership over (handOver, bounded by
// HandOverTimeout).
func (s *Server) Close() error {
	s.handOver()
	s.connsMu.Lock()
	if s.closed {
		s.connsMu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.connsMu.Unlock()
	s.cancel()
	s.ln.Close()
	if s.metricsSrv != nil {
		s.metricsSrv.Close()
	}
	s.master.Stop()
	err := s.rep.Close()
	s.wg.Wait()
	s.master.Stop()
	return err
}

// sessionCalls counts each session's calls in flight on one connection.
type sessionCalls struct {
	max int
	mu  sync.Mutex
	n   map[uint64]int
}

// enter admits one more call of session (0, before a session exists,
// counts as one session too), or reports the cap reached.
func (c *sessionCalls) enter(session uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[session] >= c.max {
		return false
	}
	c.n[session]++
	return true
}

func (c *sessionCalls) leave(session uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[session]--; c.n[session] <= 0 {
		delete(c.n, session)
	}
}
