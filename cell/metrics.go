package cell

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/fsm"
	"lockcell/master"
	"lockcell/wire"
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
		Help: "Client calls answered, by method and result code (the code's machine name: ok, not_found, quota_exceeded, ...).", ConstLabels: labels}, []string{"method", "code"})
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
			func() float64 { return float64(s.port.Stats().RequestBytes) }),
		gauge("lockcell_client_reply_bytes", "Reply bytes the client port is writing (the reply budget).",
			func() float64 { return float64(s.port.Stats().ReplyBytes) }),
		gauge("lockcell_event_queue_bytes", "Estimated master memory of every session's queued, unacknowledged events (the event budget, --max-event-bytes).",
			func() float64 { return float64(s.master.EventStats().QueuedBytes) }),
		gauge("lockcell_event_fanout_backlog", "Applied changes waiting for the master's fan-out to turn them into handle events.",
			func() float64 { return float64(s.master.EventStats().FanoutBacklog) }),
		gauge("lockcell_lease_seconds", "The session lease each KeepAlive grants now: the configured lease, longer under load (--max-lease).", func() float64 {
			return s.master.Stats().LeaseGranted.Seconds()
		}),
		gauge("lockcell_cache_registrations", "Cacher registrations this replica's master holds (a session and a name it may have cached; --max-cache-registrations).",
			func() float64 { return float64(s.master.InvalidationStats().Registrations) }),
		gauge("lockcell_cache_registrations_peak", "The most cacher registrations this replica's master held at once.",
			func() float64 { return float64(s.master.InvalidationStats().RegistrationsPeak) }),
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
		counter("lockcell_sessions_idle_closed_total",
			"Sessions this replica's master closed for idleness: no open handle and no call but KeepAlives for --idle-session-timeout.",
			func() float64 { return float64(s.master.Stats().IdleClosed) }),
		counter("lockcell_sessions_idle_drains_total",
			"Idle sessions whose lease this replica's master stopped extending, to close them once it ran out; a drain ends in an idle close or in the session's use again.",
			func() float64 { return float64(s.master.Stats().IdleDrains) }),
		counter("lockcell_leader_changes_total", "Times this replica learned of a new Raft leader (itself included).",
			func() float64 { return float64(s.rep.Stats().LeaderChanges) }),
		counter("lockcell_invalidations_late_total",
			"Invalidations whose write went ahead at the cacher's lease deadline without its acknowledgement.",
			func() float64 { return float64(s.master.InvalidationStats().Late) }),
		counter("lockcell_client_rate_wait_seconds_total",
			"Time client connections' reads waited, added up, because their IP address read faster than its rate limit.",
			func() float64 { return s.port.Stats().RateWait.Seconds() }),
		counter("lockcell_audit_denials_not_logged_total",
			"Permission denials the audit stream did not get because their principal was over its ration of denial lines.",
			func() float64 { return float64(s.master.AuditSuppressed()) }),
		counter("lockcell_cache_registrations_refused_total",
			"Reads answered uncacheable because a cap on cacher registrations (per principal or for the process) was reached.",
			func() float64 { return float64(s.master.InvalidationStats().RegistrationsRefused) }),
		counter("lockcell_cache_bars_total",
			"Principals barred from caching: their cachers held writes past the grace for their whole budget, or ignored a delivered invalidation.",
			func() float64 { return float64(s.master.InvalidationStats().Bars) }),
		counter("lockcell_cache_hold_seconds_total",
			"Time writes waited on cachers past the grace for their acknowledgement, charged to their principals, added up.",
			func() float64 { return s.master.InvalidationStats().HoldCharged.Seconds() }),
		counter("lockcell_events_dropped_total", "Handle events dropped into an overflow event because a session's queue of unacknowledged events, or an event byte budget, was full.",
			func() float64 { return float64(s.master.InvalidationStats().EventsDropped) }),
		counter("lockcell_event_fanout_lost_total", "Applied changes the master's fan-out could not keep (its backlog was full); their watchers were sent an overflow event.",
			func() float64 { return float64(s.master.EventStats().FanoutLost) }),
		// Group commit: commands per entry is what batching saves in log
		// writes and fsyncs; only the replica whose master writes proposes.
		counter("lockcell_group_commit_commands_total", "Commands this replica proposed to the Raft log.",
			func() float64 { return float64(s.rep.GroupCommitStats().Commands) }),
		counter("lockcell_group_commit_entries_total", "Raft entries that carried this replica's proposed commands (one per lone command, one per batch).",
			func() float64 { return float64(s.rep.GroupCommitStats().Entries) }),
		counter("lockcell_group_commit_batches_total", "Raft entries this replica proposed that were batches of commands.",
			func() float64 { return float64(s.rep.GroupCommitStats().Batches) }),
	)
	histogram := func(name, help string, f func() fsm.HistogramSnapshot) prometheus.Collector {
		return histogramFunc{desc: prometheus.NewDesc(name, help, nil, labels), read: f}
	}
	m.reg.MustRegister(
		histogram("lockcell_lock_wait_seconds",
			"Time from a blocking Acquire's arrival at this replica's master to its grant (granted acquires only).",
			func() fsm.HistogramSnapshot { return s.master.Stats().LockWait }),
		histogram("lockcell_keepalive_lease_left_seconds", "Lease a session had left when its KeepAlive reached this replica's master.",
			func() fsm.HistogramSnapshot { return s.master.Stats().LeaseLeft }),
		histogram("lockcell_log_store_seconds", "Time to write one batch of Raft log entries to the store and fsync it.",
			func() fsm.HistogramSnapshot { return s.rep.Stats().LogStore }),
		histogram("lockcell_apply_seconds", "Time the state machine took to apply one committed entry.",
			func() fsm.HistogramSnapshot { return s.rep.Stats().Apply }),
	)
	m.reg.MustRegister(newQuotaCollector(s, labels))
	m.reg.MustRegister(opsCollectors(s, labels)...)
	for level, read := range map[string]func(master.EventStats) uint64{
		"principal": func(st master.EventStats) uint64 { return st.OverPrincipal },
		"process":   func(st master.EventStats) uint64 { return st.OverProcess },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_events_over_budget_total",
			Help:        "Handle events dropped into an overflow event because an event byte budget was full, by the budget that bound (principal, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": level}},
			func() float64 { return float64(read(s.master.EventStats())) }))
	}
	// The HTTP port's connections (httpport.go): counts only, no names
	// or addresses, like every metric here.
	m.reg.MustRegister(
		gauge("lockcell_http_connections", "Open connections to the HTTP port (this one).",
			func() float64 { return float64(s.HTTPStats().Open) }),
		gauge("lockcell_http_connections_limit", "The HTTP port's cap on open connections in force (--http-max-conns, at most an eighth of the file-descriptor limit).",
			func() float64 { return float64(s.HTTPStats().MaxConns) }))
	for i, reason := range httpRefusalNames {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_http_connections_refused_total",
			Help: "HTTP connections reset at accept, by the cap that was full: per_ip (--http-max-conns-per-ip), " +
				"total (--http-max-conns), fd_share (the process's HTTP ports at an eighth of its file descriptors).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "reason": reason}},
			func() float64 {
				st := s.HTTPStats()
				return float64([httpRefusedReasons]uint64{st.RefusedPerIP, st.RefusedTotal, st.RefusedFDShare}[i])
			}))
	}
	m.reg.MustRegister(boundMetrics(s, labels)...)
	for level, read := range map[string]func(ConnStats) uint64{
		"connection": func(st ConnStats) uint64 { return st.OverBudgetConn },
		"ip":         func(st ConnStats) uint64 { return st.OverBudgetIP },
		"process":    func(st ConnStats) uint64 { return st.OverBudgetProcess },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_over_budget_total",
			Help:        "Client connections closed over a memory budget, by the level that bound (connection, ip, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": level}},
			func() float64 { return float64(read(s.port.Stats())) }))
	}
	// Fair shares of the request budget and the caps on streams (clientport's budget.go).
	m.reg.MustRegister(
		gauge("lockcell_client_request_held_bytes",
			"Request bytes the client port holds with the memory of the buffers that hold them: what the request budget (--max-buffer, then --buffer-reserve) counts.",
			func() float64 { return float64(s.port.Stats().RequestHeld) }),
		counter("lockcell_client_reserve_reads_total",
			"Reads from client connections admitted into --buffer-reserve, past a full request budget, because their address and principal held less than their fair shares.",
			func() float64 { return float64(s.port.Stats().ReserveReads) }),
		gauge("lockcell_client_streams", "Client streams open: calls in flight, parked calls and kept streams (--max-streams).",
			func() float64 { return float64(s.port.Stats().Streams) }),
		gauge("lockcell_client_streams_kept", "Kept client streams waiting for their next call (counted in lockcell_client_streams).",
			func() float64 { return float64(s.port.Stats().StreamsKept) }),
		counter("lockcell_client_kept_streams_refused_total", "Client streams closed after their call instead of kept idle, over --max-kept-streams-per-ip, -per-principal or --max-kept-streams.",
			func() float64 { return float64(s.port.Stats().KeptStreamsRefused) }),
	)
	for level, read := range map[string]func(ConnStats) uint64{
		"connection": func(st ConnStats) uint64 { return st.StreamsRefusedConn },
		"ip":         func(st ConnStats) uint64 { return st.StreamsRefusedIP },
		"principal":  func(st ConnStats) uint64 { return st.StreamsRefusedPrincipal },
		"process":    func(st ConnStats) uint64 { return st.StreamsRefusedProcess },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_streams_refused_total",
			Help:        "Client streams refused at accept (answered too many, unread), by the cap reached (connection, ip, principal, process).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "level": level}},
			func() float64 { return float64(read(s.port.Stats())) }))
	}
	// The client port's connections (clientport's connlimits.go).
	m.reg.MustRegister(gauge("lockcell_client_connections", "Client connections this replica holds (--max-conns).",
		func() float64 { return float64(s.port.Stats().Conns) }))
	for reason, read := range map[string]func(ConnStats) uint64{
		"per_ip":        func(st ConnStats) uint64 { return st.RefusedPerIP },
		"total":         func(st ConnStats) uint64 { return st.RefusedTotal },
		"fd_share":      func(st ConnStats) uint64 { return st.RefusedFDShare },
		"per_principal": func(st ConnStats) uint64 { return st.RefusedPerPrincipal },
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockcell_client_connections_refused_total",
			Help: "Client connections refused (told why with a refusal frame, then closed) by the cap that was full: per_ip (--max-conns-per-ip), total (--max-conns), " +
				"fd_share (the process's client ports at five eighths of its file descriptors), per_principal (--max-conns-per-principal, after the TLS handshake).",
			ConstLabels: prometheus.Labels{"cell": s.cfg.Cell, "replica": s.cfg.Self, "reason": reason}},
			func() float64 { return float64(read(s.port.Stats())) }))
	}
	return m
}

func (m *metrics) observe(method wire.Method, code wire.Code, took time.Duration) {
	name := method.String()
	m.calls.WithLabelValues(name, code.Name()).Inc()
	m.duration.WithLabelValues(name).Observe(took.Seconds())
}

// histogramFunc exposes a replica.Histogram, read at each scrape, as a
// Prometheus histogram (the buckets are replica.HistogramBound's).
type histogramFunc struct {
	desc *prometheus.Desc
	read func() fsm.HistogramSnapshot
}

func (h histogramFunc) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

func (h histogramFunc) Collect(ch chan<- prometheus.Metric) {
	snap := h.read()
	buckets := make(map[float64]uint64, fsm.HistogramBuckets)
	for i, n := range snap.Buckets {
		buckets[fsm.HistogramBound(i).Seconds()] = n
	}
	ch <- prometheus.MustNewConstHistogram(h.desc, snap.Count, snap.Sum.Seconds(), buckets)
}

// quotaCollector exposes what the namespace quotas count, from one
// replica.QuotaStats a scrape: the cell's totals, the largest counts of
// one principal (the admin, which no per-principal quota holds, left
// out), and the refusals by quota; with the cell's two quotas and how
// full each is. Counts per principal would be a label per principal,
// unbounded, so only the largest is shown: the one nearest its share.
type quotaCollector struct {
	read                                        func() fsm.QuotaStats
	contentBytes, maxNodes, maxContent, refused *prometheus.Desc
	// The cell's quotas as this replica's master enforces them (the
	// configured ones, or their defaults).
	nodesQuota                      int
	contentBytesQuota               int64
	nodesLimit, contentLimit, ratio *prometheus.Desc
}

func newQuotaCollector(s *Server, labels prometheus.Labels) quotaCollector {
	admin := s.cfg.admin()
	nodes, content := s.cfg.SessionLimits.Nodes, s.cfg.SessionLimits.ContentBytes
	if nodes <= 0 {
		nodes = DefaultSessionLimits.Nodes
	}
	if content <= 0 {
		content = DefaultSessionLimits.ContentBytes
	}
	return quotaCollector{
		nodesQuota: nodes, contentBytesQuota: content,
		nodesLimit: prometheus.NewDesc("lockcell_nodes_limit",
			"The cell's node quota (--max-nodes), the admin's reserve included: files and directories below the root.", nil, labels),
		contentLimit: prometheus.NewDesc("lockcell_content_bytes_limit",
			"The cell's content quota (--max-content-bytes), the admin's reserve included.", nil, labels),
		ratio: prometheus.NewDesc("lockcell_quota_used_ratio",
			"How full a cell-wide quota is, 0 to 1: nodes below the root over --max-nodes, or content bytes over --max-content-bytes. "+
				"Principals other than the admin are refused when they would fill the admin's reserve, a little before 1.",
			[]string{"quota"}, labels),
		read: func() fsm.QuotaStats { return s.rep.FSM().QuotaStats(admin) },
		contentBytes: prometheus.NewDesc("lockcell_content_bytes",
			"Bytes of all files' contents in the namespace (the content quota's count).", nil, labels),
		maxNodes: prometheus.NewDesc("lockcell_principal_max_nodes",
			"Existing nodes created by the principal that created the most, the admin left out (the per-principal node quota's count).", nil, labels),
		maxContent: prometheus.NewDesc("lockcell_principal_max_content_bytes",
			"Contents of the files created by the principal whose files hold the most, the admin left out (the per-principal content quota's count).", nil, labels),
		refused: prometheus.NewDesc("lockcell_quota_refusals_total",
			"Creates and writes this replica's state machine refused since it started, by the quota they met (every replica applies every command).",
			[]string{"quota"}, labels),
	}
}

func (q quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.contentBytes
	ch <- q.maxNodes
	ch <- q.maxContent
	ch <- q.refused
	ch <- q.nodesLimit
	ch <- q.contentLimit
	ch <- q.ratio
}

func (q quotaCollector) Collect(ch chan<- prometheus.Metric) {
	st := q.read()
	ch <- prometheus.MustNewConstMetric(q.contentBytes, prometheus.GaugeValue, float64(st.ContentBytes))
	ch <- prometheus.MustNewConstMetric(q.maxNodes, prometheus.GaugeValue, float64(st.MaxPrincipalNodes))
	ch <- prometheus.MustNewConstMetric(q.maxContent, prometheus.GaugeValue, float64(st.MaxPrincipalContentBytes))
	ch <- prometheus.MustNewConstMetric(q.nodesLimit, prometheus.GaugeValue, float64(q.nodesQuota))
	ch <- prometheus.MustNewConstMetric(q.contentLimit, prometheus.GaugeValue, float64(q.contentBytesQuota))
	ch <- prometheus.MustNewConstMetric(q.ratio, prometheus.GaugeValue, float64(st.Nodes)/float64(q.nodesQuota), "nodes")
	ch <- prometheus.MustNewConstMetric(q.ratio, prometheus.GaugeValue, float64(st.ContentBytes)/float64(q.contentBytesQuota), "content_bytes")
	for r, n := range st.Refusals {
		ch <- prometheus.MustNewConstMetric(q.refused, prometheus.CounterValue, float64(n), fsm.QuotaReason(r).String())
	}
}
