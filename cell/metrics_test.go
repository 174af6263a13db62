package cell_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
)

// Each replica serves Prometheus metrics: calls by method and code, the
// master flag, sessions, Raft indexes.
func TestReplicaMetrics(t *testing.T) {
	peers := fixtures.FreePeers(t, 3)
	ports := fixtures.FreePorts(t, 3)
	var servers []*cell.Server
	for i, p := range peers {
		s, err := cell.New(cell.Config{Cell: "t", Self: p.ID, Peers: peers, Dir: t.TempDir(), Timings: fixtures.TestTimings(), Insecure: true,
			Logger: fixtures.Logger(), MetricsAddr: "127.0.0.1:" + strconv.Itoa(ports[i])})
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
		t.Cleanup(func() { s.Close() })
	}
	ctx := ctxT(t, 30*time.Second)
	m, err := cell.WaitForMaster(ctx, servers)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: []string{m.ClientAddr()}, Logger: fixtures.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mustOpen(t, ctx, cl, "/ls/t/x", client.Read|client.Write|client.Create).Close()
	resp, err := http.Get("http://" + m.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{`lockcell_calls_total{cell="t",code="0",method="Open",replica="` + m.ID() + `"} 1`,
		`lockcell_master{cell="t",replica="` + m.ID() + `"} 1`, "lockcell_sessions", "lockcell_raft_commit_index", "lockcell_call_seconds_bucket",
		"lockcell_invalidations_sent_total", "lockcell_invalidations_late_total", "lockcell_events_dropped_total",
		"lockcell_backups_in_flight", "lockcell_handles"} {
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
