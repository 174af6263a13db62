package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"lockcell/bench"
	"lockcell/client"
	"lockcell/fixtures"
)

// Every workload against a real three-replica cell: operations counted,
// none failed, percentiles in order, the JSON line carrying the field
// names of the comparison table, and the run's names gone afterwards.
// An existing prefix keeps what was in it; an interrupted run reports no
// figures and removes its names too.
func TestRunEveryWorkload(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	admin := c.Client(t)
	ctx := t.Context()
	gone := func(name string) {
		t.Helper()
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := admin.Open(octx, name, client.Read, client.WithoutCache()); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s after the run: %v, want not found", name, err)
		}
	}
	cfg := func(workload, variant string) bench.Config {
		return bench.Config{Client: c.ClientConfig(), Workload: workload, Variant: variant, Clients: 2,
			Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, OpTimeout: 10 * time.Second, ClientLib: "test"}
	}

	runs := []struct{ workload, variant string }{
		{bench.LockUncontended, ""}, {bench.LockContended, ""}, {bench.Read, ""}, {bench.Read, bench.Cached}, {bench.Read, bench.Follower}, {bench.Write, ""},
	}
	for _, w := range runs {
		var progress []bench.Progress
		cf := cfg(w.workload, w.variant)
		cf.Progress = func(p bench.Progress) { progress = append(progress, p) }
		res, err := bench.Run(ctx, cf)
		if err != nil {
			t.Fatalf("%s %s: %v", w.workload, w.variant, err)
		}
		b, _ := json.Marshal(res)
		t.Logf("%s", b)
		wantVariant := w.variant
		if w.workload == bench.Read && wantVariant == "" {
			wantVariant = bench.Linearizable
		}
		if w.workload == bench.Write {
			wantVariant = bench.CAS
		}
		if res.System != "lockcell" || res.Workload != w.workload || res.Variant != wantVariant || res.ClientLib != "test" {
			t.Fatalf("%s: %s", w.workload, b)
		}
		if w.variant == bench.Follower {
			// Followers answer most reads of a healthy cell; the rest
			// fell back to the master.
			if share, ok := res.Extra["follower_share"].(float64); !ok || share < 50 {
				t.Fatalf("follower reads: %s", b)
			}
			delete(res.Extra, "follower_share")
			if len(res.Extra) == 0 {
				res.Extra = nil
			}
		}
		if res.Ops <= 0 || res.Errors != 0 || res.OpsPerSec <= 0 || res.Extra != nil {
			t.Fatalf("%s %s: %s", w.workload, w.variant, b)
		}
		if !(0 < res.P50us && res.P50us <= res.P90us && res.P90us <= res.P99us && res.P99us <= res.MaxUs) || res.MeanUs <= 0 || res.MeanUs > res.MaxUs {
			t.Fatalf("%s: latencies out of order: %s", w.workload, b)
		}
		var line map[string]any
		if err := json.Unmarshal(b, &line); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"ts", "system", "workload", "params", "ops", "ops_per_s", "p50_us", "p90_us", "p99_us",
			"max_us", "mean_us", "errors", "client_cpu_pct"} {
			if _, ok := line[k]; !ok {
				t.Fatalf("%s: no %q in %s", w.workload, k, b)
			}
		}
		if _, ok := line["variant"]; ok != (w.workload == bench.Read || w.workload == bench.Write) {
			t.Fatalf("%s: variant field present %v: %s", w.workload, ok, b)
		}
		params := line["params"].(map[string]any)
		lease, _ := params["lease_s"].(float64)
		if params["clients"] != 2.0 || params["duration_s"] != 0.3 || params["warmup_s"] != 0.1 || lease <= 0 ||
			params["members"] != 3.0 {
			t.Fatalf("%s: params %v", w.workload, params)
		}
		if _, ok := params["value_bytes"]; ok != (w.workload == bench.Read || w.workload == bench.Write) {
			t.Fatalf("%s: params %v", w.workload, params)
		}
		last := progress[len(progress)-1]
		if last.Ops != res.Ops || last.Warmup || last.Elapsed != last.Total {
			t.Fatalf("%s: last progress %+v, %d ops", w.workload, last, res.Ops)
		}
		gone(params["prefix"].(string))
	}

	// A prefix that exists: the run's names go in it and only they are
	// removed.
	mine := c.Name("mine")
	h, err := admin.Open(ctx, mine, client.Read|client.Create|client.Directory)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if h, err = admin.Open(ctx, mine+"/keep", client.Read|client.Write|client.Create); err != nil {
		t.Fatal(err)
	}
	h.Close()
	cf := cfg(bench.Write, "")
	cf.Prefix = mine + "/a/b"
	if _, err := bench.Run(ctx, cf); err != nil {
		t.Fatal(err)
	}
	gone(mine + "/a")
	if h, err = admin.Open(ctx, mine+"/keep", client.Read, client.WithoutCache()); err != nil {
		t.Fatalf("a name that was there before the run: %v", err)
	}
	h.Close()
	// A name the workload needs that exists already fails the run.
	cf.Prefix = mine
	if h, err = admin.Open(ctx, mine+"/write", client.Read|client.Create|client.Directory); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if _, err := bench.Run(ctx, cf); !errors.Is(err, client.ErrExists) {
		t.Fatalf("run into an existing write folder: %v, want exists", err)
	}

	// Interrupted in the window: an error, no figures, nothing left.
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	cf = cfg(bench.LockUncontended, "")
	cf.Duration = time.Minute
	cf.Prefix = c.Name("interrupted")
	cf.Progress = func(p bench.Progress) {
		if p.Ops > 0 {
			cancel()
		}
	}
	start := time.Now()
	if res, err := bench.Run(ictx, cf); !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("interrupted run: %+v, %v", res, err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("an interrupted one-minute run took %v", took)
	}
	gone(cf.Prefix)

	// Bad configurations fail before any call.
	for _, bad := range []bench.Config{cfg("lock", ""), cfg(bench.Read, "stale"), cfg(bench.Write, bench.Cached)} {
		if _, err := bench.Run(ctx, bad); err == nil {
			t.Fatalf("%s %s ran", bad.Workload, bad.Variant)
		}
	}
}

// No cell: the first dial fails at once, and says every replica refused.
func TestRunNoCell(t *testing.T) {
	cf := bench.Config{Client: client.Config{Cell: "t", Replicas: []string{"127.0.0.1:" + strconv.Itoa(fixtures.FreePorts(t, 1)[0])}},
		Workload: bench.Read}
	start := time.Now()
	_, err := bench.Run(t.Context(), cf)
	if !errors.Is(err, client.ErrAllRefused) {
		t.Fatalf("no cell: %v, want every replica refused", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v to find no cell", took)
	}
}
