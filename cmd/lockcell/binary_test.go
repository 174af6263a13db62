package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"lockcell/fixtures"
)

// TestBinary runs the real lockcell binary as a subprocess against a real
// cell: exit codes and streams as a script sees them.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}

	runBin := func(stdin string, flags []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, stdin, nil, append(append([]string(nil), flags...), args...)...)
	}
	want := func(res result, code int, stderr string, args ...string) {
		t.Helper()
		if res.code != code || !strings.Contains(res.stderr, stderr) {
			t.Fatalf("lockcell %s: exit %d, stderr %q; want exit %d mentioning %q",
				strings.Join(args, " "), res.code, res.stderr, code, stderr)
		}
	}

	res := runBin("", flags, "put", "bin/flag", "on")
	want(res, exitOK, "", "put")

	// Every verb through the real binary, for people and with --json.
	seqOut := runBin("", flags, "lock", "bin/lk", "--", "sh", "-c", "echo $LOCKCELL_SEQUENCER")
	want(seqOut, exitOK, "", "lock")
	seq := strings.TrimSpace(seqOut.stdout)
	for _, verb := range [][]string{
		{"put", "bin/v", "x"}, {"cat", "bin/v"}, {"stat", "bin/v"}, {"ls", "bin"}, {"ls", "-l", "bin"},
		{"mkdir", "-p", "bin/d1/d2"}, {"touch", "bin/t"}, {"status"}, {"sessions"}, {"seq", "show", seq},
		{"put", "/ls/t/acl/ops", "alice"}, {"acl", "set", "bin/v", "--read", "ops", "--admin", ""}, {"acl", "get", "bin/v"},
		{"rm", "bin/t"},
	} {
		human := runBin("", flags, verb...)
		want(human, exitOK, "", verb...)
		if verb[0] == "rm" {
			runBin("", flags, "touch", "bin/t") // recreate for the --json run
		}
		js := runBin("", flags, append([]string{"--json"}, verb...)...)
		want(js, exitOK, "", append([]string{"--json"}, verb...)...)
		if out := strings.TrimSpace(js.stdout); out != "" && !json.Valid([]byte(out)) {
			t.Fatalf("lockcell --json %s printed %q", strings.Join(verb, " "), out)
		}
		if verb[0] == "cat" || verb[0] == "stat" || verb[0] == "ls" || verb[0] == "status" || verb[0] == "sessions" || verb[0] == "seq" ||
			verb[0] == "acl" && verb[1] == "get" {
			if strings.TrimSpace(human.stdout) == "" || strings.TrimSpace(js.stdout) == "" {
				t.Fatalf("lockcell %s printed nothing", strings.Join(verb, " "))
			}
		}
	}
	// The lock was released when its command exited: the sequencer is stale.
	want(runBin("", flags, "seq", "check", seq), exitError, "", "seq check (stale)")
	if res.stdout != "" || res.stderr != "" {
		t.Fatalf("put printed %q / %q", res.stdout, res.stderr)
	}
	if res = runBin("", flags, "cat", "bin/flag"); res.code != exitOK || res.stdout != "on" {
		t.Fatalf("cat: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	res = runBin("", flags, "--json", "stat", "bin/flag")
	want(res, exitOK, "", "--json stat")
	var st statJSON
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.Name != "/ls/t/bin/flag" || st.Size != 2 || st.Dir {
		t.Fatalf("stat --json: %q: %v %+v", res.stdout, err, st)
	}

	want(runBin("", flags, "cat", "/ls/t/missing"), exitError, "not found", "cat /ls/t/missing")
	want(runBin("", flags, "cat", "bad//name"), exitError, "invalid name", "cat bad//name")
	want(runBin("", flags, "put"), exitUsage, "want exactly", "put")
	want(runBin("", flags, "acl", "set", "bin/v"), exitUsage, "at least one", "acl set without flags")
	// A file named that is deleted later denies all but the admin; acl
	// get says so.
	want(runBin("", flags, "rm", "/ls/t/acl/ops"), exitOK, "", "rm acl/ops")
	res = runBin("", flags, "acl", "get", "bin/v")
	if res.code != exitOK || !strings.Contains(res.stdout, "read        ops (missing") || !strings.Contains(res.stdout, "change-acl  (default") {
		t.Fatalf("acl get: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	// The shell, fed a script on a pipe (not a terminal).
	res = runBin("mkdir sh\ncd sh\nput f hello\ncat f\ncat missing\npwd\n", flags, "shell")
	if res.code != exitOK || res.stdout != "hello/ls/t/sh\n" || !strings.Contains(res.stderr, "not found") {
		t.Fatalf("shell: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// acl get|set take names relative to the shell's folder too.
	want(runBin("", flags, "put", "/ls/t/acl/ops", "alice"), exitOK, "", "put acl/ops")
	res = runBin("cd sh\nacl set f --read ops\nacl get f\n", flags, "shell")
	if res.code != exitOK || !strings.Contains(res.stdout, "read        ops") {
		t.Fatalf("shell acl: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	t.Run("ShellOnTerminal", func(t *testing.T) {
		hist := filepath.Join(t.TempDir(), "history")
		cmd := exec.CommandContext(t.Context(), bin, append(append([]string(nil), flags...), "shell")...)
		cmd.Env = append(cmd.Environ(), "LOCKCELL_HISTORY="+hist, "TERM=dumb")
		// A real size: readline completes nothing on a 0-column terminal.
		tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
		if err != nil {
			t.Skipf("no pseudo-terminal: %v", err)
		}
		defer tty.Close()
		var mu sync.Mutex
		var out bytes.Buffer
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := tty.Read(buf)
				mu.Lock()
				out.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		waitForN := func(s string, n int) {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				ok := strings.Count(out.String(), s) >= n
				mu.Unlock()
				if ok {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("terminal never showed %q %d times; got %q", s, n, out.String())
		}
		waitFor := func(s string) { t.Helper(); waitForN(s, 1) }
		waitForAfter := func(marker, s string) {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				o := out.String()
				mu.Unlock()
				if i := strings.Index(o, marker); i >= 0 && strings.Contains(o[i+len(marker):], s) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Fatalf("terminal never showed %q after %q", s, marker)
		}
		waitFor("lockcell:t /ls/t> ")
		tty.WriteString("mkdir tty\r")
		waitForN("lockcell:t /ls/t> ", 2) // mkdir done: the name exists
		// Tab completes the partial name to the directory.
		tty.WriteString("cd tt\t")
		waitFor("cd tty/")
		tty.WriteString("\r")
		waitFor("lockcell:t /ls/t/tty> ")
		// A relative name resolves against the current directory, and the
		// Up arrow recalls the previous line.
		// (stat's output, unlike anything typed, names the full path.)
		tty.WriteString("put f relative-hi\r")
		tty.WriteString("stat f\r")
		waitForN("name:               /ls/t/tty/f", 1)
		tty.WriteString("\x1b[A")
		waitForAfter("name:               /ls/t/tty/f", "stat f")
		tty.WriteString("\r")
		waitForN("name:               /ls/t/tty/f", 2)
		// Ctrl-C during a running watch cancels it and returns to the
		// prompt (wait for a prompt drawn after the ^C: typing ahead into
		// a command that is still running is another matter).
		tty.WriteString("watch /ls/t/tty\r")
		waitFor("watching /ls/t/tty")
		tty.WriteString("\x03")
		waitFor("watching /ls/t/tty\r\n^C")
		waitForAfter("watching /ls/t/tty\r\n^C", "lockcell:t /ls/t/tty> ")
		tty.WriteString("half a line\x03") // Ctrl-C at the prompt drops the line
		tty.WriteString("pwd\r")
		waitFor("/ls/t/tty\r\n")
		tty.WriteString("\x04") // Ctrl-D
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("shell on a terminal: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("shell did not exit on Ctrl-D")
		}
		if h, err := os.ReadFile(hist); err != nil || !strings.Contains(string(h), "mkdir tty") {
			t.Fatalf("history %q: %v", h, err)
		}
	})

	var dead []string
	for _, p := range fixtures.FreePorts(t, 2) {
		dead = append(dead, "127.0.0.1:"+strconv.Itoa(p))
	}
	want(runBin("", []string{"--cell", "t", "--replicas", strings.Join(dead, ","), "--timeout", "5s"}, "status"),
		exitError, "no quorum", "status (dead cell)")
}

// cliOnCell starts a one-replica plain cell "t" and returns a runner of
// the real binary against it (the cell's flags before args).
func cliOnCell(t *testing.T) func(args ...string) result {
	t.Helper()
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	return func(args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}
}

// succeeding wraps a runner (cliOnCell's) into one that fails the test
// unless the command exits 0.
func succeeding(t *testing.T, run func(args ...string) result) func(args ...string) result {
	return func(args ...string) result {
		t.Helper()
		res := run(args...)
		if res.code != exitOK {
			t.Fatalf("lockcell %s: exit %d, stderr %q", strings.Join(args, " "), res.code, res.stderr)
		}
		return res
	}
}

// buildCLI returns the lockcell binary, built once per test binary.
func buildCLI(t *testing.T) string {
	t.Helper()
	return fixtures.BuildLockcell(t)
}

// runCLI runs the binary as a subprocess with stdin and extra environment,
// and returns its exit code and streams.
func runCLI(t *testing.T, bin, stdin string, env []string, args ...string) result {
	t.Helper()
	code, stdout, stderr := fixtures.RunBinary(t, bin, stdin, env, args...)
	return result{code, stdout, stderr}
}
