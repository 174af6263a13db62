//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

// holdScript is a CMD for lock: it writes $LOCKCELL_SEQUENCER to the file
// $1 (atomically) and waits until the file $2 exists.
const holdScript = `printf '%s\n' "$LOCKCELL_SEQUENCER" > "$1.tmp" && mv "$1.tmp" "$1"
while [ ! -e "$2" ]; do sleep 0.02; done`

// startLock runs `lockcell lock ARGS... -- /bin/sh -c holdScript` in the
// background and returns where its result will arrive.
func startLock(r cliRunner, seqFile, goFile string, args ...string) <-chan result {
	argv := append(append([]string{"lock"}, args...), "--", "/bin/sh", "-c", holdScript, "sh", seqFile, goFile)
	out := make(chan result, 1)
	go func() {
		var o, e strings.Builder
		code := run(append(append([]string{"lockcell"}, r.flags...), argv...), strings.NewReader(""), &o, &e)
		out <- result{code, o.String(), e.String()}
	}()
	return out
}

// waitFile waits for path to appear and returns its contents; it fails
// the test if the lock run ends first.
func waitFile(t *testing.T, path string, res <-chan result) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
		select {
		case r := <-res:
			t.Fatalf("lock ended before %s appeared: exit %d, stdout %q, stderr %q", filepath.Base(path), r.code, r.stdout, r.stderr)
		case <-deadline:
			t.Fatalf("%s did not appear", path)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitResult waits for a background lock run to end.
func waitResult(t *testing.T, res <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(within):
		t.Fatalf("lock did not end within %v", within)
		return result{}
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// canTake reports whether another session can take name's lock in mode
// right now (and releases it again if so).
func canTake(t *testing.T, cl *client.Client, name string, mode client.LockMode) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := cl.Open(ctx, name, client.Read|client.Write)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Close()
	ok, err := h.TryAcquire(ctx, mode)
	if err != nil {
		t.Fatalf("try-acquire %s: %v", name, err)
	}
	if ok {
		if err := h.Release(ctx); err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
	return ok
}

// parseSeq decodes a sequencer as lock hands it to its command.
func parseSeq(t *testing.T, text string) sequencer.Sequencer {
	t.Helper()
	b, err := sequencer.DecodeText(text)
	if err != nil {
		t.Fatalf("sequencer %q: %v", text, err)
	}
	s, err := sequencer.Parse(b)
	if err != nil {
		t.Fatalf("sequencer %q: %v", text, err)
	}
	return s
}

func TestLock(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	other := c.Client(t)

	t.Run("ExitStatusAndRelease", func(t *testing.T) {
		r := cliRunner{t, flags}
		res := r.run("", "lock", "lk/a/b", "--", "/bin/sh", "-c",
			`echo "$LOCKCELL_SEQUENCER"; echo "$LOCKCELL_LOCK"; echo oops >&2; exit 3`)
		if res.code != 3 {
			t.Fatalf("exit %d, want the command's 3; stderr %q", res.code, res.stderr)
		}
		if res.stderr != "oops\n" {
			t.Fatalf("stderr %q, want only the command's", res.stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		if len(lines) != 2 || lines[1] != "/ls/t/lk/a/b" {
			t.Fatalf("stdout %q: want the sequencer and LOCKCELL_LOCK=/ls/t/lk/a/b", res.stdout)
		}
		s := parseSeq(t, lines[0])
		if s.Cell != "t" || s.Path != "/ls/t/lk/a/b" || s.Mode != sequencer.Exclusive || s.Generation == 0 {
			t.Fatalf("sequencer %+v", s)
		}
		if !canTake(t, other, c.Name("lk/a/b"), client.Exclusive) {
			t.Fatal("the lock is still held after lock exited")
		}
		// The lock file stays, and an existing one is reused.
		if res := r.run("", "lock", "lk/a/b", "--", "/bin/sh", "-c", "exit 0"); res.code != 0 {
			t.Fatalf("second lock: exit %d, stderr %q", res.code, res.stderr)
		}
		// The command's signal death is 128+N.
		if res := r.run("", "lock", "lk/a/b", "--", "/bin/sh", "-c", "kill -TERM $$"); res.code != 128+15 {
			t.Fatalf("command killed by SIGTERM: exit %d, want 143; stderr %q", res.code, res.stderr)
		}
	})

	t.Run("HeldWhileRunning", func(t *testing.T) {
		r := cliRunner{t, flags}
		dir := t.TempDir()
		seqFile, goFile := filepath.Join(dir, "seq"), filepath.Join(dir, "go")
		res := startLock(r, seqFile, goFile, "lk/held")
		text := waitFile(t, seqFile, res)
		if canTake(t, other, c.Name("lk/held"), client.Shared) {
			t.Fatal("another session took the lock while the command ran")
		}
		if got := r.ok("seq", "check", text).stdout; got != "valid\n" {
			t.Fatalf("seq check while held = %q", got)
		}
		touch(t, goFile)
		if res := waitResult(t, res, 20*time.Second); res.code != 0 {
			t.Fatalf("lock: exit %d, stderr %q", res.code, res.stderr)
		}
		// Released: the sequencer is stale, even once the lock is taken
		// again (a new generation).
		stale := r.fails(exitError, "", "seq", "check", text)
		// It says why: the lock is free now.
		if stale.stdout != "stale: /ls/t/lk/held is no longer locked\n" || stale.stderr != "" {
			t.Fatalf("seq check after release: stdout %q, stderr %q", stale.stdout, stale.stderr)
		}
		if !canTake(t, other, c.Name("lk/held"), client.Exclusive) {
			t.Fatal("the lock is still held after lock exited")
		}
		var out struct {
			Valid      bool   `json:"valid"`
			Reason     string `json:"reason"`
			Path       string `json:"path"`
			Mode       string `json:"mode"`
			Generation uint64 `json:"generation"`
		}
		js := r.fails(exitError, "", "--json", "seq", "check", text)
		if err := json.Unmarshal([]byte(js.stdout), &out); err != nil || out.Valid || out.Path != "/ls/t/lk/held" ||
			!strings.HasPrefix(out.Reason, "/ls/t/lk/held ") ||
			out.Mode != "exclusive" || out.Generation != parseSeq(t, text).Generation {
			t.Fatalf("seq check --json = %q (%v)", js.stdout, err)
		}
	})

	t.Run("Shared", func(t *testing.T) {
		r := cliRunner{t, flags}
		dir := t.TempDir()
		goFile := filepath.Join(dir, "go")
		res1 := startLock(r, filepath.Join(dir, "seq1"), goFile, "--shared", "lk/shared")
		text1 := waitFile(t, filepath.Join(dir, "seq1"), res1)
		// The first still holds it (it waits for goFile) when the second
		// gets in.
		res2 := startLock(r, filepath.Join(dir, "seq2"), goFile, "--shared", "lk/shared")
		text2 := waitFile(t, filepath.Join(dir, "seq2"), res2)
		for _, text := range []string{text1, text2} {
			if s := parseSeq(t, text); s.Mode != sequencer.Shared || s.Path != "/ls/t/lk/shared" {
				t.Fatalf("sequencer %+v", s)
			}
			if got := r.ok("seq", "check", text).stdout; got != "valid\n" {
				t.Fatalf("seq check of a shared holder = %q", got)
			}
		}
		if canTake(t, other, c.Name("lk/shared"), client.Exclusive) {
			t.Fatal("an exclusive lock was granted over two shared holders")
		}
		// An exclusive lock --try fails while they hold it.
		r.fails(exitError, "lock held", "lock", "--try", "lk/shared", "--", "/bin/sh", "-c", "exit 0")
		touch(t, goFile)
		for _, res := range []<-chan result{res1, res2} {
			if res := waitResult(t, res, 20*time.Second); res.code != 0 {
				t.Fatalf("lock --shared: exit %d, stderr %q", res.code, res.stderr)
			}
		}
		if !canTake(t, other, c.Name("lk/shared"), client.Exclusive) {
			t.Fatal("the lock is still held after both exited")
		}
	})

	t.Run("Try", func(t *testing.T) {
		r := cliRunner{t, flags}
		dir := t.TempDir()
		seqFile, goFile := filepath.Join(dir, "seq"), filepath.Join(dir, "go")
		res := startLock(r, seqFile, goFile, "lk/try")
		waitFile(t, seqFile, res)
		marker := filepath.Join(dir, "ran")
		busy := r.fails(exitError, "lock held", "lock", "--try", "lk/try", "--", "/bin/sh", "-c", `touch "$0"`, marker)
		if !strings.Contains(busy.stderr, "lock /ls/t/lk/try") || !strings.Contains(busy.stderr, "--try") {
			t.Fatalf("--try message %q does not name the lock and --try", busy.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran although the lock was busy")
		}
		js := r.fails(exitError, "lock_held", "--json", "lock", "--try", "lk/try", "--", "/bin/sh", "-c", "exit 0")
		if js.stdout != "" {
			t.Fatalf("--json lock printed %q on stdout", js.stdout)
		}
		touch(t, goFile)
		waitResult(t, res, 20*time.Second)
		// Free now: --try gets it.
		r.ok("lock", "--try", "lk/try", "--", "/bin/sh", "-c", "exit 0")
	})

	t.Run("Waits", func(t *testing.T) {
		// Without --try lock queues behind the holder and runs once it
		// lets go.
		r := cliRunner{t, flags}
		dir := t.TempDir()
		res1 := startLock(r, filepath.Join(dir, "seq1"), filepath.Join(dir, "go1"), "lk/wait")
		text1 := waitFile(t, filepath.Join(dir, "seq1"), res1)
		res2 := startLock(r, filepath.Join(dir, "seq2"), filepath.Join(dir, "go2"), "lk/wait")
		waitForWaiters(t, r, "lk/wait", 1)
		if _, err := os.Stat(filepath.Join(dir, "seq2")); err == nil {
			t.Fatal("the second lock ran its command while the first held the lock")
		}
		touch(t, filepath.Join(dir, "go1"))
		text2 := waitFile(t, filepath.Join(dir, "seq2"), res2)
		if g1, g2 := parseSeq(t, text1).Generation, parseSeq(t, text2).Generation; g2 <= g1 {
			t.Fatalf("generations %d then %d: want growth", g1, g2)
		}
		touch(t, filepath.Join(dir, "go2"))
		for _, res := range []<-chan result{res1, res2} {
			if res := waitResult(t, res, 20*time.Second); res.code != 0 {
				t.Fatalf("lock: exit %d, stderr %q", res.code, res.stderr)
			}
		}
	})

	t.Run("Signals", func(t *testing.T) {
		r := cliRunner{t, flags}
		dir := t.TempDir()
		// Forwarded to the command: it traps SIGTERM and exits 7.
		ready := filepath.Join(dir, "ready")
		res := make(chan result, 1)
		go func() {
			res <- r.run("", "lock", "lk/sig", "--", "/bin/sh", "-c",
				`trap 'exit 7' TERM; touch "$0"; while :; do sleep 0.02; done`, ready)
		}()
		waitFile(t, ready, res)
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if got := waitResult(t, res, 20*time.Second); got.code != 7 {
			t.Fatalf("after SIGTERM: exit %d, want the command's 7; stderr %q", got.code, got.stderr)
		}
		if !canTake(t, other, c.Name("lk/sig"), client.Exclusive) {
			t.Fatal("the lock is still held")
		}

		// While waiting for the lock: the wait is given up, the command
		// never runs. (The holder is not a lock run: it would get the
		// signal too.)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h, err := other.Open(ctx, c.Name("lk/sig"), client.Read|client.Write)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, "ran")
		go func() {
			res <- r.run("", "lock", "lk/sig", "--", "/bin/sh", "-c", `touch "$0"`, marker)
		}()
		waitForWaiters(t, r, "lk/sig", 1)
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		got := waitResult(t, res, 20*time.Second)
		if got.code != 128+15 || !strings.Contains(got.stderr, "interrupted") {
			t.Fatalf("SIGTERM while waiting: exit %d, stderr %q", got.code, got.stderr)
		}
		waitForWaiters(t, r, "lk/sig", 0)
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the interrupted lock ran its command")
		}
	})

	t.Run("CannotRun", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.fails(127, "lock /ls/t/lk/nocmd", "lock", "lk/nocmd", "--", "/nonexistent/command")
		r.fails(127, "not found", "lock", "lk/nocmd", "--", "no-such-command-lockcell-test")
		r.fails(126, "permission denied", "lock", "lk/nocmd", "--", "/etc/passwd")
		// Nothing was created: the command is looked up first.
		r.fails(exitError, "not found", "stat", "lk/nocmd")
	})

	t.Run("Seq", func(t *testing.T) {
		r := cliRunner{t, flags}
		res := r.run("", "lock", "lk/seq", "--", "/bin/sh", "-c", `echo "$LOCKCELL_SEQUENCER"`)
		if res.code != 0 {
			t.Fatalf("lock: exit %d, stderr %q", res.code, res.stderr)
		}
		text := strings.TrimSpace(res.stdout)
		gen := strconv.FormatUint(parseSeq(t, text).Generation, 10)
		m := statLines(t, r.ok("seq", "show", text).stdout)
		if len(m) != 4 || m["cell"] != "t" || m["path"] != "/ls/t/lk/seq" || m["mode"] != "exclusive" || m["generation"] != gen {
			t.Fatalf("seq show: %v", m)
		}
		var js seqJSON
		if err := json.Unmarshal([]byte(r.ok("--json", "seq", "show", text).stdout), &js); err != nil ||
			js != (seqJSON{Cell: "t", Path: "/ls/t/lk/seq", Mode: "exclusive", Generation: parseSeq(t, text).Generation}) {
			t.Fatalf("seq show --json = %+v (%v)", js, err)
		}
		// - reads stdin; no argument reads $LOCKCELL_SEQUENCER.
		if res := r.run(text+"\n", "seq", "show", "-"); res.code != 0 || !strings.Contains(res.stdout, "/ls/t/lk/seq") {
			t.Fatalf("seq show -: exit %d, %q %q", res.code, res.stdout, res.stderr)
		}
		t.Setenv(seqEnv, text)
		if got := r.ok("seq", "show").stdout; !strings.Contains(got, "/ls/t/lk/seq") {
			t.Fatalf("seq show from $%s = %q", seqEnv, got)
		}
		r.fails(exitError, "", "seq", "check") // released: stale
		t.Setenv(seqEnv, "")
		r.fails(exitUsage, seqEnv, "seq", "show")

		// Malformed and forged sequencers are errors, not answers.
		for _, bad := range []string{text[:10], "not*base64", ""} {
			r.fails(exitError, "malformed", "seq", "show", bad)
			r.fails(exitError, "malformed", "seq", "check", bad)
		}
		b, _ := sequencer.DecodeText(text)
		b[len(b)-1] ^= 1 // the signature
		forged := sequencer.EncodeText(b)
		r.ok("seq", "show", forged) // parsing cannot tell
		r.fails(exitError, "bad sequencer", "seq", "check", forged)
		js2 := r.fails(exitError, "bad_sequencer", "--json", "seq", "check", forged)
		if js2.stdout != "" {
			t.Fatalf("a failed check printed %q", js2.stdout)
		}
		r.fails(exitError, "bad sequencer", "seq", "check",
			sequencer.EncodeText(sequencer.Sign([]byte("guess"), sequencer.Sequencer{Cell: "t", Path: "/ls/t/lk/seq",
				Mode: sequencer.Exclusive, Generation: parseSeq(t, text).Generation})))
		r.fails(exitError, "not of --cell", "--cell", "other", "seq", "check", text)
	})

	t.Run("UsageErrors", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.fails(exitUsage, "no -- before", "lock", "lk/u")
		r.fails(exitUsage, "no -- before", "lock", "lk/u", "/bin/true")
		r.fails(exitUsage, "no command after --", "lock", "lk/u", "--")
		r.fails(exitUsage, "no -- before", "lock", "--", "/bin/true")
		r.fails(exitUsage, "no NAME", "lock", "--try", "--", "--", "/bin/true")
		r.fails(exitUsage, "--bogus is not an option of lock", "lock", "lk/u", "--bogus", "--", "/bin/true")
		r.ok("lock", "lk/u", "--try", "--", "/bin/true") // options may follow NAME
		r.fails(exitUsage, "lock-delay", "lock", "--lock-delay", "2m", "lk/u", "--", "/bin/true")
		r.fails(exitUsage, "lock-delay", "lock", "--lock-delay", "0s", "lk/u", "--", "/bin/true")
		r.fails(exitUsage, "--kill-after must be positive", "lock", "--kill-after", "0s", "lk/u", "--", "/bin/true")
		r.fails(exitUsage, "no seq command", "seq")
		r.fails(exitUsage, "unknown seq command", "seq", "frob")
		r.fails(exitUsage, "seq show", "seq", "show", "a", "b")
		r.fails(exitUsage, "flag provided but not defined", "seq", "check", "--bogus", "x")
		r.fails(exitError, "invalid name", "lock", "bad name", "--", "/bin/true")
		r.fails(exitUsage, "usage", "--json", "lock", "lk/u")
		// Arguments after -- are the command's, options included.
		res := r.run("", "lock", "lk/u", "--", "/bin/sh", "-c", `echo "$@"`, "sh", "--help", "--try", "--")
		if res.code != 0 || res.stdout != "--help --try --\n" {
			t.Fatalf("lock passing options to its command: exit %d, %q %q", res.code, res.stdout, res.stderr)
		}
		r.ok("lock", "--lock-delay", "1s", "lk/u", "--", "/bin/true")
		if res := r.ok("--help"); !strings.Contains(res.stdout, "lock") || !strings.Contains(res.stdout, "seq") {
			t.Fatalf("--help = %q", res.stdout)
		}
		if res := r.ok("lock", "--help"); !strings.Contains(res.stdout, "--shared") || strings.Contains(res.stdout, "--grace") {
			t.Fatalf("lock --help = %q", res.stdout)
		}
	})

	// NAME deleted while CMD runs: the lock is gone, so CMD is stopped and
	// lock exits exitLockLost saying why.
	t.Run("DeletedWhileRunning", func(t *testing.T) {
		r := cliRunner{t, flags}
		dir := t.TempDir()
		seqFile, goFile := filepath.Join(dir, "seq"), filepath.Join(dir, "go")
		res := startLock(r, seqFile, goFile, "lk/deleted")
		waitFile(t, seqFile, res)
		r.ok("rm", "lk/deleted")
		got := waitResult(t, res, 20*time.Second)
		if got.code != exitLockLost || !strings.Contains(got.stderr, "deleted") {
			t.Fatalf("exit %d, stderr %q: want %d and the file's deletion named", got.code, got.stderr, exitLockLost)
		}
	})
}

// waitForWaiters waits until name's lock has n queued waiters. It asks
// with a fresh CLI run each time: nothing cached can answer.
func waitForWaiters(t *testing.T, r cliRunner, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st statJSON
		if err := json.Unmarshal([]byte(r.ok("--json", "stat", name).stdout), &st); err != nil {
			t.Fatalf("stat --json %s: %v", name, err)
		}
		if st.LockWaiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lock waiters, want %d", name, st.LockWaiters, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxy forwards TCP connections to one address until it is cut.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(p.Cut)
	go p.serve()
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		if !p.track(down, up) {
			continue
		}
		go p.pipe(up, down)
		go p.pipe(down, up)
	}
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut closes the listener and every forwarded connection: the client can
// no longer reach the replica.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}

// gone reports whether process pid has exited (a zombie nobody reaps
// counts as exited).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestLockSessionLoss cuts lockcell off from its cell while the command
// runs: once the lock may be lost (jeopardy, at most a lease after the
// cut) the command and what it started are stopped and lockcell exits
// exitLockLost.
func TestLockSessionLoss(t *testing.T) {
	const lease, grace = time.Second, time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	// The client follows a not-master answer to the address the master
	// advertises, which would bypass the proxies: the master's proxy goes
	// first, so the client finds the master without a redirect.
	master := c.WaitForMaster(30 * time.Second)
	var addrs []string
	var proxies []*proxy
	for i, a := range c.Addrs() {
		p := newProxy(t, a)
		proxies = append(proxies, p)
		if i == master {
			addrs = append([]string{p.Addr()}, addrs...)
		} else {
			addrs = append(addrs, p.Addr())
		}
	}
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(addrs, ","), "--timeout", "20s"}}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	res := make(chan result, 1)
	go func() {
		// The sleep runs in the background of the shell: stopping only
		// the shell would leave it running.
		res <- r.run("", "lock", "--grace", grace.String(), "lk/loss", "--", "/bin/sh", "-c",
			`sleep 60 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; wait`, pidFile)
	}()
	pid, err := strconv.Atoi(waitFile(t, pidFile, res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	// The local lease runs out at most a lease after the cut, SIGTERM
	// ends sleep at once, and the session expires a grace later.
	const bound = 2*(lease+grace) + 3*time.Second
	got := waitResult(t, res, bound+5*time.Second)
	took := time.Since(cut)
	if got.code != exitLockLost || !strings.Contains(got.stderr, "lost") {
		t.Fatalf("exit %d, stderr %q: want %d and the lock lost", got.code, got.stderr, exitLockLost)
	}
	if !strings.Contains(got.stderr, "jeopardy") {
		t.Errorf("stderr %q: no jeopardy warning", got.stderr)
	}
	if took > bound {
		t.Errorf("lockcell took %v after the cut", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's sleep (pid %d) is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("lockcell exited %v after the cut: %s", took, got.stderr)
}

// TestLockStopsCommandOnJeopardy runs the real binary holding a lock while
// a command that ignores SIGTERM runs, then cuts it off from the cell. The
// command gets SIGTERM within the client's lease of the cut (jeopardy, long
// before the session could expire: the grace is 60 s), then SIGKILL
// --kill-after later, and lockcell exits exitLockLost naming jeopardy.
func TestLockStopsCommandOnJeopardy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	const lease, killAfter = time.Second, time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	master := c.WaitForMaster(30 * time.Second)
	var addrs []string
	var proxies []*proxy
	for i, a := range c.Addrs() {
		p := newProxy(t, a)
		proxies = append(proxies, p)
		if i == master {
			addrs = append([]string{p.Addr()}, addrs...)
		} else {
			addrs = append(addrs, p.Addr())
		}
	}
	dir := t.TempDir()
	pidFile, termFile := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	// The shell records SIGTERM and goes on: only SIGKILL ends it.
	script := `trap 'echo term > "$1"' TERM; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; while :; do sleep 0.05; done`
	res := make(chan result, 1)
	go func() {
		res <- runCLI(t, bin, "", nil, "--cell", "t", "--replicas", strings.Join(addrs, ","), "--timeout", "20s",
			"lock", "--grace", "60s", "--retry-timeout", "1s", "--kill-after", killAfter.String(), "lk/jeopardy",
			"--", "/bin/sh", "-c", script, pidFile, termFile)
	}()
	pid, err := strconv.Atoi(waitFile(t, pidFile, res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	waitFile(t, termFile, res)
	termAt := time.Since(cut)
	got := waitResult(t, res, 30*time.Second)
	exitAt := time.Since(cut)
	if got.code != exitLockLost {
		t.Fatalf("exit %d, stderr %q: want %d (lock lost)", got.code, got.stderr, exitLockLost)
	}
	for _, want := range []string{"jeopardy", "may be lost", "SIGKILL"} {
		if !strings.Contains(got.stderr, want) {
			t.Errorf("stderr %q does not say %q", got.stderr, want)
		}
	}
	if termAt > lease+time.Second {
		t.Errorf("the command got SIGTERM %v after the cut; want within the lease (%v) + 1s", termAt, lease)
	}
	if !gone(pid) {
		t.Errorf("the command (pid %d) still runs after lockcell exited", pid)
	}
	if exitAt < termAt+killAfter {
		t.Errorf("lockcell exited %v after SIGTERM, before --kill-after %v: the command ignores SIGTERM", exitAt-termAt, killAfter)
	}
	t.Logf("SIGTERM %v after the cut, lockcell exited %v after it: %s", termAt.Round(time.Millisecond),
		exitAt.Round(time.Millisecond), got.stderr)
}
