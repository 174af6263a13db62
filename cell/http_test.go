package cell_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
)

// httpCell is an in-process cell whose replicas serve the HTTP port, laid
// out as lockcelld dev lays out its ports: replica i's client port is
// base+i, its Raft port base+10+i and its HTTP port base+20+i, so the HTTP
// port lies as far from the client port on every replica.
type httpCell struct {
	t     *testing.T
	c     *fixtures.Cell
	certs *fixtures.CertSet // mutual TLS on the client and Raft ports, when set
	peers []cell.Peer
	http  []string
}

func newHTTPCell(t *testing.T, n int, pprof bool) *httpCell { return newHTTPCellTLS(t, n, pprof, nil) }

func newHTTPCellTLS(t *testing.T, n int, pprof bool, certs *fixtures.CertSet) *httpCell {
	t.Helper()
	var base int
	for tries := 0; ; tries++ {
		if tries > 200 {
			t.Fatal("no free run of ports for an HTTP cell")
		}
		base = 20000 + rand.IntN(12000)
		free := true
		for i := 0; i < n && free; i++ {
			for _, p := range []int{base + i, base + 10 + i, base + 20 + i} {
				ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			break
		}
	}
	hc := &httpCell{t: t, certs: certs}
	for i := range n {
		hc.peers = append(hc.peers, cell.Peer{ID: strconv.Itoa(i + 1), ClientAddr: "127.0.0.1:" + strconv.Itoa(base+i),
			RaftAddr: "127.0.0.1:" + strconv.Itoa(base+10+i)})
		hc.http = append(hc.http, "127.0.0.1:"+strconv.Itoa(base+20+i))
	}
	hc.c = fixtures.NewCell(t, n, fixtures.Options{Peers: hc.peers, TLS: certs, Configure: func(cfg *cell.Config) {
		i, _ := strconv.Atoi(cfg.Self)
		cfg.MetricsAddr, cfg.Pprof = hc.http[i-1], pprof
	}})
	return hc
}

func (hc *httpCell) stop(i int) { hc.c.Stop(i) }

// master waits (until ctx's deadline) for a serving master and returns its
// index.
func (hc *httpCell) master(ctx context.Context) int {
	hc.t.Helper()
	d, _ := ctx.Deadline()
	return hc.c.WaitForMaster(time.Until(d))
}

// client dials the cell as the client named name (with TLS: as the user
// of that name).
func (hc *httpCell) client(ctx context.Context, name string) *client.Client {
	hc.t.Helper()
	var addrs []string
	for _, p := range hc.peers {
		addrs = append(addrs, p.ClientAddr)
	}
	cfg := client.Config{Cell: "t", Replicas: addrs, ClientName: name, Logger: fixtures.Logger(), RetryTimeout: 20 * time.Second}
	if hc.certs != nil {
		cfg.TLS = hc.certs.ClientTLS(hc.t, name)
	}
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		hc.t.Fatal(err)
	}
	hc.t.Cleanup(func() { cl.Close() })
	return cl
}

// get fetches path from replica i's HTTP port; on a TLS cell over TLS,
// as the admin (who may see every name).
func (hc *httpCell) get(i int, path string) (int, string, error) {
	if hc.certs != nil {
		return httpsGet(hc.http[i], path, hc.certs.ClientTLS(hc.t, "admin"))
	}
	resp, err := http.Get("http://" + hc.http[i] + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond until it holds or the deadline passes; what says what
// was last seen.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last seen: %s", what, d, last)
}

// metricValue returns the value of the first sample of name (exactly, with
// any labels) in a Prometheus text exposition, and whether there is one.
func metricValue(text, name string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

func (hc *httpCell) metric(i int, name string) float64 {
	hc.t.Helper()
	code, body, err := hc.get(i, "/metrics")
	if err != nil || code != http.StatusOK {
		hc.t.Fatalf("scrape replica %d: %d %v", i, code, err)
	}
	v, ok := metricValue(body, name)
	if !ok {
		hc.t.Fatalf("replica %d's metrics lack %s", i, name)
	}
	return v
}

// /readyz is 200 on every replica once a master serves; a follower cut
// off from a quorum (the others stopped) turns 503 with a reason, while
// /healthz stays 200.
func TestReadyzFollowsQuorum(t *testing.T) {
	hc := newHTTPCell(t, 3, false)
	ctx := ctxT(t, 60*time.Second)
	m := hc.master(ctx)
	for i := range hc.peers {
		waitFor(t, 15*time.Second, fmt.Sprintf("replica %d ready", i), func() (bool, string) {
			code, body, err := hc.get(i, "/readyz")
			return err == nil && code == http.StatusOK, fmt.Sprint(code, " ", body, err)
		})
		if code, body, err := hc.get(i, "/healthz"); err != nil || code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("replica %d healthz: %d %q %v", i, code, body, err)
		}
	}
	if _, body, _ := hc.get(m, "/readyz"); !strings.Contains(body, "serving master") {
		t.Errorf("the master's readyz says %q", body)
	}
	f := (m + 1) % 3
	if _, body, _ := hc.get(f, "/readyz"); !strings.Contains(body, "following master "+hc.peers[m].ID) {
		t.Errorf("follower %d's readyz says %q", f, body)
	}
	if v := hc.metric(f, "lockcell_ready"); v != 1 {
		t.Errorf("follower's lockcell_ready is %v", v)
	}
	for i := range hc.peers {
		if i != f {
			hc.stop(i)
		}
	}
	waitFor(t, 15*time.Second, "the lone follower not ready", func() (bool, string) {
		code, body, err := hc.get(f, "/readyz")
		return err == nil && code == http.StatusServiceUnavailable && strings.TrimSpace(body) != "", fmt.Sprint(code, " ", body, err)
	})
	_, body, _ := hc.get(f, "/readyz")
	t.Logf("cut-off follower's readyz: %s", strings.TrimSpace(body))
	if code, _, err := hc.get(f, "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("healthz of the cut-off follower: %d %v", code, err)
	}
	if v := hc.metric(f, "lockcell_ready"); v != 0 {
		t.Errorf("cut-off follower's lockcell_ready is %v", v)
	}
}

// /debug/pprof/ is served only when asked for; unknown paths are 404.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		hc := newHTTPCell(t, 1, on)
		hc.master(ctxT(t, 30*time.Second))
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			if code, _, err := hc.get(0, path); err != nil || code != want {
				t.Errorf("pprof %v: %s answers %d (%v), want %d", on, path, code, err, want)
			}
		}
		if code, _, _ := hc.get(0, "/no-such-page"); code != http.StatusNotFound {
			t.Errorf("an unknown path answers %d", code)
		}
	}
	// cell.New refuses what Validate does, before it opens anything.
	cfg := fixtures.ReplicaConfig(t, fixtures.Options{Configure: func(c *cell.Config) { c.Pprof = true }})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MetricsAddr") {
		t.Errorf("Pprof without an HTTP port: %v", err)
	}
}

// The operators' figures on /metrics move with what the cell does: a
// blocking acquire that waited, writes (log store and apply), KeepAlives,
// acknowledged invalidations, a fail-over; the process collector is there.
func TestMetricsShowRealFigures(t *testing.T) {
	hc := newHTTPCell(t, 3, false)
	ctx := ctxT(t, 90*time.Second)
	m := hc.master(ctx)
	f := (m + 1) % 3
	a, b := hc.client(ctx, "a"), hc.client(ctx, "b")

	for _, name := range []string{"process_resident_memory_bytes", "process_cpu_seconds_total", "go_goroutines"} {
		hc.metric(m, name)
	}
	if v := hc.metric(m, "lockcell_lease_seconds"); v != 2 {
		t.Errorf("lockcell_lease_seconds = %v, want 2", v)
	}
	waitFor(t, 10*time.Second, "a KeepAlive counted", func() (bool, string) {
		v := hc.metric(m, "lockcell_keepalive_lease_left_seconds_count")
		return v > 0, fmt.Sprint(v)
	})

	// Writes: every replica stores and applies them.
	store0, apply0 := hc.metric(f, "lockcell_log_store_seconds_count"), hc.metric(f, "lockcell_apply_seconds_count")
	mstore0 := hc.metric(m, "lockcell_log_store_seconds_count")
	h := mustOpen(t, ctx, a, "/ls/t/data", client.Read|client.Write|client.Create)
	for i := range 10 {
		if err := h.SetContents(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the follower's store and apply counts rise by the writes", func() (bool, string) {
		st, ap := hc.metric(f, "lockcell_log_store_seconds_count"), hc.metric(f, "lockcell_apply_seconds_count")
		return st > store0 && ap >= apply0+10, fmt.Sprintf("store %v->%v apply %v->%v", store0, st, apply0, ap)
	})
	if v := hc.metric(m, "lockcell_log_store_seconds_count"); v <= mstore0 {
		t.Errorf("master's log store count %v -> %v", mstore0, v)
	}
	if v := hc.metric(m, "lockcell_apply_seconds_sum"); v <= 0 {
		t.Errorf("apply time sum %v", v)
	}

	// A blocking acquire that waits behind a holder.
	wait0, waitSum0 := hc.metric(m, "lockcell_lock_wait_seconds_count"), hc.metric(m, "lockcell_lock_wait_seconds_sum")
	la := mustOpen(t, ctx, a, "/ls/t/lock", client.Read|client.Write|client.Create)
	lb := mustOpen(t, ctx, b, "/ls/t/lock", client.Read|client.Write)
	if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil { // a TryAcquire is not counted
		t.Fatal(ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- lb.Acquire(ctx, client.Exclusive) }()
	waitFor(t, 10*time.Second, "b queued for the lock", func() (bool, string) {
		_, st, err := la.GetContentsAndStat(ctx)
		return err == nil && st.LockWaiters == 1, fmt.Sprint(st.LockWaiters, err)
	})
	queued := time.Now()
	time.Sleep(300 * time.Millisecond) // the holder's work: how long b waits, not synchronisation
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	wait1, waitSum1 := hc.metric(m, "lockcell_lock_wait_seconds_count"), hc.metric(m, "lockcell_lock_wait_seconds_sum")
	if wait1 != wait0+1 {
		t.Errorf("lock-wait count %v -> %v, want one more", wait0, wait1)
	}
	if held := released.Sub(queued).Seconds(); waitSum1-waitSum0 < held {
		t.Errorf("lock-wait sum grew %.3fs, less than the %.3fs the lock was held while b queued", waitSum1-waitSum0, held)
	}

	// An invalidation: b caches a file, a writes it.
	sent0, acked0 := hc.metric(m, "lockcell_invalidations_sent_total"), hc.metric(m, "lockcell_invalidations_acked_total")
	hb := mustOpen(t, ctx, b, "/ls/t/data", client.Read)
	if _, _, err := hb.GetContentsAndStat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("new")); err != nil {
		t.Fatal(err)
	}
	sent1, acked1 := hc.metric(m, "lockcell_invalidations_sent_total"), hc.metric(m, "lockcell_invalidations_acked_total")
	if sent1 != sent0+1 || acked1 != acked0+1 {
		t.Errorf("invalidations sent %v -> %v, acked %v -> %v: want one more of each", sent0, sent1, acked0, acked1)
	}

	// A fail-over: the follower learns of a new leader.
	changes0 := hc.metric(f, "lockcell_leader_changes_total")
	if changes0 < 1 {
		t.Errorf("the follower counts %v leader changes after the first election", changes0)
	}
	hc.stop(m)
	m2 := hc.master(ctx)
	waitFor(t, 10*time.Second, "the follower counts the new leader", func() (bool, string) {
		v := hc.metric(f, "lockcell_leader_changes_total")
		return v > changes0, fmt.Sprint(changes0, " -> ", v)
	})
	t.Logf("master %d -> %d; follower %d's leader changes %v -> %v", m, m2, f, changes0, hc.metric(f, "lockcell_leader_changes_total"))
}

// statusJSON is what the tests read of /status.json.
type statusJSON struct {
	Cell         string `json:"cell"`
	Self         string `json:"self"`
	IsMaster     bool   `json:"is_master"`
	Ready        bool   `json:"ready"`
	SessionCount int    `json:"session_count"`
	Master       *struct {
		ID        string `json:"id"`
		StatusURL string `json:"status_url"`
	} `json:"master"`
	Replicas []struct {
		ID   string `json:"id"`
		Role string `json:"role"`
	} `json:"replicas"`
	Sessions []struct {
		Client    string   `json:"client"`
		Principal string   `json:"principal"`
		Locks     []string `json:"locks"`
		LeaseLeft *int64   `json:"lease_left_ns"`
	} `json:"sessions"`
	Locks []struct {
		Name    string `json:"name"`
		Mode    string `json:"mode"`
		Holders int    `json:"holders"`
		Waiters int    `json:"waiters"`
		Grants  int    `json:"grants"`
	} `json:"locks"`
}

// statusFixture is a cell with two sessions: one holds a lock, the other
// waits for it; the holder's client name is markup. The holder also took
// and released another lock three times.
type statusFixture struct {
	hc       *httpCell
	m, f     int
	lockName string
	hotName  string
}

const evilClient = `<script>alert("x")</script>&co`

func newStatusFixture(t *testing.T) *statusFixture {
	hc := newHTTPCell(t, 3, false)
	ctx := ctxT(t, 90*time.Second)
	m := hc.master(ctx)
	fx := &statusFixture{hc: hc, m: m, f: (m + 1) % 3, lockName: "/ls/t/jobs.nightly-etl", hotName: "/ls/t/hot"}
	holder, waiter := hc.client(ctx, evilClient), hc.client(ctx, "waiter")
	hot := mustOpen(t, ctx, holder, fx.hotName, client.Read|client.Write|client.Create)
	for range 3 {
		if ok, err := hot.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := hot.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h := mustOpen(t, ctx, holder, fx.lockName, client.Read|client.Write|client.Create)
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	w := mustOpen(t, ctx, waiter, fx.lockName, client.Read|client.Write)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Acquire(wctx, client.Exclusive)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return fx
}

// status reads replica i's /status.json once the status shows the lock
// with its waiter (it is recomputed at most once a second).
func (fx *statusFixture) status(t *testing.T, i int) statusJSON {
	var st statusJSON
	waitFor(t, 15*time.Second, fmt.Sprintf("replica %d's status shows the waiter", i), func() (bool, string) {
		code, body, err := fx.hc.get(i, "/status.json")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprint(code, err)
		}
		st = statusJSON{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return false, err.Error()
		}
		return len(st.Locks) > 0 && st.Locks[0].Waiters == 1 && st.Ready, body
	})
	return st
}

// The status page, scraped as HTML and as JSON: the lock a client holds
// with its waiter, the session count, principals, leases on the master,
// roles, a follower naming and linking the master, names escaped.
func TestStatusPageScraped(t *testing.T) {
	fx := newStatusFixture(t)
	hc, m, f := fx.hc, fx.m, fx.f
	ms := fx.status(t, m)
	if !ms.IsMaster || ms.Cell != "t" || ms.Self != hc.peers[m].ID || ms.SessionCount != 2 || len(ms.Sessions) != 2 {
		t.Fatalf("master's status: %+v", ms)
	}
	if len(ms.Locks) != 2 {
		t.Fatalf("master's busiest locks: %+v", ms.Locks)
	}
	if l := ms.Locks[0]; l.Name != fx.lockName || l.Mode != "exclusive" || l.Holders != 1 || l.Grants != 1 {
		t.Errorf("master's first lock row: %+v", l)
	}
	if l := ms.Locks[1]; l.Name != fx.hotName || l.Mode != "free" || l.Holders != 0 || l.Waiters != 0 || l.Grants != 3 {
		t.Errorf("master's second lock row: %+v", l)
	}
	holders := 0
	for _, s := range ms.Sessions {
		if s.Principal != cell.AnonymousPrincipal || s.LeaseLeft == nil || *s.LeaseLeft <= 0 || *s.LeaseLeft > int64(2*time.Second) {
			t.Errorf("master's session row: %+v", s)
		}
		if s.Client == evilClient && len(s.Locks) == 1 && s.Locks[0] == fx.lockName {
			holders++
		}
	}
	if holders != 1 {
		t.Errorf("the holder's session does not list its lock: %+v", ms.Sessions)
	}
	roles := map[string]string{}
	for _, r := range ms.Replicas {
		roles[r.ID] = r.Role
	}
	for i, p := range hc.peers {
		want := "follower"
		if i == m {
			want = "leader"
		}
		if roles[p.ID] != want {
			t.Errorf("master's page says replica %s is %q, want %q", p.ID, roles[p.ID], want)
		}
	}

	fs := fx.status(t, f)
	if fs.IsMaster || fs.Master == nil || fs.Master.ID != hc.peers[m].ID || fs.SessionCount != 2 {
		t.Fatalf("follower's status: %+v", fs)
	}
	if len(fs.Locks) != 1 || fs.Locks[0].Name != fx.lockName || fs.Locks[0].Grants != 0 {
		t.Errorf("a follower knows the locks in use, and grants only its master counts: %+v", fs.Locks)
	}
	if want := "http://" + hc.http[m] + "/"; fs.Master.StatusURL != want {
		t.Errorf("follower links the master at %q, want %q", fs.Master.StatusURL, want)
	}
	for _, s := range fs.Sessions {
		if s.LeaseLeft != nil {
			t.Errorf("a follower claims to know a lease: %+v", s)
		}
	}

	code, page, err := hc.get(m, "/")
	if err != nil || code != http.StatusOK {
		t.Fatalf("status page: %d %v", code, err)
	}
	for _, want := range []string{`<meta http-equiv="refresh" content="5">`, `<span id="session-count">2</span>`,
		"<code>" + fx.lockName + "</code>", `<span class="ok" id="ready">ready</span>`,
		"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;co"} {
		if !strings.Contains(page, want) {
			t.Errorf("the master's page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("the page carries the client name's markup unescaped")
	}
	_, fpage, _ := hc.get(f, "/")
	if want := `<a id="master-link" href="http://` + hc.http[m] + `/">`; !strings.Contains(fpage, want) {
		t.Errorf("the follower's page lacks the master link %q", want)
	}
}

// On a cell with mutual TLS, each session's principal is its
// certificate's name, on the page and in the JSON (as the admin sees
// them: TestStatusNamesOnlyForAuthenticatedReaders has the others).
func TestStatusPageShowsPrincipals(t *testing.T) {
	hc := newHTTPCellTLS(t, 3, false, fixtures.TestCerts(t, "alice", "bob"))
	ctx := ctxT(t, 60*time.Second)
	m := hc.master(ctx)
	hc.client(ctx, "alice")
	hc.client(ctx, "bob")
	var st statusJSON
	waitFor(t, 15*time.Second, "both sessions listed", func() (bool, string) {
		_, body, err := hc.get(m, "/status.json")
		st = statusJSON{}
		return err == nil && json.Unmarshal([]byte(body), &st) == nil && st.SessionCount == 2, body
	})
	got := map[string]bool{}
	for _, s := range st.Sessions {
		got[s.Principal] = true
	}
	if !got["alice"] || !got["bob"] || len(got) != 2 {
		t.Errorf("principals on the status: %v", got)
	}
	if _, page, _ := hc.get(m, "/"); !strings.Contains(page, "<td>alice</td>") || !strings.Contains(page, "<td>bob</td>") {
		t.Errorf("the page does not show both principals:\n%s", page)
	}
}

// chromium returns the headless browser's path, or skips the test saying
// why (make browser-deps installs it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (make browser-deps installs Debian's as root): the status page is tested by scraping only")
	return ""
}

// The status page as a real browser renders it: the DOM shows the lock a
// client holds and the session count, and a screenshot is a PNG of the
// page (pixel variety, the green "ready" badge drawn).
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	fx := newStatusFixture(t)
	fx.status(t, fx.m)
	url := "http://" + fx.hc.http[fx.m] + "/"
	profile := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--user-data-dir=" + profile}, args...)
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, out)
		}
		return out
	}
	dom := string(run("--dump-dom", url))
	for _, want := range []string{`<span id="session-count">2</span>`, "<code>" + fx.lockName + "</code>",
		`id="self">` + fx.hc.peers[fx.m].ID + "<", "&lt;script&gt;"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered DOM lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
	shot := t.TempDir() + "/status.png"
	if d := os.Getenv("LOCKCELL_SCREENSHOT_DIR"); d != "" { // to look at it
		shot = d + "/status.png"
	}
	run("--screenshot="+shot, "--window-size=1200,900", "--hide-scrollbars", url)
	checkScreenshot(t, shot, 1200, 900)
}

// checkScreenshot decodes the PNG and checks it shows a page: the size
// asked for, many colours (text is anti-aliased), a white-ish background
// that is not all there is, and the green of the "ready" badge.
func checkScreenshot(t *testing.T, file string, w, h int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	colours := map[[3]uint32]int{}
	badge := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := [3]uint32{r >> 8, g >> 8, bl >> 8}
			colours[c]++
			if c == [3]uint32{0x2e, 0x7d, 0x32} {
				badge++
			}
		}
	}
	top, topN := [3]uint32{}, 0
	for c, n := range colours {
		if n > topN {
			top, topN = c, n
		}
	}
	t.Logf("screenshot: %d colours, background %v on %.0f%% of pixels, %d badge pixels", len(colours), top, 100*float64(topN)/float64(w*h), badge)
	if len(colours) < 32 {
		t.Errorf("screenshot has %d colours: blank or nearly", len(colours))
	}
	if topN > w*h*99/100 {
		t.Errorf("one colour covers %d of %d pixels: the page is blank", topN, w*h)
	}
	if badge < 100 {
		t.Errorf("the green ready badge covers %d pixels", badge)
	}
}
