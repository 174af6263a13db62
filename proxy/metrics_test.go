package proxy_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/proxy"
)

// scraped is one scrape of a proxy's /metrics: each series as the
// exposition prints it (`name{label="v",...}`, labels sorted) to its value.
type scraped map[string]float64

func scrapeProxy(t *testing.T, base string) scraped {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	out := scraped{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// get fetches path and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A proxy's /metrics, /healthz and /readyz move as an operator relies on:
// ready with a master before any client comes (its probe finds one);
// sessions held and fresh equal its clients' sessions, batches and
// answered KeepAlives keep rising, forwarded calls count by method and
// code; cut off from the cell it has no master and is not ready, and its
// clients' leases go stale; healed, it is ready again; a master stopped
// is a master change and a higher epoch; every replica stopped, it has
// no master and is not ready.
func TestProxyMetricsAndReadiness(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	reg := prometheus.NewRegistry()
	cut := fixtures.NewCutter()
	p := fixtures.StartProxyWith(t, c, func(cfg *proxy.Config) { cfg.Metrics, cfg.Dialer = reg, cut.Dial })
	srv := httptest.NewServer(p.HTTPHandler(reg))
	t.Cleanup(srv.Close)
	ctx := ctxT(t, 2*time.Minute)
	var last scraped
	// until polls the scrape until ok holds of it.
	until := func(what string, d time.Duration, ok func(m scraped) bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			last = scrapeProxy(t, srv.URL)
			if ok(last) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; last scrape:\n%v", what, d, proxySeries(last))
			}
			time.Sleep(20 * time.Millisecond) // poll
		}
	}
	ready := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := get(t, srv.URL+"/readyz")
			if code == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz answers %d %q, want %d", code, body, want)
			}
			time.Sleep(20 * time.Millisecond) // poll
		}
	}

	// No client yet: the probe alone finds the master.
	ready(200)
	until("has a master before any client", 10*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_has_master"] == 1 && m["lockcell_proxy_ready"] == 1 && m["lockcell_proxy_epoch"] > 0
	})
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}

	const n = 4
	var cls []*client.Client
	for range n {
		cls = append(cls, c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p)))
	}
	mustOpen(t, ctx, cls[0], c.Name("f"), rw)
	until("sessions held and fresh equal the clients'", 10*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_sessions"] == n && m[`lockcell_proxy_session_leases{state="fresh"}`] == n &&
			m[`lockcell_proxy_session_leases{state="stale"}`] == 0
	})
	b0, k0 := last["lockcell_proxy_batches_total"], last[`lockcell_proxy_keepalives_total{result="lease"}`]
	if last[`lockcell_proxy_calls_total{code="ok",method="Open"}`] < 1 || last[`lockcell_proxy_calls_total{code="ok",method="CreateSession"}`] < n {
		t.Fatalf("forwarded calls not counted: %v", proxySeries(last))
	}
	// A batch per half lease at least, and each client's KeepAlive
	// answered about every three quarters of one.
	until("batches and KeepAlives answered rise", 20*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_batches_total"] >= b0+4 && m[`lockcell_proxy_keepalives_total{result="lease"}`] >= k0+n &&
			m["lockcell_proxy_batch_sessions_count"] >= 4 && m["lockcell_proxy_batch_seconds_count"] >= 4 &&
			m[`lockcell_proxy_session_leases{state="fresh"}`] == n
	})
	// Each client's connection, and its KeepAlive parked at the proxy.
	until("the client port's figures", 20*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_client_connections"] == n && m["lockcell_proxy_client_streams"] >= n
	})
	// Its budgets: nothing closed or slowed for n quiet clients, every
	// series there to alert on.
	for _, name := range []string{`lockcell_proxy_client_over_budget_total{level="connection"}`, `lockcell_proxy_client_over_budget_total{level="ip"}`,
		`lockcell_proxy_client_over_budget_total{level="process"}`, "lockcell_proxy_client_rate_wait_seconds_total",
		"lockcell_proxy_client_kept_streams_refused_total"} {
		if v, ok := last[name]; !ok || v != 0 {
			t.Fatalf("%s = %v (present %v), want 0 for %d quiet clients", name, v, ok, n)
		}
	}
	if _, ok := last["lockcell_proxy_client_request_held_bytes"]; !ok {
		t.Fatalf("no lockcell_proxy_client_request_held_bytes: %v", proxySeries(last))
	}
	if _, ok := last["lockcell_proxy_client_streams_kept"]; !ok {
		t.Fatalf("no lockcell_proxy_client_streams_kept: %v", proxySeries(last))
	}
	cls[n-1].Close()
	until("a closed session is no longer held", 10*time.Second, func(m scraped) bool { return m["lockcell_proxy_sessions"] == n-1 })

	// Cut off from the cell: no master, not ready, its clients' leases
	// go stale (they are told NotMaster), batches fail.
	cut.Cut()
	until("no master once cut off", 10*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_has_master"] == 0 && m["lockcell_proxy_ready"] == 0
	})
	ready(503)
	if _, body := get(t, srv.URL+"/readyz"); !strings.Contains(body, "no master") {
		t.Fatalf("/readyz says %q", body)
	}
	until("leases stale while cut off", 10*time.Second, func(m scraped) bool {
		// (A client searching elsewhere may not be heard from for half a
		// lease, and count as absent meanwhile.)
		return m[`lockcell_proxy_session_leases{state="stale"}`] >= 1 && m[`lockcell_proxy_session_leases{state="fresh"}`] == 0 &&
			m[`lockcell_proxy_keepalives_total{result="no_lease"}`] > 0 && m["lockcell_proxy_batch_failures_total"] > 0
	})
	cut.Heal()
	ready(200)
	until("fresh again once healed", 20*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_has_master"] == 1 && m[`lockcell_proxy_session_leases{state="fresh"}`] == n-1
	})

	// A new master is a master change and a higher epoch.
	e0, ch0 := last["lockcell_proxy_epoch"], last["lockcell_proxy_master_changes_total"]
	c.StopMaster()
	until("the new master seen", 30*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_master_changes_total"] > ch0 && m["lockcell_proxy_epoch"] > e0 && m["lockcell_proxy_has_master"] == 1
	})
	ready(200)

	// Every replica stopped: no master, not ready.
	for _, cl := range cls[:n-1] {
		cl.Close()
	}
	for i := range 3 {
		c.Stop(i)
	}
	until("no master once every replica stopped", 10*time.Second, func(m scraped) bool {
		return m["lockcell_proxy_has_master"] == 0 && m["lockcell_proxy_ready"] == 0
	})
	ready(503)
}

// proxySeries is a scrape's lockcell_proxy_ series, for a failure's message.
func proxySeries(m scraped) string {
	var b strings.Builder
	for k, v := range m {
		if strings.HasPrefix(k, "lockcell_proxy_") && !strings.Contains(k, "_bucket") {
			b.WriteString(k + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}
