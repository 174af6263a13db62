package cell

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lockcell/cell/certs"
	"lockcell/master"
)

// The replica's HTTP port (Config.MetricsAddr) is for operators and their
// tools: liveness and readiness probes, Prometheus metrics, a status page
// and, when asked for, Go's profiler. /healthz, /readyz and /metrics are
// open to every caller and carry no names. The status page and
// /status.json name locks, principals and client names, so they show them
// only to a caller the cell can authenticate, and only what its principal
// may read (statusFor); the profiler is the admin's. On a TLS cell the
// port speaks TLS and a caller's identity is its user certificate, as on
// the client port (httpport.go); on a plain cell every caller is
// AnonymousPrincipal, as on the client port, and the port is loopback
// only (Config.Validate).

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
		mux.HandleFunc("/debug/pprof/", s.adminOnly(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", s.adminOnly(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", s.adminOnly(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", s.adminOnly(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", s.adminOnly(pprof.Trace))
	}
	return mux
}

// httpPrincipal is the principal of an HTTP caller: on a TLS cell the
// Common Name of the user certificate it presented ("" without one: not
// authenticated), on a plain cell AnonymousPrincipal, as on the client
// port.
func (s *Server) httpPrincipal(r *http.Request) string {
	if s.cfg.TLS == nil {
		return master.AnonymousPrincipal
	}
	p, err := certs.PrincipalOf(r.TLS)
	if err != nil {
		return ""
	}
	return p
}

// adminOnly serves h to the cell's admin alone: a profile costs the
// process CPU and shows its internals.
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p := s.httpPrincipal(r); p == "" || p != s.cfg.admin() {
			http.Error(w, "the profiler is the cell admin's: present the admin's client certificate", http.StatusForbidden)
			return
		}
		h(w, r)
	}
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
