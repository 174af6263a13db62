package cell

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lockcell/cell/wire"
)

// metrics are one replica's Prometheus metrics, in a registry of its own
// (a dev cell runs five replicas in one process).
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
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
		prometheus.NewGoCollector(),
	)
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	m.reg.MustRegister(
		counter("lockcell_invalidations_sent_total", "Cache invalidations this replica's master sent.",
			func() float64 { return float64(s.master.InvalidationStats().Sent) }),
		counter("lockcell_invalidations_late_total",
			"Invalidations whose write went ahead at the cacher's lease deadline without its acknowledgement.",
			func() float64 { return float64(s.master.InvalidationStats().Late) }),
		counter("lockcell_client_rate_wait_seconds_total",
			"Time client connections' reads waited, added up, because their IP address read faster than its rate limit.",
			func() float64 { return time.Duration(s.budget.slowed.Load()).Seconds() }),
		counter("lockcell_events_dropped_total", "Handle events dropped because a session's queue of unacknowledged events was full.",
			func() float64 { return float64(s.master.InvalidationStats().EventsDropped) }),
	)
	for _, l := range []budgetLevel{levelConn, levelIP, levelProcess} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_over_budget_total",
			Help:        "Client connections closed over a memory budget, by the level that bound (connection, ip, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": l.String()}},
			func() float64 { return float64(s.budget.over[l].Load()) }))
	}
	return m
}

func (m *metrics) observe(method wire.Method, code wire.Code, took time.Duration) {
	name := method.String()
	m.calls.WithLabelValues(name, strconv.Itoa(int(code))).Inc()
	m.duration.WithLabelValues(name).Observe(took.Seconds())
}

// serveMetrics serves /metrics on addr until the server closes.
func (s *Server) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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

// MetricsAddr returns where /metrics is served ("" when off).
func (s *Server) MetricsAddr() string { return s.metricsAddr }
