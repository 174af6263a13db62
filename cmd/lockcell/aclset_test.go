package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestACLSetRefusesMissingFiles runs acl set through the real binary:
// naming an ACL file that does not exist is refused with the file's full
// name and changes nothing (it used to lock everyone but the admin out);
// "*" given as a file name is refused with how to grant everyone; once
// the file exists, or with "" (the default rule), acl set works; and a
// node already naming a missing file can still have its other names
// changed.
func TestACLSetRefusesMissingFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runBin := cliOnCell(t)
	ok := succeeding(t, runBin)
	aclOf := func() string {
		t.Helper()
		return ok("acl", "get", "jobs").stdout
	}
	ok("put", "jobs", "x")
	before := aclOf()

	res := runBin("acl", "set", "jobs", "--read", "staff")
	if res.code != exitError || !strings.Contains(res.stderr, "/ls/t/acl/staff does not exist") {
		t.Fatalf("acl set naming a missing file: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runBin("--json", "acl", "set", "jobs", "--write", "staff")
	var e struct{ Error, Code string }
	if res.code != exitError || json.Unmarshal([]byte(res.stderr), &e) != nil || e.Code != "not_found" ||
		!strings.Contains(e.Error, "/ls/t/acl/staff") {
		t.Fatalf("acl set --json naming a missing file: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runBin("acl", "set", "jobs", "--read", "*")
	if res.code != exitError || !strings.Contains(res.stderr, "not a principal") || !strings.Contains(res.stderr, "holding the line *") {
		t.Fatalf("acl set --read '*': exit %d, stderr %q", res.code, res.stderr)
	}
	if after := aclOf(); after != before {
		t.Fatalf("refused acl sets changed the ACL:\n%s\nnow\n%s", before, after)
	}

	// Created first, the file may be named; "" restores the default.
	ok("put", "/ls/t/acl/staff", "alice\n")
	ok("acl", "set", "jobs", "--read", "staff")
	if got := aclOf(); !strings.Contains(got, "read        staff: alice") {
		t.Fatalf("acl get after setting staff:\n%s", got)
	}
	// A file deleted later is kept named (and denies); the node's other
	// names can still change.
	ok("rm", "/ls/t/acl/staff")
	ok("put", "/ls/t/acl/ops", "bob\n")
	ok("acl", "set", "jobs", "--write", "ops")
	ok("acl", "set", "jobs", "--read", "")
	if got := aclOf(); !strings.Contains(got, "read        (default") || !strings.Contains(got, "write       ops: bob") {
		t.Fatalf("acl get after the default and ops:\n%s", got)
	}
}
