package client

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the client's cache statistics as Prometheus metrics
// (lockcell_client_cache_*: hits and misses of reads, and apart from them
// those of remembered absences, invalidations, evictions and size).
// Register it with a prometheus.Registerer; the labels identify the cell
// and session.
func (c *Client) Collector() prometheus.Collector { return &collector{c: c} }

type collector struct{ c *Client }

var (
	descHits          = prometheus.NewDesc("lockcell_client_cache_hits_total", "Reads served from the client cache with no call to the cell.", []string{"cell", "session"}, nil)
	descMisses        = prometheus.NewDesc("lockcell_client_cache_misses_total", "Cacheable reads that had to ask the master.", []string{"cell", "session"}, nil)
	descNegHits       = prometheus.NewDesc("lockcell_client_cache_negative_hits_total", "Opens of a missing name answered from the client cache's remembered absence, with no call to the cell.", []string{"cell", "session"}, nil)
	descNegMisses     = prometheus.NewDesc("lockcell_client_cache_negative_misses_total", "Opens without Create that found no remembered absence and asked the master.", []string{"cell", "session"}, nil)
	descInvalidations = prometheus.NewDesc("lockcell_client_cache_invalidations_total", "Invalidations applied (from the master, purges, jeopardy).", []string{"cell", "session"}, nil)
	descEvictions     = prometheus.NewDesc("lockcell_client_cache_evictions_total", "Entries evicted to stay within the size bound.", []string{"cell", "session"}, nil)
	descEntries       = prometheus.NewDesc("lockcell_client_cache_entries", "Entries in the client cache.", []string{"cell", "session"}, nil)
	descBytes         = prometheus.NewDesc("lockcell_client_cache_bytes", "Bytes held by the client cache.", []string{"cell", "session"}, nil)
)

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descMisses, descNegHits, descNegMisses, descInvalidations, descEvictions, descEntries, descBytes} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	st := m.c.cacheStats()
	labels := []string{m.c.cfg.Cell, strconv.FormatUint(m.c.Session(), 10)}
	ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(st.Hits), labels...)
	ch <- prometheus.MustNewConstMetric(descMisses, prometheus.CounterValue, float64(st.Misses), labels...)
	ch <- prometheus.MustNewConstMetric(descNegHits, prometheus.CounterValue, float64(st.NegativeHits), labels...)
	ch <- prometheus.MustNewConstMetric(descNegMisses, prometheus.CounterValue, float64(st.NegativeMisses), labels...)
	ch <- prometheus.MustNewConstMetric(descInvalidations, prometheus.CounterValue, float64(st.Invalidations), labels...)
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(st.Evictions), labels...)
	ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(st.Entries), labels...)
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(st.Bytes), labels...)
}
