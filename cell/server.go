package cell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell/wire"
	"lockcell/master"
	"lockcell/replica"
)

// Limits of the client port.
const (
	// helloTimeout bounds how long a new connection may take to send its
	// protocol byte.
	helloTimeout = 5 * time.Second
	// requestTimeout bounds how long a stream may take to deliver its
	// request once opened.
	requestTimeout = 30 * time.Second
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
	connsMu sync.Mutex
	conns   map[*yamux.Session]struct{}
	closed  bool

	metrics     *metrics
	metricsSrv  *http.Server
	metricsAddr string
}

// Master is the master type served by this package (an alias so that
// callers of cell need not import master).
type Master = master.Server

// New opens the replica and listens on its client address. It does not
// block: Raft elects a master in the background.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	self := cfg.self()
	ln, err := net.Listen("tcp", self.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("cell: listen for clients on %s: %w", self.ClientAddr, err)
	}
	var peers []replica.Peer
	for _, p := range cfg.Peers {
		peers = append(peers, replica.Peer{ID: p.ID, RaftAddr: p.RaftAddr})
	}
	rep, err := replica.Open(replica.Config{ID: cfg.Self, Cell: cfg.Cell, Dir: cfg.Dir, RaftAddr: self.RaftAddr,
		Peers: peers, Timings: cfg.Timings, Logger: cfg.Logger})
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Logger.With("replica", cfg.Self), rep: rep, ln: ln, ctx: ctx, cancel: cancel,
		conns: map[*yamux.Session]struct{}{}}
	s.master = master.New(master.Config{Cell: cfg.Cell, LeaseTTL: cfg.LeaseTTL, DefaultLockDelay: cfg.DefaultLockDelay,
		Logger: s.log}, rep, rep.FSM())
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
		s.wg.Add(1)
		go s.serveConn(conn)
	}
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

func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != wire.RPCMultiplex {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	sess, err := yamux.Server(conn, yamuxConfig())
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
	defer func() {
		s.connsMu.Lock()
		delete(s.conns, sess)
		s.connsMu.Unlock()
		sess.Close()
	}()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.serveStream(st)
	}
}

// serveStream runs one call: request frames in, response frames out. A
// blocking call (KeepAlive, waiting Acquire) is cancelled when the client
// closes or resets its stream.
func (s *Server) serveStream(st *yamux.Stream) {
	defer s.wg.Done()
	defer st.Close()
	st.SetReadDeadline(time.Now().Add(requestTimeout))
	var h wire.Header
	if err := wire.ReadMessage(st, &h); err != nil {
		s.replyErr(st, err)
		return
	}
	body, err := wire.ReadFrame(st)
	if err != nil {
		s.replyErr(st, err)
		return
	}
	st.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if h.Method == wire.MethodKeepAlive || h.Method == wire.MethodAcquire {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			// Any read result means the client is gone or misbehaving.
			var b [1]byte
			st.Read(b[:])
			cancel()
		}()
		defer func() {
			st.SetReadDeadline(time.Now()) // unblocks the watcher
			<-watched
		}()
	}
	var resp any
	var epoch uint64
	started := time.Now()
	defer func() { s.metrics.observe(h.Method, wire.CodeOf(err), time.Since(started)) }()
	if h.Method == wire.MethodCellStatus {
		resp, err = s.cellStatus()
	} else {
		resp, epoch, err = s.master.Dispatch(ctx, master.Caller{Principal: master.AnonymousPrincipal}, &h, body)
	}
	status := wire.Status{Code: wire.CodeOf(err), Epoch: epoch}
	if err != nil {
		status.Msg = err.(*wire.Error).Msg
		if status.Code == wire.CodeNotMaster {
			status.Leader = s.leaderHint()
			if status.Leader == s.ClientAddr() {
				// Raft says we lead but the master is not serving yet.
				status.Code, status.Msg, status.Leader = wire.CodeUnavailable, "master is starting", ""
			}
		}
		wire.WriteMessage(st, &status, &wire.Empty{})
		return
	}
	if err := wire.WriteMessage(st, &status, resp); err != nil {
		s.log.Debug("write response", "method", h.Method, "err", err)
	}
}

func (s *Server) replyErr(st *yamux.Stream, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return // the stream broke; nobody to tell
	}
	wire.WriteMessage(st, &wire.Status{Code: we.Code, Msg: we.Msg}, &wire.Empty{})
}

// leaderHint returns the client address of the replica Raft says leads.
func (s *Server) leaderHint() string {
	id, _ := s.rep.Leader()
	for _, p := range s.cfg.Peers {
		if p.ID == id {
			if p.ID == s.cfg.Self {
				return s.ClientAddr()
			}
			return p.ClientAddr
		}
	}
	return ""
}

func (s *Server) cellStatus() (*wire.CellStatusResponse, error) {
	st := s.rep.Status()
	epoch, sessions, nodes, _ := s.rep.FSM().Counts()
	leaderID, _ := s.rep.Leader()
	out := &wire.CellStatusResponse{Cell: s.cfg.Cell, Self: s.cfg.Self, State: st.State, Epoch: epoch, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Sessions: uint64(sessions), Nodes: uint64(nodes),
		Master: s.leaderHint()}
	for _, p := range s.cfg.Peers {
		out.Replicas = append(out.Replicas, wire.ReplicaStatus{ID: p.ID, ClientAddr: p.ClientAddr, RaftAddr: p.RaftAddr, Master: p.ID == leaderID})
	}
	return out, nil
}

// Close stops serving clients, steps the master down and shuts the replica
// down (Raft, transport, store). It waits for every goroutine it started.
func (s *Server) Close() error {
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
