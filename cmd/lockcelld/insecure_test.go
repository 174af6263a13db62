package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/fixtures"
)

// startForBanner starts the daemon with args and returns what it wrote on
// stderr up to and including the line that contains until, failing the
// test if it exits or says nothing of the kind within a minute.
func startForBanner(t *testing.T, bin, until string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	lines := make(chan string)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		cmd.Wait()
	}()
	var got strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%v exited before saying %q; stderr:\n%s", args, until, got.String())
			}
			got.WriteString(l + "\n")
			if strings.Contains(l, until) {
				go func() {
					for range lines {
					}
				}()
				return got.String()
			}
		case <-timeout:
			t.Fatalf("%v did not say %q; stderr:\n%s", args, until, got.String())
		}
	}
}

// `serve` without TLS refuses to start unless given --insecure, and then
// says on stderr, at every start, what is open to whom; it refuses a
// non-loopback address without --insecure-bind-any. `dev` says the same.
func TestServeInsecureBanner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := fixtures.BuildLockcelld(t)
	ports := fixtures.FreePorts(t, 2)
	peers := fmt.Sprintf("1=127.0.0.1:%d/127.0.0.1:%d", ports[0], ports[1])
	serve := []string{"serve", "--id", "1", "--data", t.TempDir(), "--peers", peers}

	// A daemon that starts anyway is killed after a while: the test
	// fails, it does not hang.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, serve...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--insecure") {
		t.Fatalf("serve without TLS or --insecure: %v\n%s", err, out)
	}
	wide := []string{"serve", "--id", "1", "--data", t.TempDir(), "--insecure",
		"--peers", fmt.Sprintf("1=0.0.0.0:%d/127.0.0.1:%d", ports[0], ports[1])}
	out, err = exec.CommandContext(ctx, bin, wide...).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "loopback") {
		t.Fatalf("serve --insecure on 0.0.0.0: %v\n%s", err, out)
	}

	banner := startForBanner(t, bin, "For a real cell", append(serve, "--insecure")...)
	for _, want := range []string{"INSECURE", "no TLS", "127.0.0.1:" + fmt.Sprint(ports[0]), "principal \"anonymous\", the cell admin",
		"127.0.0.1:" + fmt.Sprint(ports[1]), "any peer is accepted", "loopback only"} {
		if !strings.Contains(banner, want) {
			t.Errorf("serve --insecure banner lacks %q:\n%s", want, banner)
		}
	}

	base := freeRun(t, 2)
	dev := startForBanner(t, bin, "For a real cell", "dev", "--data", t.TempDir(), "--replicas", "1",
		"--port", fmt.Sprint(base), "--raft-port", fmt.Sprint(base+1), "--metrics-port", "0")
	if !strings.Contains(dev, "INSECURE") || !strings.Contains(dev, fmt.Sprint(base+1)) {
		t.Errorf("dev banner:\n%s", dev)
	}
}
