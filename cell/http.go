package cell

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The replica's HTTP port (Config.MetricsAddr) is for operators and their
// tools: liveness and readiness probes, Prometheus metrics, a status page
// and, when asked for, Go's profiler. It has no authentication: it names
// principals, sessions and locks, so it belongs on loopback or an
// operators' network, never next to the client port on a public one.

// httpHandler routes the HTTP port. Unknown paths, and /debug/pprof/
// without Config.Pprof, answer 404.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.serveHealthz)
	mux.HandleFunc("GET /readyz", s.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /{$}", s.serveStatusPage)
	mux.HandleFunc("GET /status.json", s.serveStatusJSON)
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// serveHealthz answers 200 while the process serves HTTP at all: a
// liveness probe. It says nothing about the cell (see /readyz), so that a
// replica waiting for a quorum is not restarted for it.
func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "ok")
}

// serveReadyz answers 200 when the replica is ready to serve its part
// (readiness), 503 with the reason otherwise.
func (s *Server) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	ready, why := s.readiness()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, why)
}

// readiness reports whether this replica is a member of its cell with a
// master it can reach: it is the serving master (and Raft still has it
// lead), or it follows a leader it heard from within two heartbeat
// timeouts. A follower cut off from the leader loses it within about a
// heartbeat timeout (Raft forgets the leader when it stands for
// election), so a replica without a quorum turns not-ready within
// seconds. The reason is a short line for people and probes' logs.
func (s *Server) readiness() (bool, string) {
	if s.ctx.Err() != nil {
		return false, "shutting down"
	}
	member := false
	for _, m := range s.rep.Members() {
		member = member || m.ID == s.cfg.Self
	}
	if !member {
		return false, fmt.Sprintf("replica %s is not a member of the cell's Raft configuration", s.cfg.Self)
	}
	if serving, epoch := s.master.Serving(); serving && s.rep.IsLeader() {
		return true, fmt.Sprintf("ready: the serving master (epoch %d)", epoch)
	}
	leader, _ := s.rep.Leader()
	switch {
	case leader == "":
		return false, "no master known: an election is under way or this replica cannot reach a quorum"
	case leader == s.cfg.Self:
		return false, "Raft leader, but the master is not serving yet"
	}
	last := s.rep.LastLeaderContact()
	if bound := 2 * s.rep.HeartbeatTimeout(); last.IsZero() || time.Since(last) > bound {
		return false, fmt.Sprintf("no word from master %s for over %v", leader, bound)
	}
	return true, fmt.Sprintf("ready: following master %s", leader)
}
