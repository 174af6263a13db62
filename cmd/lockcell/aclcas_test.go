package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestACLSetIfGeneration runs acl set --if-generation through the real
// binary: with the node's current ACL generation the change is made and
// reports the new generation; with the old one, now stale, it fails with
// code generation_mismatch and the ACL stays as the first change left it;
// the flag is taken after NAME too, and a value that is not a number is a
// usage error.
func TestACLSetIfGeneration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runBin := cliOnCell(t)
	ok := succeeding(t, runBin)
	aclGen := func() uint64 {
		t.Helper()
		var st struct {
			ACLGen uint64 `json:"acl_generation"`
		}
		if out := ok("--json", "stat", "jobs").stdout; json.Unmarshal([]byte(out), &st) != nil || st.ACLGen == 0 {
			t.Fatalf("stat --json: %q", out)
		}
		return st.ACLGen
	}
	ok("put", "jobs", "x")
	ok("put", "/ls/t/acl/ops", "bob\n")
	gen := strconv.FormatUint(aclGen(), 10)

	var set struct {
		Write  string `json:"write"`
		ACLGen uint64 `json:"acl_generation"`
	}
	out := ok("--json", "acl", "set", "--if-generation", gen, "jobs", "--write", "ops").stdout
	if json.Unmarshal([]byte(out), &set) != nil || set.Write != "ops" || strconv.FormatUint(set.ACLGen, 10) == gen {
		t.Fatalf("acl set --if-generation with the current generation: %q", out)
	}
	if now := aclGen(); now != set.ACLGen {
		t.Fatalf("stat says ACL generation %d, acl set said %d", now, set.ACLGen)
	}

	// The generation read before that change is stale now: refused, and
	// nothing changes (flag after NAME this time).
	res := runBin("--json", "acl", "set", "jobs", "--write", "", "--if-generation", gen)
	var e struct{ Error, Code string }
	if res.code != exitError || json.Unmarshal([]byte(res.stderr), &e) != nil || e.Code != "generation_mismatch" {
		t.Fatalf("acl set with a stale generation: exit %d, stderr %q", res.code, res.stderr)
	}
	if got := ok("acl", "get", "jobs").stdout; !strings.Contains(got, "write       ops: bob") {
		t.Fatalf("a refused compare-and-swap changed the ACL:\n%s", got)
	}
	if now := aclGen(); now != set.ACLGen {
		t.Fatalf("a refused compare-and-swap moved the ACL generation from %d to %d", set.ACLGen, now)
	}

	if res := runBin("acl", "set", "jobs", "--write", "ops", "--if-generation=soon"); res.code != exitUsage {
		t.Fatalf("--if-generation soon: exit %d, stderr %q", res.code, res.stderr)
	}
}
