package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A `lockcelld mirror` process finds a global cell and two targets by
// name in a cells file, copies the subtree into both, follows a write
// and a delete, reports each target's lag (zero once in step) and its
// start re-sync on /metrics, and exits 0 on SIGTERM. Without a way to
// find cells it refuses to start, with exit status 2.
func TestMirrorProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockcelld")
	}
	bin := fixtures.BuildLockcelld(t)
	if out, err := exec.Command(bin, "mirror", "--from", "global", "--subtree", "/ls/global/x", "--to", "east").CombinedOutput(); exitCode(err) != 2 ||
		!strings.Contains(string(out), "--cells") {
		t.Fatalf("without --cells: %v\n%s", err, out)
	}
	cells := fixtures.NewCells(t, 1, fixtures.Options{}, "global", "east", "west")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := cells["global"].Client(t)
	h, err := g.Open(ctx, "/ls/global/config/flag", client.Write|client.Create, client.WithParents())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("on")); err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePorts(t, 1)[0])
	p := &joinProc{cmd: exec.Command(bin, "--log-level", "warn", "mirror", "--cells", fixtures.WriteCellsFile(t, cells),
		"--from", "global", "--subtree", "/ls/global/config", "--to", "east,west", "--http", httpAddr, "--retry", "500ms"),
		done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGKILL); <-p.done })

	clients := map[string]*client.Client{"east": cells["east"].Client(t), "west": cells["west"].Client(t)}
	// read returns a target's copy of the flag ("" when missing).
	read := func(target string) (string, error) {
		cl := clients[target]
		h, err := cl.Open(ctx, "/ls/"+target+"/global/config/flag", client.Read)
		if errors.Is(err, client.ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		defer h.Close()
		data, _, err := h.GetContentsAndStat(ctx)
		return string(data), err
	}
	want := func(v string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for _, target := range []string{"east", "west"} {
			for {
				got, err := read(target)
				if err == nil && got == v {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s's copy: %q, %v; want %q\n%s", target, got, err, v, p.output())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	want("on")
	if err := h.SetContents(ctx, []byte("off")); err != nil {
		t.Fatal(err)
	}
	want("off")
	if err := h.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	want("")

	deadline := time.Now().Add(30 * time.Second)
	for {
		body := scrape(t, httpAddr)
		if strings.Contains(body, `lockcell_mirror_lag_seconds{target="east"} 0`+"\n") &&
			strings.Contains(body, `lockcell_mirror_lag_seconds{target="west"} 0`+"\n") &&
			strings.Contains(body, `lockcell_mirror_resyncs_total{reason="start",target="east"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed both targets in step:\n%s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every mirror metric the operator's guide and the alert rules name is
	// one the mirror exports.
	body := scrape(t, httpAddr)
	named := 0
	for _, f := range []string{"../../docs/operations.md", "../../deploy/prometheus/alerts.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`\blockcell_mirror_[a-z_]+[a-z]\b`).FindAllString(string(b), -1) {
			named++
			if !strings.Contains(body, "\n"+n+"{") {
				t.Errorf("%s names %s, which the mirror does not export", f, n)
			}
		}
	}
	if named < 3 {
		t.Errorf("only %d mirror metric names in the docs and alert rules", named)
	}
	p.stop(t)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, p.output())
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// scrape fetches addr's /metrics (the error's text if it fails), within
// 10 s: a benchmark's progress line must not hang on a starved process.
func scrape(t testing.TB, addr string) string {
	t.Helper()
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	io.Copy(&b, resp.Body)
	return b.String()
}
