package cell_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/fixtures"
)

// oneReplica starts a one-replica cell serving its HTTP port on loopback,
// configured further by edit, and waits for its master.
func oneReplica(t *testing.T, edit func(*cell.Config)) *cell.Server {
	t.Helper()
	return fixtures.NewCell(t, 1, fixtures.Options{HTTP: true, Configure: edit}).Server(0)
}

// keptConn is an HTTP connection that made one request and is kept open,
// idle, by its client.
type keptConn struct {
	c    net.Conn
	r    *bufio.Reader
	sent time.Time // when its request was sent: the replica's idle time starts after
}

// keepAlive dials addr from the loopback address src, asks GET /healthz
// with keep-alive and reads the answer, leaving the connection idle; an
// error means the connection was refused (reset or closed unanswered).
func keepAlive(src, addr string) (*keptConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	sent := time.Now()
	if _, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: lockcell\r\n\r\n"); err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(r, nil); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return &keptConn{c: c, r: r, sent: sent}, nil
}

// keepMany opens n kept connections from src at once and returns those
// admitted and the number refused.
func keepMany(t *testing.T, src, addr string, n int) ([]*keptConn, int) {
	t.Helper()
	var mu sync.Mutex
	var kept []*keptConn
	refused := 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := keepAlive(src, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused++
				return
			}
			kept = append(kept, k)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, k := range kept {
			k.c.Close()
		}
	})
	return kept, refused
}

// The HTTP port holds at most MaxConnsPerIP connections from one address
// and MaxConns in all, whatever arrives at once: idle keep-alive
// connections from two loopback addresses are admitted exactly up to the
// caps, the rest reset at accept and counted by reason; while the port is
// full a client still connects to the client port and works; idle
// connections are closed after IdleTimeout, and one that never sends a
// request after ReadHeaderTimeout; then the port serves again and its
// metrics show the counts.
func TestHTTPConnectionCaps(t *testing.T) {
	const perIP, total, burst = 8, 12, 16
	const idle = 2 * time.Second
	s := oneReplica(t, func(c *cell.Config) {
		c.HTTP = cell.HTTPLimits{MaxConnsPerIP: perIP, MaxConns: total, IdleTimeout: idle, ReadHeaderTimeout: time.Second}
	})
	addr := s.MetricsAddr()

	a, refusedA := keepMany(t, "127.0.0.2", addr, burst)
	if len(a) != perIP || refusedA != burst-perIP {
		t.Fatalf("127.0.0.2: %d of %d connections admitted, %d refused; want %d admitted (its cap)", len(a), burst, refusedA, perIP)
	}
	b, refusedB := keepMany(t, "127.0.0.3", addr, burst)
	if len(b) != total-perIP || refusedB != burst-(total-perIP) {
		t.Fatalf("127.0.0.3: %d of %d connections admitted, %d refused; want %d admitted (the port's cap)", len(b), burst, refusedB, total-perIP)
	}
	st := s.HTTPStats()
	if st.Open != total || st.RefusedPerIP != burst-perIP || st.RefusedTotal != uint64(burst-(total-perIP)) || st.RefusedFDShare != 0 {
		t.Fatalf("HTTP stats with the port full: %+v", st)
	}
	if _, err := keepAlive("127.0.0.1", addr); err == nil {
		t.Fatal("a third address was admitted to a full HTTP port")
	}

	// The client port is not starved meanwhile.
	ctx := ctxT(t, 30*time.Second)
	cl, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: []string{s.ClientAddr()}, Logger: fixtures.Logger()})
	if err != nil {
		t.Fatalf("a client could not connect while the HTTP port was full: %v", err)
	}
	defer cl.Close()
	h := mustOpen(t, ctx, cl, "/ls/t/while-http-full", client.Read|client.Write|client.Create)
	if err := h.SetContents(ctx, []byte("ok")); err != nil {
		t.Fatalf("a call while the HTTP port was full: %v", err)
	}

	// Every idle connection is closed by the replica (EOF, not our
	// deadline), no sooner than its idle timeout after its request.
	kept := append(a, b...)
	closed := make(chan error, len(kept))
	for _, k := range kept {
		go func() {
			k.c.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, err := k.r.ReadByte()
			if err == nil {
				err = errors.New("the replica sent a byte on an idle connection")
			} else if errors.Is(err, io.EOF) {
				if after := time.Since(k.sent); after < idle {
					err = fmt.Errorf("closed %v after its request, before the idle timeout %v", after, idle)
				} else {
					err = nil
				}
			}
			closed <- err
		}()
	}
	for range kept {
		if err := <-closed; err != nil {
			t.Fatalf("an idle connection: %v", err)
		}
	}
	pollUntil(t, 10*time.Second, "the HTTP port's connections freed", func() bool { return s.HTTPStats().Open == 0 })

	// A connection that never sends a request is closed too.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a silent connection: %v, want the replica's close", err)
	}
	// The replica counts a connection out once its handler has returned,
	// just after the close we saw: wait for that before the scrape below
	// counts the connections open.
	pollUntil(t, 10*time.Second, "the silent connection freed", func() bool { return s.HTTPStats().Open == 0 })

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("the HTTP port after the idle connections went: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for name, want := range map[string]float64{
		`lockcell_http_connections_refused_total{cell="t",reason="per_ip",replica="1"}`:   burst - perIP,
		`lockcell_http_connections_refused_total{cell="t",reason="total",replica="1"}`:    burst - (total - perIP) + 1,
		`lockcell_http_connections_refused_total{cell="t",reason="fd_share",replica="1"}`: 0,
		`lockcell_http_connections_limit{cell="t",replica="1"}`:                           total,
		`lockcell_http_connections{cell="t",replica="1"}`:                                 1, // this scrape
	} {
		if v, ok := metricValue(string(body), name); !ok || v != want {
			t.Errorf("%s = %v (found %v), want %v", name, v, ok, want)
		}
	}
}

// Settings the HTTP port cannot honour are refused at start with a clear
// error: a connection cap above its share of file descriptors
// (errors.Is ErrFDReserve), negative limits, an unknown names setting, and
// a plain cell's HTTP port off loopback.
func TestHTTPConfigRefusals(t *testing.T) {
	share, limit := cell.HTTPFDShare()
	if share == 0 {
		t.Skip("no file-descriptor limit to read here")
	}
	t.Logf("file-descriptor limit %d: the HTTP ports' share is %d", limit, share)
	for _, tc := range []struct {
		name string
		edit func(*cell.Config)
		want string
	}{
		{"cap over the fd share", func(c *cell.Config) { c.HTTP.MaxConns = share + 1 }, "file-descriptor limit"},
		{"negative per-IP cap", func(c *cell.Config) { c.HTTP.MaxConnsPerIP = -1 }, "--http-max-conns-per-ip"},
		{"negative idle timeout", func(c *cell.Config) { c.HTTP.IdleTimeout = -time.Second }, "--http-idle-timeout"},
		{"unknown names setting", func(c *cell.Config) { c.HTTPNames = "everyone" }, "--http-names"},
		{"plain cell, HTTP port on all addresses", func(c *cell.Config) { c.MetricsAddr = "0.0.0.0:0" }, "loopback"},
	} {
		// cell.New refuses what Validate does, before it opens anything.
		cfg := fixtures.ReplicaConfig(t, fixtures.Options{HTTP: true, Configure: tc.edit})
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
		if tc.name == "cap over the fd share" && !errors.Is(err, cell.ErrFDReserve) {
			t.Errorf("%s: %v is not ErrFDReserve", tc.name, err)
		}
	}
	// At the share itself, it starts.
	fixtures.NewCell(t, 1, fixtures.Options{HTTP: true, Configure: func(c *cell.Config) { c.HTTP.MaxConns = share }})
}

// httpsGet fetches path from a TLS HTTP port presenting tc's certificate
// (none when tc has none).
func httpsGet(addr, path string, tc *tls.Config) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// plainGet sends a plain-HTTP GET for path and returns whatever comes
// back, status line and all.
func plainGet(addr, path string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: lockcell\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(c)
	return string(b)
}

// On a TLS cell the status page and /status.json name a lock, its holder's
// principal and client name only to a caller whose certificate's
// principal may read them: the admin sees all; bob, who may not read
// alice's directory, sees his own session and lock but none of hers; a
// caller without a certificate, over TLS or plain HTTP, sees counts only.
// /healthz, /readyz and /metrics answer everyone and name nothing; the
// profiler is the admin's. With HTTPNamesHidden even the admin sees
// counts only.
func TestStatusNamesOnlyForAuthenticatedReaders(t *testing.T) {
	set := fixtures.TestCerts(t, "alice", "bob")
	tlsCell := func(names cell.HTTPNames) *cell.Server {
		return oneReplica(t, func(c *cell.Config) {
			c.Insecure, c.Pprof, c.HTTPNames = false, true, names
			c.TLS, c.PeerTLS = set.ReplicaTLS(t, c.Self)
		})
	}
	s := tlsCell("")
	ctx := ctxT(t, 60*time.Second)
	dial := func(user, name string) *client.Client {
		cl, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: []string{s.ClientAddr()}, ClientName: name,
			TLS: set.ClientTLS(t, user), Logger: fixtures.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin, alice, bob := dial("admin", "admin-console"), dial("alice", "alice-batch-7"), dial("bob", "bob-worker")
	const rw = client.Read | client.Write
	mustOpen(t, ctx, admin, "/ls/t/acl", rw|client.Create|client.Directory).Close()
	for name, who := range map[string]string{"alice-only": "alice\n", "everyone": "*\n"} {
		if err := mustOpen(t, ctx, admin, "/ls/t/acl/"+name, rw|client.Create).SetContents(ctx, []byte(who)); err != nil {
			t.Fatal(err)
		}
	}
	only := client.ACL{Read: "alice-only", Write: "alice-only", ChangeACL: "alice-only"}
	if _, err := mustOpen(t, ctx, admin, "/ls/t/payroll", rw|client.Create|client.Directory).SetACL(ctx, only); err != nil {
		t.Fatal(err)
	}
	const hidden = "/ls/t/payroll/q3-bonus-run"
	hh := mustOpen(t, ctx, alice, hidden, rw|client.Create)
	if _, err := hh.SetACL(ctx, only); err != nil {
		t.Fatal(err)
	}
	if err := hh.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Open(ctx, hidden, client.Read); err == nil {
		t.Fatal("bob may read the hidden lock: the test's ACL is wrong")
	}
	const visible = "/ls/t/nightly-compaction"
	if _, err := mustOpen(t, ctx, admin, visible, rw|client.Create).SetACL(ctx, client.ACL{Write: "everyone"}); err != nil {
		t.Fatal(err)
	}
	if err := mustOpen(t, ctx, bob, visible, rw).Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	secret := []string{"q3-bonus-run", "payroll", "alice"} // alice-batch-7 contains alice
	bobs := []string{visible, "bob-worker", "<td>bob</td>"}

	addr := s.MetricsAddr()
	pool, err := certs.LoadPool(set.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	anonymous := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	as := func(user string) *tls.Config { return set.ClientTLS(t, user) }
	// The status is recomputed at most once a second: wait until the
	// admin's view has both locks (or, from a port that does not speak
	// TLS, anyone's).
	pollUntil(t, 15*time.Second, "the admin's status page shows both locks", func() bool {
		_, page, err := httpsGet(addr, "/", as("admin"))
		if err != nil {
			page = plainGet(addr, "/")
		}
		return strings.Contains(page, hidden) && strings.Contains(page, visible)
	})

	absent := func(who, what, body string, names []string) {
		t.Helper()
		for _, n := range names {
			if strings.Contains(body, n) {
				t.Errorf("%s's %s names %q:\n%s", who, what, n, body)
			}
		}
	}
	present := func(who, what, body string, names []string) {
		t.Helper()
		for _, n := range names {
			if !strings.Contains(body, n) {
				t.Errorf("%s's %s lacks %q:\n%s", who, what, n, body)
			}
		}
	}
	for _, path := range []string{"/", "/status.json"} {
		what := path
		// Plain HTTP gets no page from a TLS cell's port.
		absent("a plain-HTTP caller", what, plainGet(addr, path), append(secret, bobs...))

		code, body, err := httpsGet(addr, path, anonymous)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s without a certificate: %d %v", path, code, err)
		}
		absent("a caller without a certificate", what, body, append(secret, bobs...))
		count := `<span id="session-count">3</span>`
		if path == "/status.json" {
			count = `"session_count": 3`
		}
		present("a caller without a certificate", what, body, []string{count})

		code, body, err = httpsGet(addr, path, as("bob"))
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s as bob: %d %v", path, code, err)
		}
		absent("bob", what, body, secret)
		present("bob", what, body, []string{visible, "bob-worker"})

		code, body, err = httpsGet(addr, path, as("admin"))
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s as the admin: %d %v", path, code, err)
		}
		present("the admin", what, body, []string{hidden, "alice-batch-7", visible, "bob-worker"})
	}
	if _, page, _ := httpsGet(addr, "/", anonymous); !strings.Contains(page, `id="names-why"`) {
		t.Errorf("the anonymous page does not say why names are hidden:\n%s", page)
	}

	// Probes and metrics are everyone's, and name nothing.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		code, body, err := httpsGet(addr, path, anonymous)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s without a certificate: %d %v", path, code, err)
		}
		absent("a caller without a certificate", path, body, append(append(secret, bobs...), "admin-console"))
	}
	// The profiler is the admin's.
	for user, want := range map[string]int{"": http.StatusForbidden, "bob": http.StatusForbidden, "admin": http.StatusOK} {
		tc := anonymous
		if user != "" {
			tc = as(user)
		}
		if code, _, err := httpsGet(addr, "/debug/pprof/cmdline", tc); err != nil || code != want {
			t.Errorf("/debug/pprof/cmdline as %q: %d %v, want %d", user, code, err, want)
		}
	}
	// A certificate that is not a user's is refused at the handshake.
	if _, _, err := httpsGet(addr, "/healthz", set.ClientTLSWith(mustReplicaCert(t, set))); err == nil {
		t.Error("a replica certificate was taken as an HTTP caller's identity")
	}

	// Hidden: counts only, the admin too.
	hs := tlsCell(cell.HTTPNamesHidden)
	ha, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: []string{hs.ClientAddr()}, ClientName: "alice-batch-7",
		TLS: set.ClientTLS(t, "admin"), Logger: fixtures.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	if err := mustOpen(t, ctx, ha, "/ls/t/q3-bonus-run", rw|client.Create).Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 15*time.Second, "the hidden cell's status counts the session", func() bool {
		_, body, err := httpsGet(hs.MetricsAddr(), "/status.json", as("admin"))
		return err == nil && strings.Contains(body, `"session_count": 1`)
	})
	for _, path := range []string{"/", "/status.json"} {
		_, body, err := httpsGet(hs.MetricsAddr(), path, as("admin"))
		if err != nil {
			t.Fatal(err)
		}
		absent("the admin with names hidden", path, body, []string{"q3-bonus-run", "alice-batch-7"})
	}
}

// mustReplicaCert issues a replica certificate from the set's CA.
func mustReplicaCert(t *testing.T, set *fixtures.CertSet) *certs.Cert {
	t.Helper()
	c, err := set.CA.IssueReplica("9")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A plain cell's HTTP caller is AnonymousPrincipal, the admin, as on its
// client port: the status page names everything (this is what `lockcelld
// dev` shows), and the port is loopback only (TestHTTPConfigRefusals).
func TestStatusPlainCellShowsNamesToItsAdmin(t *testing.T) {
	s := oneReplica(t, func(*cell.Config) {})
	ctx := ctxT(t, 30*time.Second)
	cl, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: []string{s.ClientAddr()}, ClientName: "etl-runner",
		Logger: fixtures.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := mustOpen(t, ctx, cl, "/ls/t/etl", client.Read|client.Write|client.Create).Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 15*time.Second, "the plain cell's page names the lock and its client", func() bool {
		resp, err := http.Get("http://" + s.MetricsAddr() + "/status.json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "/ls/t/etl") && strings.Contains(string(b), "etl-runner") &&
			strings.Contains(string(b), `"names": "all"`)
	})
}

// reloadingReplica starts one TLS replica whose certificates a
// cell.CertReloader holds, and returns it, the reloader and a TLS
// configuration of a caller without a certificate that trusts the cell's
// CA (for 127.0.0.1).
func reloadingReplica(t *testing.T, set *fixtures.CertSet) (*cell.Server, *cell.CertReloader, *tls.Config) {
	t.Helper()
	var rl *cell.CertReloader
	s := oneReplica(t, func(c *cell.Config) {
		cf, kf := set.ReplicaFiles(t, c.Self)
		var err error
		if rl, err = cell.NewCertReloader(cf, kf, set.CAFile(), fixtures.Logger()); err != nil {
			t.Fatal(err)
		}
		c.Insecure, c.TLS, c.PeerTLS = false, rl.ServerTLS(), rl.PeerTLS()
	})
	pool, err := certs.LoadPool(set.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	return s, rl, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ServerName: "127.0.0.1"}
}

// The HTTP port of a TLS cell uses the client port's certificate and
// follows its reload (cell.CertReloader): after Reload, new connections
// to both ports present the new certificate.
func TestHTTPPortFollowsCertificateReload(t *testing.T) {
	set := fixtures.TestCerts(t)
	s, rl, anonymous := reloadingReplica(t, set)
	serial := func(addr string, tc *tls.Config) string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	user := set.ClientTLS(t, "admin")
	user.ServerName = "127.0.0.1"
	before := serial(s.MetricsAddr(), anonymous)
	if c := serial(s.ClientAddr(), user); c != before {
		t.Fatalf("the HTTP port presents serial %s, the client port %s", before, c)
	}
	fresh, err := set.CA.IssueReplica(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := set.ReplicaFiles(t, s.ID())
	if err := fresh.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	want := fresh.Leaf.SerialNumber.String()
	if got := serial(s.MetricsAddr(), anonymous); got != want || got == before {
		t.Errorf("after Reload the HTTP port presents serial %s, want the new %s", got, want)
	}
	if got := serial(s.ClientAddr(), user); got != want {
		t.Errorf("after Reload the client port presents serial %s, want the new %s", got, want)
	}
}
