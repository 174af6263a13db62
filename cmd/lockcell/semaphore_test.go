//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// lock -n N: up to N runs hold the semaphore at once, each with its own
// sequencer (mode permit, valid exactly while it holds its permit); a --try beyond N
// fails as for a held lock; another count for the same name is refused.
// lock A B: both locks at once, the sequencers and names space-separated;
// a run naming them the other way round gets neither while they are
// held, and both once they are released. The real binary runs both forms.
func TestLockSemaphoreAndMultiLock(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	r := cliRunner{t, flags}
	dir := t.TempDir()
	file := func(n string) string { return filepath.Join(dir, n) }

	res1 := startLock(r, file("seq1"), file("go1"), "-n", "2", "pool")
	res2 := startLock(r, file("seq2"), file("go2"), "-n", "2", "pool")
	s1, s2 := waitFile(t, file("seq1"), res1), waitFile(t, file("seq2"), res2)
	if parseSeq(t, s1).Generation == parseSeq(t, s2).Generation {
		t.Fatalf("two permits share generation %d", parseSeq(t, s1).Generation)
	}
	if out := r.ok("seq", "show", s1).stdout; !strings.Contains(out, "mode:       permit\n") {
		t.Fatalf("seq show of a permit holder's sequencer does not name mode permit:\n%s", out)
	}
	r.fails(exitError, "lock held", "lock", "--try", "-n", "2", "pool", "--", "/bin/sh", "-c", "exit 0")
	if out := r.ok("locks").stdout; !strings.Contains(out, "semaphore 2/2") {
		t.Fatalf("locks does not show the semaphore's permits held of N:\n%s", out)
	}
	if out := r.ok("stat", "pool").stdout; !strings.Contains(out, "2 (2 held)") {
		t.Fatalf("stat does not show the semaphore's permits:\n%s", out)
	}
	r.fails(exitUsage, "-n", "lock", "-n", "0", "pool", "--", "/bin/sh", "-c", "exit 0")
	r.fails(exitError, "semaphore", "lock", "--try", "-n", "3", "pool", "--", "/bin/sh", "-c", "exit 0")
	touch(t, file("go1"))
	if res := waitResult(t, res1, 20*time.Second); res.code != 0 {
		t.Fatalf("first holder: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := r.run("", "seq", "check", s1); res.code != exitError || !strings.HasPrefix(res.stdout, "stale: ") {
		t.Fatalf("the released holder's sequencer: exit %d, %q", res.code, res.stdout)
	}
	if got := r.ok("seq", "check", s2).stdout; got != "valid\n" {
		t.Fatalf("the other holder's sequencer: %q", got)
	}
	touch(t, file("go2"))
	waitResult(t, res2, 20*time.Second)

	resA := startLock(r, file("seqA"), file("goA"), "acct/a", "acct/b")
	seqs := strings.Fields(waitFile(t, file("seqA"), resA))
	if len(seqs) != 2 || parseSeq(t, seqs[0]).Path != "/ls/t/acct/a" || parseSeq(t, seqs[1]).Path != "/ls/t/acct/b" {
		t.Fatalf("a multi-lock's sequencers: %q", seqs)
	}
	r.fails(exitError, "lock held", "lock", "--try", "acct/b", "acct/a", "--", "/bin/sh", "-c", "exit 0")
	touch(t, file("goA"))
	if res := waitResult(t, resA, 20*time.Second); res.code != 0 {
		t.Fatalf("multi-lock: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, s := range seqs {
		if res := r.run("", "seq", "check", s); res.code != exitError || !strings.HasPrefix(res.stdout, "stale: ") {
			t.Fatalf("a released multi-lock's sequencer: exit %d, %q", res.code, res.stdout)
		}
	}

	bin := buildCLI(t)
	got := runCLI(t, bin, "", nil, append(append([]string(nil), flags...), "lock", "acct/b", "acct/a", "--", "/bin/sh", "-c", `echo "$LOCKCELL_LOCK"`)...)
	if got.code != 0 || got.stdout != "/ls/t/acct/b /ls/t/acct/a\n" {
		t.Fatalf("binary multi-lock: exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
	got = runCLI(t, bin, "", nil, append(append([]string(nil), flags...), "lock", "-n", "2", "pool", "--", "/bin/sh", "-c", `echo "$LOCKCELL_LOCK"`)...)
	if got.code != 0 || got.stdout != "/ls/t/pool\n" {
		t.Fatalf("binary semaphore lock: exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
}
