package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/fixtures"
)

// A real `lockcelld serve` process serves its HTTP port (--metrics):
// /healthz, /readyz once it is the master of its one-replica cell, the
// status page, /metrics with the process collector, and /debug/pprof/
// only with --pprof.
func TestServeHTTPPort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := fixtures.BuildLockcelld(t)
	for _, pprof := range []bool{false, true} {
		t.Run(fmt.Sprintf("pprof=%v", pprof), func(t *testing.T) {
			peer := fixtures.FreePeers(t, 1)[0]
			httpAddr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePorts(t, 1)[0])
			args := []string{"--log-level", "warn", "serve", "--id", peer.ID, "--cell", "web", "--data", t.TempDir(),
				"--peers", cell.FormatPeers([]cell.Peer{peer}), "--insecure", "--metrics", httpAddr}
			if pprof {
				args = append(args, "--pprof")
			}
			cmd := exec.Command(bin, args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			get := func(path string) (int, string) {
				resp, err := http.Get("http://" + httpAddr + path)
				if err != nil {
					return 0, err.Error()
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			deadline := time.Now().Add(60 * time.Second)
			for {
				code, body := get("/readyz")
				if code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the replica never turned ready: %d %s", code, body)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if code, body := get("/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
				t.Errorf("healthz: %d %q", code, body)
			}
			if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, `<code id="cell">web</code>`) {
				t.Errorf("status page: %d\n%s", code, body)
			}
			if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "process_resident_memory_bytes") ||
				!strings.Contains(body, "lockcell_leader_changes_total") {
				t.Errorf("metrics: %d, process or leader-change figures missing", code)
			}
			want := http.StatusNotFound
			if pprof {
				want = http.StatusOK
			}
			if code, _ := get("/debug/pprof/"); code != want {
				t.Errorf("/debug/pprof/ with pprof %v: %d, want %d", pprof, code, want)
			}
		})
	}
}
