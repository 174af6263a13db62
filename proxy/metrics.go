package proxy

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lockcell/wire"
)

// metrics are a proxy's Prometheus metrics. The counters and histograms
// are bumped where things happen (a forwarded call, a client KeepAlive
// answered, a batch) with an atomic add and no allocation; the gauges
// read the proxy's state once a scrape (metricsCollector).
type metrics struct {
	batches, batchFailures prometheus.Counter
	batchSeconds           prometheus.Histogram
	batchSessions          prometheus.Histogram
	// keepAlives counts client KeepAlives answered; kaLease, kaNoLease
	// and kaEnded are its series: with a lease, NotMaster for want of a
	// fresh one, and with the end of their session.
	keepAlives                  *prometheus.CounterVec
	kaLease, kaNoLease, kaEnded prometheus.Counter
	masterChanges               prometheus.Counter
	calls                       *prometheus.CounterVec
	// cacheReads counts the read cache's doings (readcache.go): hit
	// (a read answered from it), fill (an answer stored), invalidated (a
	// name the master invalidated), reported (a client served a name
	// as cacheable, reported with its invalidation and accepted).
	cacheReads *prometheus.CounterVec
}

func newMetrics() *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	ka := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockcell_proxy_keepalives_total",
		Help: "Client KeepAlives the proxy answered, by result: lease (the lease it keeps, with any events), " +
			"no_lease (NotMaster: it had no fresh lease from the master for the session), " +
			"ended (the session expired, was closed or resumed elsewhere)."}, []string{"result"})
	cache := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockcell_proxy_cache_total",
		Help: "The read cache (--cache-reads), by what happened: hit (a read answered from it), miss (a read forwarded), " +
			"fill (a master's answer stored), invalidated (a name the master invalidated to it), reported (a client it served " +
			"a name as cacheable, reported to the master with the name's invalidation)."}, []string{"what"})
	for _, w := range []string{"hit", "miss", "fill", "invalidated", "reported"} {
		cache.WithLabelValues(w) // exported from the start, at 0
	}
	return &metrics{
		batches: counter("lockcell_proxy_batches_total",
			"BatchKeepAlive calls the proxy sent to the master (each carries up to 1,024 sessions' KeepAlives)."),
		batchFailures: counter("lockcell_proxy_batch_failures_total",
			"BatchKeepAlive calls that failed: no master reachable, a lost connection, or an answer that did not fit the request."),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lockcell_proxy_batch_seconds",
			Help: "Time a BatchKeepAlive answered OK took besides the time the master held it on purpose " +
				"(up to half a lease): the network, the master's queueing and its proof of leadership.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		batchSessions: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lockcell_proxy_batch_sessions",
			Help:    "Sessions carried by each BatchKeepAlive sent.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		keepAlives: ka,
		kaLease:    ka.WithLabelValues("lease"),
		kaNoLease:  ka.WithLabelValues("no_lease"),
		kaEnded:    ka.WithLabelValues("ended"),
		masterChanges: counter("lockcell_proxy_master_changes_total",
			"Times the proxy found a new master term (a higher epoch) after the first it served through."),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockcell_proxy_calls_total",
			Help: "Client calls the proxy forwarded to the master, by method and the code its client got " +
				"(unavailable: no master reachable; canceled: the client left)."}, []string{"method", "code"}),
		cacheReads: cache,
	}
}

// register adds the proxy's metrics to reg: the counters above and the
// gauges read at each scrape.
func (m *metrics) register(reg prometheus.Registerer, p *Proxy) error {
	for _, c := range []prometheus.Collector{m.batches, m.batchFailures, m.batchSeconds, m.batchSessions,
		m.keepAlives, m.masterChanges, m.calls, m.cacheReads, metricsCollector{p}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// call counts one forwarded call by its method and the code its client
// got, as the replicas' lockcell_calls_total does; a known method and
// code cost a label lookup and an atomic add, no allocation
// (TestCallMetricAllocatesNothing).
func (m *metrics) call(method wire.Method, code wire.Code) {
	m.calls.WithLabelValues(method.String(), code.Name()).Inc()
}

var (
	sessionsDesc = prometheus.NewDesc("lockcell_proxy_sessions",
		"Sessions whose KeepAlives the proxy answers (a departed client's is forgotten within two leases).", nil, nil)
	leasesDesc = prometheus.NewDesc("lockcell_proxy_session_leases",
		"Sessions whose client is present (a KeepAlive waiting, or heard within half a lease), by the proxy's lease "+
			"for them: fresh (a quarter lease or more to run), stale (its client gets NotMaster and goes into jeopardy), "+
			"or new (no lease from the master yet: its first batch is on its way).",
		[]string{"state"}, nil)
	hasMasterDesc = prometheus.NewDesc("lockcell_proxy_has_master",
		"1 while the proxy has a master: its last probe (every second) found one serving, over a connection still open.", nil, nil)
	readyDesc = prometheus.NewDesc("lockcell_proxy_ready",
		"1 while /readyz answers 200: a master, and a fresh lease for one of its present clients' sessions at least "+
			"(when it has some that had a lease).", nil, nil)
	epochDesc = prometheus.NewDesc("lockcell_proxy_epoch",
		"The highest master epoch the proxy has seen (0 before any).", nil, nil)
	inFlightDesc = prometheus.NewDesc("lockcell_proxy_batches_in_flight",
		"BatchKeepAlive calls sent and not yet answered (each held at the master up to half a lease).", nil, nil)
	connsDesc = prometheus.NewDesc("lockcell_proxy_client_connections",
		"Client connections the proxy holds.", nil, nil)
	streamsDesc = prometheus.NewDesc("lockcell_proxy_client_streams",
		"Client streams open at the proxy (calls in flight, parked KeepAlives, kept streams).", nil, nil)
	connsRefusedDesc = prometheus.NewDesc("lockcell_proxy_client_connections_refused_total",
		"Client connections refused at once or after their handshake by a cap (per IP, per principal, in all, the "+
			"file-descriptor share), or dropped in their handshake.", []string{"reason"}, nil)
	streamsRefusedDesc = prometheus.NewDesc("lockcell_proxy_client_streams_refused_total",
		"Client calls answered too_many because a cap on streams or on a session's calls was reached.", nil, nil)
	// Why a proxy reads a client slowly or closes it: the client port's
	// budgets, as a replica's lockcell_client_* metrics show them.
	keptStreamsDesc = prometheus.NewDesc("lockcell_proxy_client_streams_kept",
		"Kept client streams waiting for their next call (counted in lockcell_proxy_client_streams).", nil, nil)
	keptRefusedDesc = prometheus.NewDesc("lockcell_proxy_client_kept_streams_refused_total",
		"Client streams closed after their call instead of kept idle, over --max-kept-streams-per-ip, -per-principal or --max-kept-streams.", nil, nil)
	requestHeldDesc = prometheus.NewDesc("lockcell_proxy_client_request_held_bytes",
		"Request bytes the proxy's client port holds, with the memory of the buffers that hold them (what --max-buffer counts).", nil, nil)
	overBudgetDesc = prometheus.NewDesc("lockcell_proxy_client_over_budget_total",
		"Client connections closed over a memory budget, by the level that bound (connection, ip, process).", []string{"level"}, nil)
	rateWaitDesc = prometheus.NewDesc("lockcell_proxy_client_rate_wait_seconds_total",
		"Time client connections' reads waited, added up, because their IP address read faster than --max-ip-rate.", nil, nil)
)

// metricsCollector reads the proxy's state at each scrape: one walk of
// its sessions under the keeper's lock, and the client port's figures.
type metricsCollector struct{ p *Proxy }

func (c metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sessionsDesc, leasesDesc, hasMasterDesc, readyDesc, epochDesc, inFlightDesc,
		connsDesc, streamsDesc, connsRefusedDesc, streamsRefusedDesc, keptStreamsDesc, keptRefusedDesc, requestHeldDesc,
		overBudgetDesc, rateWaitDesc} {
		ch <- d
	}
}

func (c metricsCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	now := time.Now()
	n := p.ka.leases(now)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(sessionsDesc, float64(n.Held))
	gauge(leasesDesc, float64(n.Fresh), "fresh")
	gauge(leasesDesc, float64(n.Stale), "stale")
	gauge(leasesDesc, float64(n.New), "new")
	hasMaster, why := p.up.hasMaster()
	gauge(hasMasterDesc, b2f(hasMaster))
	ready, _ := p.readiness(hasMaster, why, n)
	gauge(readyDesc, b2f(ready))
	gauge(epochDesc, float64(p.up.epoch.Load()))
	gauge(inFlightDesc, float64(p.ka.inFlight.Load()))
	st := p.port.Stats()
	gauge(connsDesc, float64(st.Conns))
	gauge(streamsDesc, float64(st.Streams))
	counter(connsRefusedDesc, st.RefusedPerIP, "per_ip")
	counter(connsRefusedDesc, st.RefusedPerPrincipal, "per_principal")
	counter(connsRefusedDesc, st.RefusedTotal, "total")
	counter(connsRefusedDesc, st.RefusedFDShare, "fd_share")
	counter(connsRefusedDesc, st.FailedHandshakes, "handshake")
	counter(streamsRefusedDesc, st.RefusedStreams)
	gauge(keptStreamsDesc, float64(st.StreamsKept))
	counter(keptRefusedDesc, st.KeptStreamsRefused)
	gauge(requestHeldDesc, float64(st.RequestHeld))
	counter(overBudgetDesc, st.OverBudgetConn, "connection")
	counter(overBudgetDesc, st.OverBudgetIP, "ip")
	counter(overBudgetDesc, st.OverBudgetProcess, "process")
	ch <- prometheus.MustNewConstMetric(rateWaitDesc, prometheus.CounterValue, st.RateWait.Seconds())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// HTTPHandler serves the proxy's HTTP port: GET /metrics (what g
// gathers: the registry given as Config.Metrics, with whatever the
// caller added to it), /healthz (200 while the proxy serves, 503 once it
// is closing) and /readyz (200 while it can serve its clients, else 503
// saying why: Ready).
func (p *Proxy) HTTPHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if p.ctx.Err() != nil {
			http.Error(w, "closing", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := p.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}
