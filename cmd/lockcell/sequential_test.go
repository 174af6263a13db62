package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lockcell/fixtures"
)

// put --sequential makes a new file under the prefix with the directory's
// next number, prints the name it made (--json: its stat, so named), makes
// missing parents unless --no-parents, and refuses what cannot work with a
// clear error: a compare-and-swap, a prefix with no room for the number.
func TestPutSequential(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}

	if got := r.ok("put", "--sequential", "jobs/job-", "first").stdout; got != "/ls/t/jobs/job-0000000000\n" {
		t.Fatalf("put --sequential printed %q", got)
	}
	if got := r.ok("cat", "jobs/job-0000000000").stdout; got != "first" {
		t.Fatalf("the item holds %q", got)
	}
	var js struct {
		Name string `json:"name"`
		Size uint64 `json:"size"`
	}
	out := r.ok("put", "jobs/job-", "--json", "--sequential", "second").stdout
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Name != "/ls/t/jobs/job-0000000001" || js.Size != 6 {
		t.Fatalf("put --sequential --json: %q (%+v, %v)", out, js, err)
	}
	// A trailing '/' makes names of digits alone; numbers are the
	// directory's, so this one is 2.
	if got := r.ok("put", "--sequential", "jobs/", "x").stdout; got != "/ls/t/jobs/0000000002\n" {
		t.Fatalf("put --sequential jobs/ printed %q", got)
	}
	r.ok("rm", "jobs/0000000002")
	if got := r.ok("put", "--sequential", "jobs/job-", "y").stdout; got != "/ls/t/jobs/job-0000000003\n" {
		t.Fatalf("after a delete put --sequential printed %q (a number reused?)", got)
	}

	// Directories: mkdir --sequential, several prefixes, -p for parents.
	if got := r.ok("mkdir", "--sequential", "jobs/batch-", "jobs/batch-").stdout; got != "/ls/t/jobs/batch-0000000004\n/ls/t/jobs/batch-0000000005\n" {
		t.Fatalf("mkdir --sequential printed %q", got)
	}
	if m := statLines(t, r.ok("stat", "jobs/batch-0000000005").stdout); m["type"] != "directory" {
		t.Fatalf("mkdir --sequential made %v", m)
	}
	var dirs struct{ Dirs []string }
	if err := json.Unmarshal([]byte(r.ok("--json", "mkdir", "-p", "--sequential", "deep/er/d-").stdout), &dirs); err != nil ||
		len(dirs.Dirs) != 1 || dirs.Dirs[0] != "/ls/t/deep/er/d-0000000000" {
		t.Fatalf("mkdir -p --sequential --json: %+v %v", dirs, err)
	}
	r.fails(exitError, "not found", "mkdir", "--sequential", "nope/d-")

	r.fails(exitUsage, "--if-generation", "put", "--sequential", "--if-generation", "3", "jobs/job-", "z")
	r.fails(exitError, "not found", "put", "--sequential", "--no-parents", "nope/job-", "z")
	res := r.fails(exitError, "", "--json", "put", "--sequential", "jobs/"+strings.Repeat("x", 250), "z")
	var je struct{ Error, Code string }
	if err := json.Unmarshal([]byte(res.stderr), &je); err != nil || je.Code != "invalid_name" {
		t.Fatalf("a prefix with no room for the number: %q (%v)", res.stderr, err)
	}
}
