package client_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// Cache statistics are exported as Prometheus metrics and move with use.
func TestCacheMetrics(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cl.Open(ctx, c.Name("m"), client.Read|client.Write|client.Create, client.WithContents([]byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, _, err := h.GetContentsAndStat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(cl.Collector()); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "lockcell_client_cache_hits_total", "lockcell_client_cache_misses_total")
	if err != nil || n != 2 {
		t.Fatalf("gathered %d series: %v", n, err)
	}
	st := admin.New(cl).CacheStats()
	if st.Hits != 4 || st.Misses != 1 {
		t.Fatalf("stats %+v: want 4 hits after 1 miss", st)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "lockcell_client_cache_hits_total" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetCounter().GetValue() != 4 || labels["cell"] != "t" || labels["session"] != strconv.FormatUint(cl.Session(), 10) {
			t.Fatalf("hits metric %v %v", m.GetCounter().GetValue(), labels)
		}
		found = true
	}
	if !found {
		t.Fatal("no hits metric")
	}

	// Opens of a missing name: the first asks the master, the second is
	// answered from the remembered absence; counted apart from reads.
	for range 2 {
		if _, err := cl.Open(ctx, c.Name("none"), client.Read); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("open of a missing name: %v", err)
		}
	}
	for name, want := range map[string]float64{
		"lockcell_client_cache_negative_hits_total":   1,
		"lockcell_client_cache_negative_misses_total": 1,
		"lockcell_client_cache_hits_total":            4,
	} {
		if got := counterValue(t, reg, name); got != want {
			t.Fatalf("%s = %v, want %v (stats %+v)", name, got, want, admin.New(cl).CacheStats())
		}
	}
}

// counterValue gathers reg and returns the value of the one series of
// counter name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}
