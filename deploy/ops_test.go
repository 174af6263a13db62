package deploy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// TestMetricsNamedInDocsExist scrapes a real replica's /metrics and checks
// that every lockcell_ (and process_/go_) metric the operator's guide and
// the alert rules name is one it exports.
func TestMetricsNamedInDocsExist(t *testing.T) {
	daemon, _ := binaries(t)
	ports := fixtures.FreePorts(t, 3)
	peer := fmt.Sprintf("1=127.0.0.1:%d/127.0.0.1:%d", ports[0], ports[1])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, daemon, "serve", "--insecure", "--id", "1", "--data", t.TempDir(), "--peers", peer,
		"--metrics", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	cmd.Env = append(os.Environ(), "LOCKCELL_AUDIT_LOG=off")
	logf, err := os.Create(filepath.Join(t.TempDir(), "replica.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	exported := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, _ := httpGet(url + "/readyz")
		if ready == 200 {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the replica did not become ready; its log:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
	// One call, so that the per-method call metrics have a series.
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	c, err := client.Dial(cctx, client.Config{Cell: "local", Replicas: []string{fmt.Sprintf("127.0.0.1:%d", ports[0])}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Open(cctx, "/ls/local/probe", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	c.Close()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		exported[name] = true
	}
	resp.Body.Close()
	if !exported["lockcell_ready"] || !exported["lockcell_log_store_seconds_bucket"] {
		t.Fatalf("scrape parsed badly: %d names", len(exported))
	}
	// Series a one-replica plain cell has none of, which the cell's own
	// tests scrape from cells that have them; and a label the pattern
	// below takes for a metric.
	conditional := map[string]string{
		"lockcell_follower_lag_entries":          "a master with followers (cell TestOperatorMetrics)",
		"lockcell_follower_last_contact_seconds": "a master with followers (cell TestOperatorMetrics)",
		"lockcell_peer_rtt_seconds":              "a replica that led followers (cell TestOperatorMetrics)",
		"lockcell_certificate_expiry_seconds":    "a TLS cell (cell TestCertificateExpiryMetrics)",
		"go_version":                             "a label of lockcell_build_info",
	}
	suffix := regexp.MustCompile(`_(bucket|count|sum)$`)
	metric := regexp.MustCompile(`\b((?:lockcell|process|go)_[a-z_]+[a-z])\b`)
	named := 0
	for _, f := range []string{"../docs/operations.md", "prometheus/alerts.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range metric.FindAllStringSubmatch(line, -1) {
				n := m[1]
				named++
				if strings.HasPrefix(n, "lockcell_client_cache_") { // the client library's, not a replica's
					continue
				}
				if strings.HasPrefix(n, "lockcell_mirror_") { // the mirror's (cmd/lockcelld TestMirrorProcess checks them)
					continue
				}
				if strings.HasPrefix(n, "lockcell_proxy_") { // a proxy's (cmd/lockcelld TestProxyProcessServesAndDiesCleanly checks them)
					continue
				}
				if _, ok := conditional[suffix.ReplaceAllString(n, "")]; ok {
					continue
				}
				if !exported[n] && !exported[n+"_bucket"] && !exported[n+"_total"] {
					t.Errorf("%s:%d names %s, which a replica does not export", f, i+1, n)
				}
			}
		}
	}
	if named < 10 {
		t.Errorf("only %d metric names found in the docs and alert rules", named)
	}
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReplicaRejoinsWithEmptyDataDir is what docs/operations.md tells an
// operator whose replica lost its disk: with the other four healthy and
// caught up, start it again at the same address, with the same id and
// certificate and an empty data folder. It bootstraps itself with the
// same peers list (the same first entry every replica wrote), the master
// finds its log too short and, the log having been compacted behind a
// snapshot, sends the snapshot; the replica ends with the same state as
// the others. Real processes with mutual TLS.
func TestReplicaRejoinsWithEmptyDataDir(t *testing.T) {
	daemon, _ := binaries(t)
	certs := fixtures.TestCerts(t)
	// Snapshot often and keep few entries behind it, so that the writes
	// made while the replica is gone are no longer in anyone's log.
	pc := fixtures.NewProcCellWith(t, daemon, "rejoin", 5, 3*time.Second, fixtures.ProcOptions{TLS: certs,
		ExtraArgs: []string{"--snapshot-interval", "200ms", "--snapshot-threshold", "32", "--trailing-logs", "16"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The processes are started, not yet listening: a client reports a
	// cell that refuses every connection at once, so wait for a master.
	pc.MasterIndex(60 * time.Second)
	c, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			h, err := c.Open(ctx, pc.Name(fmt.Sprintf("f%03d", i)), client.Read|client.Write|client.Create)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.SetContents(ctx, []byte(fmt.Sprint("v", i))); err != nil {
				t.Fatal(err)
			}
			h.Close()
		}
	}
	write(0, 50)
	// The lost replica: a follower (the master is stopped and replaced the
	// same way, once the cell has elected another).
	m := pc.MasterIndex(30 * time.Second)
	lost := (m + 2) % pc.N()
	pc.Kill(lost)
	if err := os.RemoveAll(pc.DataDir(lost)); err != nil {
		t.Fatal(err)
	}
	write(50, 150) // 100 writes: far more than --trailing-logs behind the next snapshot
	// The procedure: the other four agree on commit and applied index.
	waitCaughtUp(ctx, t, pc, lost)
	// Every other replica has snapshotted well past the lost replica's
	// one entry (its bootstrap configuration, index 1) plus the trailing
	// logs, so its log no longer reaches back: only a snapshot can bring
	// the lost replica up.
	for i := range pc.N() {
		if i != lost {
			waitSnapshotPast(t, pc.DataDir(i), 64)
		}
	}
	pc.Start(lost)
	idx, hash := converge(ctx, t, pc)
	t.Logf("all five replicas at index %d, state hash %x", idx, hash[:8])
	// The rejoined replica serves reads as a member: ask it for its view.
	st, err := admin.QueryStatusWith(ctx, pc.ClientConfig(), pc.Addrs()[lost])
	if err != nil {
		t.Fatal(err)
	}
	if st.Nodes < 150 || st.Master == "" {
		t.Errorf("rejoined replica sees %d nodes and master %q, want >= 150 and a master", st.Nodes, st.Master)
	}
	h, err := c.Open(ctx, pc.Name("f149"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := h.GetContentsAndStat(ctx); err != nil || string(b) != "v149" {
		t.Errorf("f149: %q, %v", b, err)
	}
}

// waitSnapshotPast waits until a replica's data folder holds a completed
// snapshot (raft names them term-index-millis) at index min or later.
func waitSnapshotPast(t *testing.T, dir string, min uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
		for _, e := range ents {
			var term, idx, ms uint64
			if n, _ := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &idx, &ms); n == 3 && !strings.HasSuffix(e.Name(), ".tmp") && idx >= min {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no snapshot at index %d or later", dir, min)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
}

// waitCaughtUp waits until every replica but skip reports the same commit
// and applied index: each then holds every committed entry.
func waitCaughtUp(ctx context.Context, t *testing.T, pc *fixtures.ProcCell, skip int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var idx []uint64
		for i := range pc.N() {
			if i == skip {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := admin.QueryStatusWith(cctx, pc.ClientConfig(), pc.Addrs()[i])
			cancel()
			if err == nil && st.CommitIndex == st.AppliedIndex {
				idx = append(idx, st.CommitIndex)
			}
		}
		same := len(idx) == pc.N()-1
		for _, x := range idx {
			same = same && x == idx[0]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other replicas did not agree on an index: %v", idx)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
}

// converge waits until all replicas report the same state hash at the
// same index.
func converge(ctx context.Context, t *testing.T, pc *fixtures.ProcCell) (uint64, []byte) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		var idx []uint64
		var hashes []string
		for i := range pc.N() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			n, h, err := admin.StateHash(cctx, pc.ClientConfig(), pc.Addrs()[i])
			cancel()
			if err != nil {
				last = err.Error()
				break
			}
			idx, hashes = append(idx, n), append(hashes, string(h))
		}
		if len(idx) == pc.N() {
			same := true
			for i := range idx {
				same = same && idx[i] == idx[0] && hashes[i] == hashes[0]
			}
			if same {
				return idx[0], []byte(hashes[0])
			}
			last = fmt.Sprintf("indexes %v", idx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not converge: %s", last)
		}
		time.Sleep(100 * time.Millisecond) // poll
	}
}

// TestComposeCertificatesAndHealthCheck runs the compose file's certs
// service command (into a temporary folder instead of the volume), checks
// it makes every file the replicas, their health checks and the cli
// service name, with each replica's host name in its certificate; then
// runs a replica's health check command against a real TLS cell made from
// those certificates: it passes once the replica knows a master, with the
// unprivileged probe certificate, and fails when the replica is down.
func TestComposeCertificatesAndHealthCheck(t *testing.T) {
	daemon, cli := binaries(t)
	top, reps := composeReplicas(t)
	certsCmd := strs(top, "services", "certs", "command")
	const vol = "/etc/lockcell/tls"
	dir := t.TempDir()
	local := func(s string) string { return strings.ReplaceAll(s, vol, dir) }
	var args []string
	for _, a := range certsCmd {
		args = append(args, local(a))
	}
	if out, err := exec.Command(daemon, args...).CombinedOutput(); err != nil {
		t.Fatalf("lockcelld %v: %v\n%s", args, err, out)
	}
	// Every certificate path the compose file names must now exist.
	var named []string
	for _, r := range reps {
		named = append(named, r.settings["cert"], r.settings["key"], r.settings["ca"])
		named = append(named, strs(r.svc, "healthcheck", "test")...)
	}
	for _, v := range get(top, "services", "cli", "environment").(map[string]any) {
		named = append(named, fmt.Sprint(v))
	}
	for _, p := range named {
		if strings.HasPrefix(p, vol+"/") {
			if _, err := os.Stat(local(p)); err != nil {
				t.Errorf("compose names %s, which the certs service does not make: %v", p, err)
			}
		}
	}
	for _, r := range reps {
		host := strings.Split(r.settings["listen"], ":")[0]
		pair, err := tls.LoadX509KeyPair(local(r.settings["cert"]), local(r.settings["key"]))
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := leaf.VerifyHostname(host); err != nil {
			t.Errorf("%s: its certificate does not name %s: %v", r.service, host, err)
		}
	}

	// A real three-replica TLS cell on loopback from those certificates,
	// replica i with compose replica i's certificate.
	peers := fixtures.FreePeers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	procs := make([]*exec.Cmd, len(peers))
	for i, p := range peers {
		c := exec.CommandContext(ctx, daemon, "serve", "--cell", "demo", "--id", p.ID, "--data", t.TempDir(),
			"--peers", cell.FormatPeers(peers), "--cert", filepath.Join(dir, "replica-"+p.ID+".crt"),
			"--key", filepath.Join(dir, "replica-"+p.ID+".key"), "--ca", filepath.Join(dir, "ca.crt"))
		c.Env = append(os.Environ(), "LOCKCELL_AUDIT_LOG=off")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = c
		defer c.Wait()
	}
	defer cancel()
	hc := strs(reps[0].svc, "healthcheck", "test")[2:]
	probe := func(addr string) (int, string) {
		var a []string
		for i, x := range hc {
			switch {
			case i > 0 && hc[i-1] == "--replicas":
				x = addr
			default:
				x = local(x)
			}
			a = append(a, x)
		}
		c := exec.CommandContext(ctx, cli, a...)
		c.Env = append(os.Environ(), "LOCKCELL_CERT=", "LOCKCELL_KEY=", "LOCKCELL_CA=", "LOCKCELL_REPLICAS=", "LOCKCELL_CELL=")
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			return -1, err.Error()
		}
		return 0, string(out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out := probe(peers[0].ClientAddr)
		if code == 0 {
			if !strings.Contains(out, "cell demo: master") {
				t.Errorf("health check passed, printing %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health check never passed: exit %d\n%s", code, out)
		}
		time.Sleep(100 * time.Millisecond) // poll
	}
	procs[1].Process.Kill()
	procs[1].Wait()
	if code, out := probe(peers[1].ClientAddr); code == 0 {
		t.Errorf("the health check passed on a killed replica:\n%s", out)
	}
}
