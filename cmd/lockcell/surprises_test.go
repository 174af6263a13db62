//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Options go where urfave/cli looks for them, wherever they were typed
// before "--"; everything else stays in its place.
func TestArrangeArgs(t *testing.T) {
	app := newApp(&env{})
	for _, tc := range []struct{ in, want string }{
		{"status --json", "--json status"},
		{"ls --json /ls/local", "--json ls /ls/local"},
		{"ls /ls/local --json", "--json ls /ls/local"},
		{"ls /ls/local -l --json -R", "--json ls -l -R /ls/local"},
		{"--json ls -l x", "--json ls -l x"},
		{"put a b --timeout 5s --if-generation 3", "--timeout 5s put --if-generation 3 a b"},
		{"put a b --timeout=5s --if-generation=3", "--timeout=5s put --if-generation=3 a b"},
		{"ls x --cell c --replicas r1,r2 --cert a --key b --ca c --verbose", "--cell c --replicas r1,r2 --cert a --key b --ca c --verbose ls x"},
		// Values that look like options but name none stay arguments.
		{"put k -5", "put k -5"},
		{"put k - --json", "--json put k -"},
		{"put k --bogus", "put k --bogus"},
		// -- ends the options; lock's command line is left alone.
		{"put -- k --json", "put -- k --json"},
		{"lock n --try --json -- sh -c x --json --try", "--json lock --try n -- sh -c x --json --try"},
		{"lock n --wait 5s -- true", "lock --wait 5s n -- true"},
		// Sub-verbs take their own options.
		{"acl set n --read ops --json", "--json acl set --read ops n"},
		{"seq check S --json", "--json seq check S"},
		{"ls x --help", "ls --help x"},
		{"nosuch --json x", "nosuch --json x"},
		{"", ""},
	} {
		in := strings.Fields(tc.in)
		if got := strings.Join(arrangeArgs(app, in), " "); got != tc.want {
			t.Errorf("arrangeArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCLIWithoutSurprises runs what a new user would try, through the
// real binary against a real cell.
func TestCLIWithoutSurprises(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	const lease = 2 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	addrs := strings.Join(c.Addrs(), ",")
	flags := []string{"--cell", "t", "--replicas", addrs}
	runBin := func(stdin string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, stdin, nil, args...)
	}
	with := func(args ...string) []string { return append(append([]string(nil), flags...), args...) }
	r := cliRunner{t, with("--timeout", "20s")} // in-process, for looking around
	other := c.Client(t)

	t.Run("OptionsAfterTheVerb", func(t *testing.T) {
		ok := func(res result, args ...string) result {
			t.Helper()
			if res.code != exitOK {
				t.Fatalf("lockcell %s: exit %d, stderr %q", strings.Join(args, " "), res.code, res.stderr)
			}
			return res
		}
		isJSON := func(res result, args ...string) {
			t.Helper()
			if !json.Valid([]byte(res.stdout)) || strings.Count(strings.TrimSpace(res.stdout), "\n") != 0 {
				t.Fatalf("lockcell %s printed %q, not one JSON document", strings.Join(args, " "), res.stdout)
			}
		}
		for _, args := range [][]string{
			with("put", "opt/f", "v", "--json"),
			append([]string{"put", "opt/g", "w", "--json"}, flags...),
			with("--json", "stat", "opt/f"),
			with("stat", "opt/f", "--json"),
			append([]string{"stat", "--json", "opt/f", "--timeout", "20s"}, flags...),
			with("status", "--json"),
			append([]string{"status", "--json"}, flags...),
			with("ls", "--json", "/ls/t/opt"),
			with("ls", "/ls/t/opt", "--json"),
			with("ls", "/ls/t/opt", "-l", "--json"),
			with("sessions", "--json"),
			with("acl", "get", "opt/f", "--json"),
		} {
			isJSON(ok(runBin("", args...), args...), args...)
		}
		// Before and after give the same answer.
		a := ok(runBin("", with("--json", "ls", "-l", "opt")...)).stdout
		b := ok(runBin("", append([]string{"ls", "opt", "-l", "--json"}, flags...)...)).stdout
		if a != b {
			t.Fatalf("ls with options before: %q; after: %q", a, b)
		}
		if got := ok(runBin("", with("ls", "opt", "-l")...)).stdout; !strings.Contains(got, " f\n") || !strings.HasPrefix(got, "---") {
			t.Fatalf("ls opt -l = %q", got)
		}
		// A verb's option after its arguments.
		st := statLines(t, ok(runBin("", with("stat", "opt/f")...)).stdout)
		gen := st["content generation"]
		ok(runBin("", with("put", "opt/f", "v2", "--if-generation", gen)...))
		if res := runBin("", with("put", "opt/f", "v3", "--if-generation", gen)...); res.code != exitError ||
			!strings.Contains(res.stderr, "generation") {
			t.Fatalf("stale --if-generation after the arguments: exit %d, stderr %q", res.code, res.stderr)
		}
		// After --, words are arguments: lock's command gets its options,
		// and put can store a value that looks like an option.
		res := ok(runBin("", with("lock", "opt/lk", "--timeout", "20s", "--", "/bin/sh", "-c", `echo "$@"`, "sh", "--json", "-l")...))
		if res.stdout != "--json -l\n" {
			t.Fatalf("lock passed %q to its command", res.stdout)
		}
		ok(runBin("", with("put", "--", "opt/dash", "--json")...))
		if got := ok(runBin("", with("cat", "opt/dash")...)).stdout; got != "--json" {
			t.Fatalf("cat opt/dash = %q", got)
		}
		// A misspelt option is named as such.
		res = runBin("", with("ls", "opt", "--jsn")...)
		if res.code != exitUsage || !strings.Contains(res.stderr, "--jsn is not an option of lockcell ls") {
			t.Fatalf("ls opt --jsn: exit %d, stderr %q", res.code, res.stderr)
		}
		// The shell's lines take options anywhere too.
		res = ok(runBin("ls opt --json\nstat opt/f --json\n", with("shell")...))
		for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
			if !json.Valid([]byte(line)) {
				t.Fatalf("shell printed %q", res.stdout)
			}
		}
	})

	t.Run("LockWaitsOutALockDelay", func(t *testing.T) {
		// A holder that dies leaves its lock to lapse (after the lease)
		// and then blocked for its lock-delay, which is far longer than
		// the waiter's retry timeout: the waiter still gets the lock.
		const delay = 4 * time.Second
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		holder := exec.Command(bin, with("lock", "--lock-delay", delay.String(), "lk/delay", "--",
			"/bin/sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 600`, pidFile)...)
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		done, exited := make(chan error, 1), make(chan struct{})
		go func() { done <- holder.Wait(); close(exited) }()
		t.Cleanup(func() { holder.Process.Kill(); <-exited })
		pid := waitPid(t, pidFile, done)
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		// The holder dies without a word to the cell.
		if err := holder.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		<-exited
		start := time.Now()
		res := runBin("", with("lock", "--retry-timeout", "1s", "lk/delay", "--", "/bin/sh", "-c", "echo got")...)
		took := time.Since(start)
		if res.code != exitOK || res.stdout != "got\n" {
			t.Fatalf("lock after a dead holder: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		// The delay was really in force (else this proves nothing): it
		// began no earlier than the kill.
		if took < delay-time.Second {
			t.Fatalf("got the lock %v after the holder died: its %v lock-delay was not in force", took, delay)
		}
		t.Logf("got the lock %v after the holder was killed (lease %v, lock-delay %v, retry timeout 1s)", took, lease, delay)
	})

	t.Run("LockTimeout", func(t *testing.T) {
		ctx := t.Context()
		h, err := other.Open(ctx, c.Name("lk/busy"), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(t.TempDir(), "ran")
		for _, args := range [][]string{
			with("--timeout", "1s", "lock", "lk/busy", "--", "/bin/sh", "-c", `touch "$0"`, marker),
			with("lock", "lk/busy", "--timeout", "1s", "--", "/bin/sh", "-c", `touch "$0"`, marker),
			with("lock", "--wait", "1s", "lk/busy", "--", "/bin/sh", "-c", `touch "$0"`, marker),
		} {
			res := runBin("", args...)
			if res.code != exitTimeout || !strings.Contains(res.stderr, "lock /ls/t/lk/busy: not acquired within 1s") ||
				!strings.Contains(res.stderr, "another session still holds it") {
				t.Fatalf("lockcell %s: exit %d, stderr %q; want %d and why", strings.Join(args, " "), res.code, res.stderr, exitTimeout)
			}
		}
		res := runBin("", with("--json", "lock", "--wait", "500ms", "lk/busy", "--", "/bin/true")...)
		var e map[string]string
		if err := json.Unmarshal([]byte(res.stderr), &e); res.code != exitTimeout || err != nil || e["code"] != "timeout" {
			t.Fatalf("--json lock --wait: exit %d, stderr %q", res.code, res.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran although the lock was never got")
		}
		waitForWaiters(t, r, "lk/busy", 0) // every wait was withdrawn
		res = runBin("", with("lock", "--wait", "1s", "--timeout", "2s", "lk/busy", "--", "/bin/true")...)
		if res.code != exitUsage || !strings.Contains(res.stderr, "give one") {
			t.Fatalf("--wait and --timeout: exit %d, stderr %q", res.code, res.stderr)
		}

		// Without a bound the wait is endless, and a signal still ends it.
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			var errb bytes.Buffer
			cmd := exec.Command(bin, with("lock", "lk/busy", "--", "/bin/sh", "-c", `touch "$0"`, marker)...)
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitForWaiters(t, r, "lk/busy", 1)
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) || !strings.Contains(errb.String(), "interrupted") {
				t.Fatalf("%v while waiting without a bound: %v, stderr %q", sig, err, errb.String())
			}
			waitForWaiters(t, r, "lk/busy", 0)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("an interrupted lock ran its command")
		}
	})

	t.Run("LockOnADirectory", func(t *testing.T) {
		r.ok("mkdir", "-p", "lk/dir")
		res := runBin("", with("lock", "lk/dir", "--", "/bin/true")...)
		if res.code != exitError || !strings.Contains(res.stderr, "lock /ls/t/lk/dir: is a directory") ||
			!strings.Contains(res.stderr, "name a file") {
			t.Fatalf("lock on a directory: exit %d, stderr %q", res.code, res.stderr)
		}
		res = runBin("", with("--json", "lock", "lk/dir", "--", "/bin/true")...)
		var e map[string]string
		if err := json.Unmarshal([]byte(res.stderr), &e); err != nil || e["code"] != "is_dir" {
			t.Fatalf("--json lock on a directory: stderr %q", res.stderr)
		}
	})

	t.Run("Ephemeral", func(t *testing.T) {
		// put --ephemeral on the command line: gone with put's session.
		res := runBin("", with("put", "--ephemeral", "eph/p", "x", "--json")...)
		var st statJSON
		if err := json.Unmarshal([]byte(res.stdout), &st); res.code != exitOK || err != nil || !st.Ephemeral {
			t.Fatalf("put --ephemeral: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		r.fails(exitError, "not found", "stat", "eph/p")
		// An existing file that is not ephemeral is not written.
		r.ok("put", "eph/perm", "keep")
		r.fails(exitError, "not ephemeral", "put", "--ephemeral", "eph/perm", "x")
		if got := r.ok("cat", "eph/perm").stdout; got != "keep" {
			t.Fatalf("cat eph/perm = %q", got)
		}
		r.fails(exitUsage, "--ephemeral", "put", "--ephemeral", "--if-generation", "1", "eph/q", "x")

		// In the shell: there while the shell runs, gone after.
		sh := exec.Command(bin, with("shell")...)
		in, err := sh.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		sh.Stdout, sh.Stderr = &out, &errb
		if err := sh.Start(); err != nil {
			t.Fatal(err)
		}
		in.Write([]byte("put --ephemeral eph/member here\n"))
		waitUntil(t, "the shell's ephemeral file appears", func() bool {
			res := r.run("", "cat", "eph/member")
			return res.code == exitOK && res.stdout == "here"
		})
		if m := statLines(t, r.ok("stat", "eph/member").stdout); m["ephemeral"] != "true" {
			t.Fatalf("stat eph/member: %v", m)
		}
		in.Close()
		if err := sh.Wait(); err != nil {
			t.Fatalf("shell: %v, stderr %q", err, errb.String())
		}
		r.fails(exitError, "not found", "stat", "eph/member")

		// lock --ephemeral: the file is there while the command runs and
		// gone after; a run waiting meanwhile gets the lock, not an error.
		dir := t.TempDir()
		res1 := startLock(r, filepath.Join(dir, "seq1"), filepath.Join(dir, "go1"), "--ephemeral", "eph/lk")
		waitFile(t, filepath.Join(dir, "seq1"), res1)
		if m := statLines(t, r.ok("stat", "eph/lk").stdout); m["lock mode"] != "exclusive" {
			t.Fatalf("stat eph/lk while held: %v", m)
		}
		res2 := startLock(r, filepath.Join(dir, "seq2"), filepath.Join(dir, "go2"), "--ephemeral", "eph/lk")
		waitForWaiters(t, r, "eph/lk", 1)
		touch(t, filepath.Join(dir, "go1"))
		waitFile(t, filepath.Join(dir, "seq2"), res2)
		if got := waitResult(t, res1, 20*time.Second); got.code != exitOK {
			t.Fatalf("first lock --ephemeral: exit %d, stderr %q", got.code, got.stderr)
		}
		r.ok("stat", "eph/lk") // still there: the second run holds it
		touch(t, filepath.Join(dir, "go2"))
		if got := waitResult(t, res2, 20*time.Second); got.code != exitOK {
			t.Fatalf("second lock --ephemeral: exit %d, stderr %q", got.code, got.stderr)
		}
		r.fails(exitError, "not found", "stat", "eph/lk")
		// A lock file deleted while a run waits for it (as --ephemeral
		// does when it sees no waiter yet): the run makes it again and
		// gets the lock instead of failing.
		ctx := t.Context()
		h, err := other.Open(ctx, c.Name("eph/gone"), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			t.Fatal(err)
		}
		res3 := startLock(r, filepath.Join(dir, "seq3"), filepath.Join(dir, "go3"), "eph/gone")
		waitForWaiters(t, r, "eph/gone", 1)
		if err := h.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		h.Close()
		waitFile(t, filepath.Join(dir, "seq3"), res3)
		touch(t, filepath.Join(dir, "go3"))
		if got := waitResult(t, res3, 20*time.Second); got.code != exitOK {
			t.Fatalf("lock whose file was deleted while it waited: exit %d, stderr %q", got.code, got.stderr)
		}
		r.fails(exitUsage, "exclusive", "lock", "--ephemeral", "--shared", "eph/sh", "--", "/bin/true")
		// Through the binary too.
		if res := runBin("", with("lock", "--ephemeral", "eph/lk2", "--", "/bin/true")...); res.code != exitOK {
			t.Fatalf("lock --ephemeral: exit %d, stderr %q", res.code, res.stderr)
		}
		r.fails(exitError, "not found", "stat", "eph/lk2")
	})

	t.Run("LsRecursive", func(t *testing.T) {
		for _, f := range []string{"tree/a/x", "tree/a/deep/y", "tree/b", "tree/c/z"} {
			r.ok("put", f, "1")
		}
		r.ok("mkdir", "tree/empty")
		res := runBin("", with("ls", "-R", "tree")...)
		want := "/ls/t/tree:\na/\nb\nc/\nempty/\n\n/ls/t/tree/a:\ndeep/\nx\n\n/ls/t/tree/a/deep:\ny\n\n/ls/t/tree/c:\nz\n\n/ls/t/tree/empty:\n"
		if res.code != exitOK || res.stdout != want {
			t.Fatalf("ls -R tree: exit %d, stderr %q, stdout\n%s\nwant\n%s", res.code, res.stderr, res.stdout, want)
		}
		long := runBin("", with("ls", "tree", "-R", "-l")...)
		if long.code != exitOK || strings.Count(long.stdout, "\n") != strings.Count(want, "\n") ||
			!strings.Contains(long.stdout, "\n/ls/t/tree/a/deep:\n---") {
			t.Fatalf("ls -R -l tree: exit %d, stdout %q", long.code, long.stdout)
		}
		var js struct {
			Name    string
			Entries []struct {
				Name string
				Dir  bool
			}
		}
		res = runBin("", with("--json", "ls", "-R", "tree")...)
		if err := json.Unmarshal([]byte(res.stdout), &js); err != nil {
			t.Fatalf("ls -R --json: %q: %v", res.stdout, err)
		}
		var names []string
		for _, e := range js.Entries {
			names = append(names, e.Name)
		}
		if wantNames := []string{"a", "b", "c", "empty", "a/deep", "a/x", "a/deep/y", "c/z"}; js.Name != "/ls/t/tree" || !slices.Equal(names, wantNames) {
			t.Fatalf("ls -R --json: name %q, entries %q; want %q", js.Name, names, wantNames)
		}
		// A file lists as itself.
		if res := runBin("", with("ls", "-R", "tree/b")...); res.code != exitOK || res.stdout != "b\n" {
			t.Fatalf("ls -R of a file: exit %d, stdout %q", res.code, res.stdout)
		}
	})

	t.Run("NoCellRunning", func(t *testing.T) {
		var dead []string
		for _, p := range fixtures.FreePorts(t, 3) {
			dead = append(dead, "127.0.0.1:"+strconv.Itoa(p))
		}
		for _, args := range [][]string{
			{"ls"}, {"put", "a", "b"}, {"lock", "x", "--", "/bin/true"}, {"--json", "cat", "a"},
		} {
			start := time.Now()
			// The default --timeout (30 s): no flag shortens anything.
			res := runBin("", append([]string{"--cell", "t", "--replicas", strings.Join(dead, ",")}, args...)...)
			took := time.Since(start)
			if res.code != exitError || !strings.Contains(res.stderr, "refused") || strings.Contains(res.stderr, "raise --timeout") {
				t.Fatalf("lockcell %s with no cell: exit %d, stderr %q", strings.Join(args, " "), res.code, res.stderr)
			}
			for _, a := range dead {
				if !strings.Contains(res.stderr, a) {
					t.Fatalf("lockcell %s with no cell: stderr %q does not name %s", strings.Join(args, " "), res.stderr, a)
				}
			}
			if args[0] == "--json" && !strings.Contains(res.stderr, `"code":"refused"`) {
				t.Fatalf("--json error %q: want code refused", res.stderr)
			}
			if took > 10*time.Second {
				t.Fatalf("lockcell %s took %v to find no cell running", strings.Join(args, " "), took)
			}
			t.Logf("lockcell %s: %v: %s", strings.Join(args, " "), took, strings.TrimSpace(res.stderr))
		}
		res := runBin("", "--cell", "t", "--replicas", strings.Join(dead, ","), "status")
		if res.code != exitError || !strings.Contains(res.stderr, "no quorum") || !strings.Contains(res.stderr, "every replica refused") {
			t.Fatalf("status with no cell: exit %d, stderr %q", res.code, res.stderr)
		}
	})
}

// TestShellTLSFlags: the shell, and options after the verb, use
// --cert/--key/--ca given as flags (not only from the environment).
func TestShellTLSFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: 8 * time.Second})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	cert, key := set.UserFiles(t, "admin")
	tlsFlags := []string{"--cert", cert, "--key", key, "--ca", set.CAFile()}

	for _, args := range [][]string{
		append(append(append([]string(nil), tlsFlags...), base...), "shell"),
		append(append([]string{"shell"}, base...), tlsFlags...),
	} {
		res := runCLI(t, bin, "put sh/f hello\ncat sh/f\nsessions --json\n", nil, args...)
		if res.code != exitOK || !strings.HasPrefix(res.stdout, "hello") || !strings.Contains(res.stdout, `"principal":"admin"`) {
			t.Fatalf("lockcell %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), res.code, res.stdout, res.stderr)
		}
	}
	res := runCLI(t, bin, "", nil, append(append([]string{"cat", "sh/f"}, base...), tlsFlags...)...)
	if res.code != exitOK || res.stdout != "hello" {
		t.Fatalf("cat with every option after it: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// waitPid waits for a pid file written by a background process; it fails
// the test if the process ends first.
func waitPid(t *testing.T, path string, done <-chan error) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			return pid
		}
		select {
		case err := <-done:
			t.Fatalf("the process ended before writing %s: %v", path, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitUntil polls cond until it holds, failing the test after 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
