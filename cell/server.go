package cell

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/audit"
	"lockcell/cell/certs"
	"lockcell/cell/clientport"
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
	port    *clientport.Port // the client port: connections, streams, budgets
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closing atomic.Bool

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
		Peers: peers, Timings: cfg.Timings, Logger: cfg.Logger, Transport: cfg.Transport, Join: cfg.Join, LogStore: cfg.LogStore,
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
	cfg.setHistoryLimits(rep.FSM())
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger.With("replica", cfg.Self), rep: rep, ctx: ctx, cancel: cancel}
	if cfg.TLS == nil {
		s.log.Warn("no TLS: every caller is principal " + master.AnonymousPrincipal + ", the admin; do not expose this port")
	} else if cfg.Admin == "" {
		s.log.Info("mutual TLS on: principals are client certificate names; the admin is " + cfg.admin())
	}
	s.master = master.New(master.Config{Cell: cfg.Cell, LeaseTTL: cfg.LeaseTTL, MaxLeaseTTL: cfg.MaxLeaseTTL, KeepAliveTarget: cfg.KeepAliveTarget,
		DefaultLockDelay: cfg.DefaultLockDelay,
		Logger:           s.log, Audit: cfg.auditLogger(), Admin: cfg.admin(), Limits: cfg.SessionLimits,
		ProxyPrincipals: cfg.ProxyPrincipals, Members: cfg.bootstrapMembers()}, rep, rep.FSM())
	s.hashes = &hashGate{interval: cfg.StateHashInterval, now: time.Now}
	if s.hashes.interval <= 0 {
		s.hashes.interval = DefaultStateHashInterval
	}
	s.metrics = newMetrics(s)
	s.port = clientport.New(ln, clientport.Config{Limits: cfg.Limits, TLS: cfg.TLS, Anonymous: master.AnonymousPrincipal,
		Logger: s.log, Observe: s.metrics.observe}, portHandler{s})
	if cfg.MetricsAddr != "" {
		if err := s.serveMetrics(cfg.MetricsAddr); err != nil {
			cancel()
			ln.Close()
			rep.Close()
			return nil, fmt.Errorf("cell: metrics on %s: %w", cfg.MetricsAddr, err)
		}
	}
	s.wg.Add(1)
	go s.monitorLeadership()
	s.port.Serve()
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
func (s *Server) ClientAddr() string { return s.port.Addr().String() }

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
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	s.port.Close()
	s.cancel()
	if s.metricsSrv != nil {
		s.metricsSrv.Close()
	}
	s.master.Stop()
	err := s.rep.Close()
	s.port.Wait()
	s.wg.Wait()
	s.master.Stop()
	return err
}

// ConnStats reports what the client port has refused and what it holds.
func (s *Server) ConnStats() ConnStats { return s.port.Stats() }

// portHandler is what the client port serves: the master's calls, and
// the two the replica answers itself (CellStatus, AuditRead: they read
// the replica, not the master).
type portHandler struct{ s *Server }

func (h portHandler) Call(ctx context.Context, caller clientport.Caller, hd *wire.Header, body []byte) (any, uint64, error) {
	c := master.Caller{Principal: caller.Principal, Conn: caller.Conn}
	switch hd.Method {
	case wire.MethodCellStatus, wire.MethodAuditRead:
		// Answered here, for the principal a trusted proxy names.
		var err error
		if c, err = h.s.master.Behalf(c, hd); err != nil {
			return nil, 0, err
		}
	}
	switch hd.Method {
	case wire.MethodCellStatus:
		resp, err := h.s.cellStatus(ctx, c, body)
		return resp, 0, err
	case wire.MethodAuditRead:
		resp, err := h.s.auditRead(ctx, c, body)
		return resp, 0, err
	case wire.MethodFollowerRead:
		return h.s.master.DispatchFollowerRead(ctx, c, hd, body)
	}
	return h.s.master.Dispatch(ctx, c, hd, body)
}

func (h portHandler) KeepAlive(caller clientport.Caller, hd *wire.Header, body []byte, done func(any, uint64, error)) func() {
	return h.s.master.DispatchKeepAlive(master.Caller{Principal: caller.Principal, Conn: caller.Conn}, hd, body, done)
}

func (h portHandler) ConnClosed(conn uint64) { h.s.master.ConnClosed(conn) }

// NotMaster names the replica Raft says leads. When that is this one:
// with the master serving, it could not confirm its leadership with a
// quorum (master/leadership.go) and may be deposed without knowing, as
// with a stalled disk, so it names no leader and the client looks
// elsewhere instead of waiting here; with the master not serving yet, the
// answer becomes Unavailable "master is starting".
func (h portHandler) NotMaster(st *wire.Status) {
	st.Leader = h.s.leaderHint()
	if st.Leader != h.s.ClientAddr() {
		return
	}
	if serving, _ := h.s.master.Serving(); serving {
		st.Leader = ""
	} else {
		st.Code, st.Msg, st.Leader = wire.CodeUnavailable, "master is starting", ""
	}
}
