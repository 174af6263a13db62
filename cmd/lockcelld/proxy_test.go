package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// A real `lockcelld proxy` process in front of five `lockcelld serve`
// processes: a client that knows only the proxy and the replicas takes a
// lock through the proxy and keeps it over several leases on the proxy's
// batched KeepAlives; kill -9 of the proxy costs it nothing (same
// session, same lock), as it carries on with the replicas directly.
// Meanwhile the proxy's --http port is healthy and ready, holds the
// client's one session, and exports every lockcell_proxy_ metric the
// operator's guide and the alert rules name.
func TestProxyProcessServesAndDiesCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs six processes")
	}
	bin := fixtures.BuildLockcelld(t)
	pc := fixtures.NewProcCell(t, bin, "proc", 5, 2*time.Second)
	pc.MasterIndex(30 * time.Second)
	ports := fixtures.FreePorts(t, 2)
	addr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	logFile := filepath.Join(t.TempDir(), "proxy.log")
	px := fixtures.NewProcs(fixtures.ProcsConfig{Bin: bin, N: 1,
		Args: func(int) []string {
			return []string{"--log-level", "info", "proxy", "--listen", addr, "--peers", joinAddrs(pc.Addrs()), "--insecure", "--http", httpAddr}
		},
		OpenLog: func(int) (*os.File, error) { return os.Create(logFile) }})
	t.Cleanup(px.KillAll)
	if err := px.Start(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := pc.ClientConfig()
	cfg.Replicas = append([]string{addr}, pc.Addrs()...)
	cfg.GracePeriod, cfg.RetryTimeout = 30*time.Second, 30*time.Second
	// The proxy is up once a client of it alone gets a session.
	only := cfg
	only.Replicas = []string{addr}
	for deadline := time.Now().Add(20 * time.Second); ; {
		probe, err := client.Dial(ctx, only)
		if err == nil {
			probe.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("dial through the proxy: %v\nproxy log:\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond) // the proxy process is starting
	}
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := admin.New(cl).Master(); got != addr {
		t.Fatalf("the client talks to %s, not the proxy %s", got, addr)
	}
	session := cl.Session()
	lk, err := cl.Open(ctx, "/ls/proc/lock", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	st0, _ := lk.GetStat(ctx)
	time.Sleep(3 * 2 * time.Second) // three leases on the proxy's KeepAlives: the time under test
	if st, err := lk.GetStat(ctx); err != nil || st.LockGen != st0.LockGen {
		t.Fatalf("lock after three leases through the proxy: %+v %v", st, err)
	}
	checkProxyHTTP(t, httpAddr)
	px.Kill(0)
	time.Sleep(3 * 2 * time.Second) // three leases after the proxy died
	if err := lk.SetContents(ctx, []byte("mine")); err != nil {
		t.Fatalf("write after the proxy died: %v", err)
	}
	if st, err := lk.GetStat(ctx); err != nil || st.LockGen != st0.LockGen || cl.Session() != session {
		t.Fatalf("after the proxy died: %+v %v, session %d (was %d)", st, err, cl.Session(), session)
	}
}

// checkProxyHTTP checks a serving proxy's HTTP port: healthy, ready,
// holding one session (the probe client's is closed), and exporting
// every lockcell_proxy_ metric the operator's guide and the alert rules
// name.
func checkProxyHTTP(t *testing.T, httpAddr string) {
	t.Helper()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	var body string
	fixtures.PollUntil(t, 10*time.Second, "the proxy holds the client's one session", func() bool {
		body = scrape(t, httpAddr)
		return strings.Contains(body, "\nlockcell_proxy_sessions 1\n") && strings.Contains(body, "\nlockcell_proxy_has_master 1\n")
	})
	exported := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		exported[name] = true
	}
	if !exported["process_open_fds"] || !exported["go_goroutines"] {
		t.Errorf("no process or Go runtime metrics on the proxy's port")
	}
	named := 0
	for _, f := range []string{"../../docs/operations.md", "../../deploy/prometheus/alerts.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`\blockcell_proxy_[a-z_]+[a-z]\b`).FindAllString(string(b), -1) {
			named++
			if !exported[n] && !exported[n+"_bucket"] {
				t.Errorf("%s names %s, which the proxy does not export", f, n)
			}
		}
	}
	if named < 10 {
		t.Errorf("only %d proxy metric names in the docs and alert rules", named)
	}
}

func joinAddrs(as []string) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += ","
		}
		out += a
	}
	return out
}
