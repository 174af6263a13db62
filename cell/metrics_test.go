package cell_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
)

// metricsCell starts three plain replicas of cell "t", each serving its
// metrics on a loopback port, with limits, and returns them, the master
// and a client of it (closed with the test).
func metricsCell(t *testing.T, limits cell.SessionLimits) ([]*cell.Server, *cell.Server, *client.Client) {
	t.Helper()
	c := fixtures.NewCell(t, 3, fixtures.Options{HTTP: true, SessionLimits: limits})
	servers := []*cell.Server{c.Server(0), c.Server(1), c.Server(2)}
	return servers, servers[c.WaitForMaster(30*time.Second)], c.Client(t)
}

// Each replica serves Prometheus metrics: calls by method and code, the
// master flag, sessions, Raft indexes.
func TestReplicaMetrics(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, m, cl := metricsCell(t, cell.SessionLimits{})
	mustOpen(t, ctx, cl, "/ls/t/x", client.Read|client.Write|client.Create).Close()
	resp, err := http.Get("http://" + m.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{`lockcell_calls_total{cell="t",code="ok",method="Open",replica="` + m.ID() + `"} 1`,
		`lockcell_master{cell="t",replica="` + m.ID() + `"} 1`, "lockcell_sessions", "lockcell_raft_commit_index", "lockcell_call_seconds_bucket",
		"lockcell_invalidations_sent_total", "lockcell_invalidations_late_total", "lockcell_events_dropped_total",
		"lockcell_cache_registrations", "lockcell_cache_registrations_peak", "lockcell_cache_registrations_refused_total",
		"lockcell_cache_bars_total", "lockcell_cache_hold_seconds_total",
		"lockcell_event_queue_bytes", `lockcell_events_over_budget_total{cell="t",level="process"`, "lockcell_event_fanout_lost_total",

		"lockcell_backups_in_flight", "lockcell_handles", "lockcell_client_connections", `lockcell_client_connections_refused_total{cell="t",reason="per_ip"`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The master proposed the session's and the Open's commands, in at
	// most as many entries, some of which may be batches.
	commands, ok1 := metricValue(text, "lockcell_group_commit_commands_total")
	entries, ok2 := metricValue(text, "lockcell_group_commit_entries_total")
	batches, ok3 := metricValue(text, "lockcell_group_commit_batches_total")
	if !ok1 || !ok2 || !ok3 || commands < 2 || entries < 1 || entries > commands || batches > entries {
		t.Errorf("group commit: %v commands, %v entries, %v batches", commands, entries, batches)
	}
}

// The quota metrics: the cell's content bytes, the largest principal's
// counts (the admin, here every caller, left out) and refusals by quota.
func TestQuotaMetrics(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{HTTP: true, SessionLimits: cell.SessionLimits{ContentBytes: 64}})
	s, cl := c.Server(0), c.Client(t)
	ctx := ctxT(t, 30*time.Second)
	const rwc = client.Read | client.Write | client.Create
	mustOpen(t, ctx, cl, "/ls/t/x", rwc, client.WithContents(make([]byte, 40))).Close()
	if _, err := cl.Open(ctx, "/ls/t/y", rwc, client.WithContents(make([]byte, 25))); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("the 65th byte: %v", err)
	}
	resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for name, want := range map[string]float64{"lockcell_content_bytes": 40, "lockcell_principal_max_content_bytes": 0,
		"lockcell_principal_max_nodes": 0} {
		if got, ok := metricValue(text, name); !ok || got != want {
			t.Errorf("%s = %v (found %v), want %v", name, got, ok, want)
		}
	}
	for _, want := range []string{`lockcell_quota_refusals_total{cell="t",quota="content_bytes",replica="` + s.ID() + `"} 1`,
		`lockcell_quota_refusals_total{cell="t",quota="content_bytes_per_principal",replica="` + s.ID() + `"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
