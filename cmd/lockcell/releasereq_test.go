//go:build unix

package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/fixtures"
)

// `lockcell request-release` and `lockcell lock --on-release-request`
// through the real binary: a lock run's command is sent the chosen signal
// when another session asks for the lock, lockcell says who asked and
// why, and the command's exit (here, on that signal) is lock's; asking
// again once the lock is free asks nobody (--json for scripts); a missing
// --reason or an unknown signal is a usage error, a missing name exit 1.
func TestRequestReleaseVerbBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	run := func(args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), base...), args...)...)
	}

	if res := run("request-release", "lk/rr"); res.code != exitUsage || !strings.Contains(res.stderr, "--reason") {
		t.Fatalf("request-release without --reason: exit %d, stderr %q; want %d", res.code, res.stderr, exitUsage)
	}
	if res := run("lock", "--on-release-request", "KILL", "lk/rr", "--", "/bin/true"); res.code != exitUsage || !strings.Contains(res.stderr, "USR1") {
		t.Fatalf("lock --on-release-request KILL: exit %d, stderr %q; want %d naming the signals", res.code, res.stderr, exitUsage)
	}
	if res := run("request-release", "lk/none", "--reason", "x"); res.code != exitError || !strings.Contains(res.stderr, "not found") {
		t.Fatalf("request-release of a missing name: exit %d, stderr %q; want %d", res.code, res.stderr, exitError)
	}

	dir := t.TempDir()
	pidFile, usr1File := filepath.Join(dir, "pid"), filepath.Join(dir, "usr1")
	// The command winds down on SIGUSR1 (exit 5) and ignores nothing else.
	script := `trap 'echo "$LOCKCELL_LOCK" > "$1"; exit 5' USR1; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; while :; do sleep 0.05; done`
	res := make(chan result, 1)
	go func() {
		res <- runCLI(t, bin, "", nil, append(append([]string(nil), base...),
			"lock", "--on-release-request", "sigusr1", "lk/rr", "--", "/bin/sh", "-c", script, pidFile, usr1File)...)
	}()
	pid, err := strconv.Atoi(waitFile(t, pidFile, res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	const reason = "deploy 4.2 needs it"
	if got := run("request-release", "lk/rr", "--reason", reason); got.code != exitOK ||
		got.stdout != "asked the holder of /ls/t/lk/rr to release it\n" {
		t.Fatalf("request-release: exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
	if lock := waitFile(t, usr1File, res); lock != "/ls/t/lk/rr" {
		t.Fatalf("the command's SIGUSR1 trap wrote %q", lock)
	}
	got := waitResult(t, res, 20*time.Second)
	if got.code != 5 {
		t.Fatalf("lock: exit %d, stderr %q; want the command's 5", got.code, got.stderr)
	}
	for _, want := range []string{"asks for /ls/t/lk/rr", strconv.Quote(reason), "SIGUSR1"} {
		if !strings.Contains(got.stderr, want) {
			t.Errorf("lock's stderr %q does not say %q", got.stderr, want)
		}
	}

	// The lock is free now: nobody is asked.
	var js requestReleaseJSON
	if got := run("--json", "request-release", "lk/rr", "--reason", reason); got.code != exitOK ||
		json.Unmarshal([]byte(got.stdout), &js) != nil || js != (requestReleaseJSON{Name: "/ls/t/lk/rr", Reason: reason, Asked: 0}) {
		t.Fatalf("--json request-release of a free lock: exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
}
