package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// put --ttl makes a TTL file that stat shows and the cell deletes once
// its TTL passes without a write; mkdir --container makes a directory the
// cell deletes with its last child; bad TTLs and combinations are refused
// with clear errors.
func TestPutTTLAndMkdirContainer(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}

	r.ok("put", "--ttl", "1s", "w/alive", "up")
	m := statLines(t, r.ok("stat", "w/alive").stdout)
	if m["ttl"] != "1s" || !strings.HasSuffix(m["expires"], "unless written") {
		t.Fatalf("stat of a TTL file: %v", m)
	}
	var js struct {
		TTLMillis int64 `json:"ttl_ms"`
		Container bool  `json:"container"`
	}
	if err := json.Unmarshal([]byte(r.ok("--json", "stat", "w/alive").stdout), &js); err != nil || js.TTLMillis != 1000 {
		t.Fatalf("stat --json of a TTL file: %+v %v", js, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for res := r.run("", "cat", "w/alive"); res.code == 0; res = r.run("", "cat", "w/alive") {
		if time.Now().After(deadline) {
			t.Fatal("the TTL file is still there after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.fails(exitError, "not found", "cat", "w/alive")

	r.ok("mkdir", "--container", "jobs")
	if m := statLines(t, r.ok("stat", "jobs").stdout); m["container"] != "true" || m["type"] != "directory" {
		t.Fatalf("stat of a container: %v", m)
	}
	r.ok("mkdir", "-p", "--container", "deep/run")
	r.ok("put", "jobs/a", "1")
	r.ok("put", "deep/run/b", "2")
	r.ok("rm", "jobs/a")
	r.ok("rm", "deep/run/b")
	for _, gone := range []string{"jobs", "deep/run"} {
		r.fails(exitError, "not found", "stat", gone)
	}
	r.ok("stat", "deep") // a plain parent stays

	r.fails(exitError, "TTL", "put", "--ttl", "10ms", "w/short", "x")
	r.fails(exitUsage, "--ttl", "put", "--ttl", "5s", "--ephemeral", "w/e", "x")
	res := r.fails(exitError, "", "--json", "put", "--ttl", "9000h", "w/long", "x")
	var je struct{ Error, Code string }
	if err := json.Unmarshal([]byte(res.stderr), &je); err != nil || je.Code != "bad_request" {
		t.Fatalf("a TTL past the maximum: %q (%v)", res.stderr, err)
	}
}
