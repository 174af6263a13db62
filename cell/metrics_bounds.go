package cell

import (
	"github.com/prometheus/client_golang/prometheus"

	"lockcell/fsm"
)

// boundMetrics show how full the master's process-wide caps are, so an
// operator sees a cap being reached before callers are refused.
func boundMetrics(s *Server, labels prometheus.Labels) []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	return []prometheus.Collector{
		gauge("lockcell_backups_in_flight", "Backups this replica's master is building or holds for paging (at most --max-backups).",
			func() float64 { return float64(s.master.BackupsInFlight()) }),
		gauge("lockcell_handles", "Open handles in the replicated state (at most --max-handles).", func() float64 {
			var n int
			_ = s.rep.FSM().Read(func(v fsm.View) error { n = v.Handles(); return nil })
			return float64(n)
		}),
	}
}
