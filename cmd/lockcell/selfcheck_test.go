package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/selfcheck"
)

// `lockcell selfcheck` through the real binary against a healthy cell: the
// verdict is linearizable (exit 0) for scripts and for people, the
// workload did what it claims (cache hits, writes, lock hand-offs, no
// unknown outcomes on a healthy cell), and the run's folder is gone
// afterwards. A build with a seeded bug that lets writes complete before
// a cacher dropped its copy (bug_noinval) fails here: the lagging session
// reads the old value from its cache after the write completed.
func TestSelfcheckBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "10s"}
	if seed := os.Getenv("LOCKCELL_CHAOS_SEED"); seed != "" {
		flags = append(flags, "selfcheck", "--seed", seed)
	} else {
		flags = append(flags, "selfcheck")
	}
	run := func(args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}

	res := run("--duration", "4s", "--json")
	var out struct {
		selfcheck.Result
		DurationSeconds float64 `json:"duration_seconds"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("selfcheck --json: exit %d, %v: stdout %q, stderr %q", res.code, err, res.stdout, res.stderr)
	}
	if res.code != exitOK || out.Verdict != selfcheck.Linearizable {
		t.Fatalf("selfcheck on a healthy cell: exit %d, verdict %s, failures:\n%s\nstderr %q",
			res.code, out.Verdict, failuresText(out.Failures), res.stderr)
	}
	if out.Sessions != 2 || out.Ops < 100 || out.Unknown != 0 || out.CacheHits == 0 || out.Reads <= out.CachedReads ||
		out.Writes == 0 || out.Acquires == 0 || out.DurationSeconds < 4 || out.Incomplete != "" || out.CleanupError != "" {
		t.Fatalf("selfcheck --json: %s", res.stdout)
	}
	if !strings.HasPrefix(out.Prefix, "/ls/t/"+selfcheck.Dir+"/") {
		t.Fatalf("prefix %q", out.Prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Client(t).Open(ctx, out.Prefix, client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the run's folder %s after the run: %v, want not found", out.Prefix, err)
	}

	res = run("--duration", "1s")
	if res.code != exitOK || !strings.HasPrefix(res.stdout, "linearizable: ") || !strings.Contains(res.stdout, "2 sessions") {
		t.Fatalf("selfcheck: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res = run("--duration", "0s"); res.code != exitUsage || !strings.Contains(res.stderr, "--duration") {
		t.Fatalf("selfcheck --duration 0s: exit %d, stderr %q", res.code, res.stderr)
	}
	// No cell: no verdict (exit 2), and the reason.
	dead := "127.0.0.1:" + strconv.Itoa(fixtures.FreePorts(t, 1)[0])
	res = runCLI(t, bin, "", nil, "--cell", "t", "--replicas", dead, "--timeout", "5s", "--json", "selfcheck", "--duration", "1s")
	if res.code != exitNoVerdict || !strings.Contains(res.stderr, `"code":"refused"`) {
		t.Fatalf("selfcheck without a cell: exit %d, stderr %q", res.code, res.stderr)
	}
}

func failuresText(fs []selfcheck.Failure) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Object + ": " + f.Reason + "\n  stuck: " + f.Stuck.String() + "\n")
		for _, s := range f.Linearized {
			b.WriteString("  after: " + s.Op.String() + " => " + s.State + "\n")
		}
		for _, w := range f.Witnesses {
			b.WriteString("  witness: " + w.String() + "\n")
		}
	}
	return b.String()
}

// What people read on a violation: the verdict, the object, why, the
// operation that cannot be placed and the write it missed.
func TestSelfcheckPrintsTheOffendingOperations(t *testing.T) {
	const f, ms = "/ls/t/lockcell-selfcheck/x/f0", time.Millisecond
	over := selfcheck.Op{Session: 0, Seq: 2, Kind: selfcheck.KindWrite, Object: f, Value: "b", Gen: 12, Call: 5 * ms, Return: 6 * ms}
	stale := selfcheck.Op{Session: 1, Seq: 2, Kind: selfcheck.KindRead, Object: f, Value: "a", Gen: 10, Cached: true, Hit: true,
		Call: 7 * ms, Return: 8 * ms}
	hist := []selfcheck.Op{
		{Session: 0, Seq: 1, Kind: selfcheck.KindWrite, Object: f, Value: "a", Gen: 10, Call: 1 * ms, Return: 2 * ms},
		{Session: 1, Seq: 1, Kind: selfcheck.KindRead, Object: f, Value: "a", Gen: 10, Cached: true, Call: 3 * ms, Return: 4 * ms},
		over, stale,
	}
	res := &selfcheck.Result{Report: selfcheck.Check(hist, 10*time.Second), Sessions: 2, Duration: time.Second, Reads: 2}
	var b strings.Builder
	printSelfcheck(&b, res)
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"NOT linearizable: 4 operations", f + ": stale read", "cannot place:\n    " + stale.String(),
		"because of:\n    " + over.String(), `session 1 #2 read() -> "a" gen 10 (cache hit)`} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}
