package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// `lockcell bench write --json` against a three-replica cell: one JSON
// line with the comparison table's field names, operations counted and
// none failed, the run's folder gone; mistakes on the command line are
// usage errors before any call.
func TestBenchVerb(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}

	res := r.ok("bench", "write", "--json", "--clients", "2", "--duration", "300ms", "--warmup", "100ms")
	if strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("bench --json printed %q, want one line", res.stdout)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &line); err != nil {
		t.Fatalf("bench --json: %v: %q", err, res.stdout)
	}
	for _, k := range []string{"ts", "system", "client_lib", "workload", "params", "ops", "ops_per_s", "p50_us", "p90_us",
		"p99_us", "max_us", "mean_us", "errors", "client_cpu_pct"} {
		if _, ok := line[k]; !ok {
			t.Fatalf("bench --json has no %q: %s", k, res.stdout)
		}
	}
	params, _ := line["params"].(map[string]any)
	prefix, _ := params["prefix"].(string)
	if line["system"] != "lockcell" || line["workload"] != "write" || line["variant"] != "cas" || line["ops"].(float64) <= 0 || line["errors"] != 0.0 ||
		params["clients"] != 2.0 || params["duration_s"] != 0.3 || !strings.HasPrefix(prefix, "/ls/t/bench-") {
		t.Fatalf("bench --json: %s", res.stdout)
	}
	if res.stderr != "" {
		t.Fatalf("bench --json on a pipe printed %q on stderr", res.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Client(t).Open(ctx, prefix, client.Read, client.WithoutCache()); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the run's folder %s after the run: %v, want not found", prefix, err)
	}

	for _, bad := range [][]string{
		{"bench"}, {"bench", "lock"}, {"bench", "read", "--variant", "stale"}, {"bench", "write", "--variant", "cached"},
		{"bench", "read", "--clients", "0"}, {"bench", "read", "--duration", "0s"}, {"bench", "read", "--warmup", "-1s"},
		{"bench", "read", "--prefix", "no good"},
	} {
		res := r.run("", bad...)
		if res.code != exitUsage && !(bad[len(bad)-1] == "no good" && res.code == exitError) {
			t.Fatalf("lockcell %s: exit %d, stderr %q", strings.Join(bad, " "), res.code, res.stderr)
		}
	}
}

// No cell: bench says so at once (every replica refused), with the
// default --timeout, as every verb does.
func TestBenchNoCell(t *testing.T) {
	dead := "127.0.0.1:" + strconv.Itoa(fixtures.FreePorts(t, 1)[0])
	r := cliRunner{t, []string{"--cell", "t", "--replicas", dead}}
	start := time.Now()
	r.fails(exitError, "refused", "bench", "lock-uncontended")
	res := r.fails(exitError, `"code":"refused"`, "--json", "bench", "read")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("bench took %v to find no cell: %q", took, res.stderr)
	}
}
