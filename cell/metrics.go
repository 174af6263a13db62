package cell

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/cell/wire"
	"lockcell/replica"
)

// metrics are one replica's Prometheus metrics, in a registry of its own
// (a dev cell runs five replicas in one process), and the status page's
// rationing (statuspage.go).
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	status   statusGate
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	labels := prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockcell_calls_total",
		Help: "Client calls answered, by method and result code.", ConstLabels: labels}, []string{"method", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lockcell_call_seconds",
		Help:        "Time to answer a client call, by method (KeepAlives include the time parked).",
		ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"method"})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	m.reg.MustRegister(m.calls, m.duration,
		gauge("lockcell_master", "1 while this replica's master serves.", func() float64 {
			if ok, _ := s.IsMaster(); ok {
				return 1
			}
			return 0
		}),
		gauge("lockcell_epoch", "The master epoch in the replicated state.", func() float64 {
			e, _, _, _ := s.rep.FSM().Counts()
			return float64(e)
		}),
		gauge("lockcell_sessions", "Live sessions in the replicated state.", func() float64 {
			_, n, _, _ := s.rep.FSM().Counts()
			return float64(n)
		}),
		gauge("lockcell_nodes", "Files and directories in the namespace.", func() float64 {
			_, _, n, _ := s.rep.FSM().Counts()
			return float64(n)
		}),
		gauge("lockcell_raft_term", "Raft term.", func() float64 { return float64(s.rep.Status().Term) }),
		gauge("lockcell_raft_commit_index", "Raft commit index.", func() float64 { return float64(s.rep.Status().CommitIndex) }),
		gauge("lockcell_raft_applied_index", "Index of the last entry applied to the state machine.", func() float64 {
			return float64(s.rep.Status().AppliedIndex)
		}),
		gauge("lockcell_client_request_bytes", "Request bytes the client port holds: received, not yet served (the request budget).",
			func() float64 { return float64(s.budget.in.used.Load()) }),
		gauge("lockcell_client_reply_bytes", "Reply bytes the client port is writing (the reply budget).",
			func() float64 { return float64(s.budget.out.used.Load()) }),
		gauge("lockcell_lease_seconds", "The session lease each KeepAlive grants now: the configured lease, longer under load (--max-lease).", func() float64 {
			return s.master.Stats().LeaseGranted.Seconds()
		}),
		gauge("lockcell_ready", "1 while /readyz answers 200: a member of the cell with a master it can reach.", func() float64 {
			if ok, _ := s.readiness(); ok {
				return 1
			}
			return 0
		}),
		prometheus.NewGoCollector(),
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
	)
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	m.reg.MustRegister(
		counter("lockcell_invalidations_sent_total", "Cache invalidations this replica's master sent.",
			func() float64 { return float64(s.master.InvalidationStats().Sent) }),
		counter("lockcell_invalidations_acked_total", "Cache invalidations cachers acknowledged to this replica's master.",
			func() float64 { return float64(s.master.InvalidationStats().Acked) }),
		counter("lockcell_leader_changes_total", "Times this replica learned of a new Raft leader (itself included).",
			func() float64 { return float64(s.rep.Stats().LeaderChanges) }),
		counter("lockcell_invalidations_late_total",
			"Invalidations whose write went ahead at the cacher's lease deadline without its acknowledgement.",
			func() float64 { return float64(s.master.InvalidationStats().Late) }),
		counter("lockcell_client_rate_wait_seconds_total",
			"Time client connections' reads waited, added up, because their IP address read faster than its rate limit.",
			func() float64 { return time.Duration(s.budget.slowed.Load()).Seconds() }),
		counter("lockcell_audit_denials_not_logged_total",
			"Permission denials the audit stream did not get because their principal was over its ration of denial lines.",
			func() float64 { return float64(s.master.AuditSuppressed()) }),
		counter("lockcell_events_dropped_total", "Handle events dropped because a session's queue of unacknowledged events was full.",
			func() float64 { return float64(s.master.InvalidationStats().EventsDropped) }),
		// Group commit: commands per entry is what batching saves in log
		// writes and fsyncs; only the replica whose master writes proposes.
		counter("lockcell_group_commit_commands_total", "Commands this replica proposed to the Raft log.",
			func() float64 { return float64(s.rep.GroupCommitStats().Commands) }),
		counter("lockcell_group_commit_entries_total", "Raft entries that carried this replica's proposed commands (one per lone command, one per batch).",
			func() float64 { return float64(s.rep.GroupCommitStats().Entries) }),
		counter("lockcell_group_commit_batches_total", "Raft entries this replica proposed that were batches of commands.",
			func() float64 { return float64(s.rep.GroupCommitStats().Batches) }),
	)
	histogram := func(name, help string, f func() replica.HistogramSnapshot) prometheus.Collector {
		return histogramFunc{desc: prometheus.NewDesc(name, help, nil, labels), read: f}
	}
	m.reg.MustRegister(
		histogram("lockcell_lock_wait_seconds",
			"Time from a blocking Acquire's arrival at this replica's master to its grant (granted acquires only).",
			func() replica.HistogramSnapshot { return s.master.Stats().LockWait }),
		histogram("lockcell_keepalive_lease_left_seconds", "Lease a session had left when its KeepAlive reached this replica's master.",
			func() replica.HistogramSnapshot { return s.master.Stats().LeaseLeft }),
		histogram("lockcell_log_store_seconds", "Time to write one batch of Raft log entries to the store and fsync it.",
			func() replica.HistogramSnapshot { return s.rep.Stats().LogStore }),
		histogram("lockcell_apply_seconds", "Time the state machine took to apply one committed entry.",
			func() replica.HistogramSnapshot { return s.rep.Stats().Apply }),
	)
	for _, l := range []budgetLevel{levelConn, levelIP, levelProcess} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_over_budget_total",
			Help:        "Client connections closed over a memory budget, by the level that bound (connection, ip, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": l.String()}},
			func() float64 { return float64(s.budget.over[l].Load()) }))
	}
	// Fair shares of the request budget and the caps on streams (budget.go).
	m.reg.MustRegister(
		gauge("lockcell_client_request_held_bytes",
			"Request bytes the client port holds with the memory of the buffers that hold them: what the request budget (--max-buffer, then --buffer-reserve) counts.",
			func() float64 { return float64(s.budget.in.held()) }),
		counter("lockcell_client_reserve_reads_total",
			"Reads from client connections admitted into --buffer-reserve, past a full request budget, because their address and principal held less than their fair shares.",
			func() float64 { return float64(s.budget.reserveReads.Load()) }),
		gauge("lockcell_client_streams", "Client streams open: calls in flight, parked calls and kept streams (--max-streams).",
			func() float64 { return float64(s.budget.streams.Load()) }),
		gauge("lockcell_client_streams_kept", "Kept client streams waiting for their next call (counted in lockcell_client_streams).",
			func() float64 { return float64(s.budget.kept.Load()) }),
	)
	for _, l := range []budgetLevel{levelConn, levelIP, levelPrincipal, levelProcess} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_streams_refused_total",
			Help:        "Client streams refused at accept (answered too many, unread), by the cap reached (connection, ip, principal, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": l.String()}},
			func() float64 { return float64(s.budget.refusedStreams[l].Load()) }))
	}
	return m
}

func (m *metrics) observe(method wire.Method, code wire.Code, took time.Duration) {
	name := method.String()
	m.calls.WithLabelValues(name, strconv.Itoa(int(code))).Inc()
	m.duration.WithLabelValues(name).Observe(took.Seconds())
}

// histogramFunc exposes a replica.Histogram, read at each scrape, as a
// Prometheus histogram (the buckets are replica.HistogramBound's).
type histogramFunc struct {
	desc *prometheus.Desc
	read func() replica.HistogramSnapshot
}

func (h histogramFunc) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

func (h histogramFunc) Collect(ch chan<- prometheus.Metric) {
	snap := h.read()
	buckets := make(map[float64]uint64, replica.HistogramBuckets)
	for i, n := range snap.Buckets {
		buckets[replica.HistogramBound(i).Seconds()] = n
	}
	ch <- prometheus.MustNewConstHistogram(h.desc, snap.Count, snap.Sum.Seconds(), buckets)
}

// serveMetrics serves the HTTP port on addr until the server closes:
// /metrics, /healthz, /readyz, the status page and, with Config.Pprof,
// /debug/pprof/ (http.go).
func (s *Server) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	s.metricsSrv = srv
	s.metricsAddr = ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("metrics server stopped", "err", err)
		}
	}()
	return nil
}

// MetricsAddr returns the address of the HTTP port, where /metrics,
// /healthz, /readyz and the status page are served ("" when off).
func (s *Server) MetricsAddr() string { return s.metricsAddr }
