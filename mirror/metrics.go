package mirror

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/client"
)

// sourceSlack is how long the source watch may go unheard before the lag
// counts the silence: a quiet watch answers every
// client.SubtreeProgressEvery, so past twice that it is not quiet but cut
// off, and changes may be waiting that the mirror cannot see.
const sourceSlack = 2 * client.SubtreeProgressEvery

// TargetStatus is one target's state.
type TargetStatus struct {
	Target string
	// Lag is the age of the oldest change not yet applied to the target
	// (0 when it is up to date), measured from when the mirror heard of
	// it; while the source watch has been unheard for longer than
	// sourceSlack (twice client.SubtreeProgressEvery), at least that
	// silence beyond the slack.
	Lag time.Duration
	// Pending counts the changed names waiting (the one being applied
	// included); Resyncing says a full re-sync is asked for or running.
	Pending   int
	Resyncing bool
	// Synced says a full copy has completed at least once.
	Synced bool
	// Resyncs counts full re-syncs asked for, by reason (Reason*).
	Resyncs map[string]uint64
	// Applied counts changes applied.
	Applied uint64
	// LastError is the last failed step's error ("" after a success).
	LastError string
}

// Status returns every target's state, in Config.To's order.
func (m *Mirror) Status() []TargetStatus {
	now := m.cfg.Now()
	silence := m.silence(now)
	out := make([]TargetStatus, 0, len(m.targets))
	for _, t := range m.targets {
		st := TargetStatus{Target: t.name}
		if o, ok := t.oldest(); ok {
			st.Lag = max(now.Sub(o), 0)
		}
		st.Lag = max(st.Lag, silence)
		t.mu.Lock()
		st.Pending = len(t.queue)
		if t.inflight != "" {
			st.Pending++
		}
		st.Resyncing, st.Synced, st.Applied, st.LastError = t.resync, t.synced, t.applied, t.lastErr
		st.Resyncs = make(map[string]uint64, len(t.resyncs))
		for k, v := range t.resyncs {
			st.Resyncs[k] = v
		}
		t.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// silence is how long past sourceSlack the source watch has not been
// heard (since Run began when it never was).
func (m *Mirror) silence(now time.Time) time.Duration {
	m.mu.Lock()
	last := m.heard
	if last.IsZero() {
		last = m.started
	}
	m.mu.Unlock()
	if last.IsZero() {
		return 0
	}
	return max(now.Sub(last)-sourceSlack, 0)
}

var (
	lagDesc = prometheus.NewDesc("lockcell_mirror_lag_seconds",
		"Age of the oldest change to the mirrored subtree not yet applied in the target cell (0: up to date).", []string{"target"}, nil)
	resyncDesc = prometheus.NewDesc("lockcell_mirror_resyncs_total",
		"Full re-syncs of the target cell, by reason: start, compacted (the source's history no longer reached the watch), watch (the watch ended otherwise), overflow (more than the pending bound behind).",
		[]string{"target", "reason"}, nil)
	pendingDesc = prometheus.NewDesc("lockcell_mirror_pending",
		"Changed names waiting to be applied in the target cell.", []string{"target"}, nil)
	appliedDesc = prometheus.NewDesc("lockcell_mirror_applied_total",
		"Changes applied in the target cell.", []string{"target"}, nil)
	syncedDesc = prometheus.NewDesc("lockcell_mirror_synced",
		"1 once a full copy to the target cell has completed and no re-sync is pending.", []string{"target"}, nil)
)

// Collector returns the mirror's metrics for a Prometheus registry:
// lockcell_mirror_lag_seconds{target}, lockcell_mirror_resyncs_total{target,
// reason}, lockcell_mirror_pending{target},
// lockcell_mirror_applied_total{target} and lockcell_mirror_synced{target}.
func (m *Mirror) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Mirror }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagDesc, resyncDesc, pendingDesc, appliedDesc, syncedDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.Status() {
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, st.Lag.Seconds(), st.Target)
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(st.Pending), st.Target)
		ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.CounterValue, float64(st.Applied), st.Target)
		synced := 0.0
		if st.Synced && !st.Resyncing {
			synced = 1
		}
		ch <- prometheus.MustNewConstMetric(syncedDesc, prometheus.GaugeValue, synced, st.Target)
		reasons := []string{ReasonStart, ReasonCompacted, ReasonWatch, ReasonOverflow}
		for r := range st.Resyncs {
			if !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
		for _, r := range reasons {
			ch <- prometheus.MustNewConstMetric(resyncDesc, prometheus.CounterValue, float64(st.Resyncs[r]), st.Target, r)
		}
	}
}
