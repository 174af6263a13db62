package main

import (
	"strings"
	"testing"

	"lockcell/fixtures"
)

// TestConnectToReachesReplicasByOtherAddresses runs the real binary
// against replicas given only by names that never resolve (.invalid, as
// a compose cell's replica-N does on the host): without --connect-to it
// cannot reach the cell; with a rule sending every host to 127.0.0.1 on
// the same port (as compose publishes them) it works, following the
// master's redirects through the same rule; LOCKCELL_CONNECT_TO does the
// same (status, health and audit, which dial each replica themselves,
// included), and a malformed rule is a usage error.
func TestConnectToReachesReplicasByOtherAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	var names []string
	for _, a := range c.Addrs() {
		_, port, _ := strings.Cut(a, ":")
		names = append(names, "replica.invalid:"+port)
	}
	base := []string{"--cell", "t", "--replicas", strings.Join(names, ","), "--timeout", "5s"}
	run := func(env []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", env, append(append([]string(nil), base...), args...)...)
	}
	if res := run(nil, "put", "f", "x"); res.code == exitOK {
		t.Fatal("put reached replicas named replica.invalid without --connect-to: the test proves nothing")
	}
	for i := range 3 { // each replica first in turn: two of three redirect to the master
		names[0], names[i] = names[i], names[0]
		base[3] = strings.Join(names, ",")
		if res := run(nil, "--connect-to", "::127.0.0.1:", "put", "f", "v"); res.code != exitOK {
			t.Fatalf("put with --connect-to (seed %s): exit %d, stderr %q", names[0], res.code, res.stderr)
		}
	}
	if res := run([]string{"LOCKCELL_CONNECT_TO=::127.0.0.1:"}, "cat", "f"); res.code != exitOK || res.stdout != "v" {
		t.Fatalf("cat with LOCKCELL_CONNECT_TO: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// The verbs that ask replicas one by one follow the rule too.
	for _, verb := range [][]string{{"status"}, {"health"}, {"audit", "--limit", "1"}} {
		if res := run(nil, append([]string{"--connect-to", "::127.0.0.1:"}, verb...)...); res.code != exitOK {
			t.Fatalf("%s with --connect-to: exit %d, stdout %q, stderr %q", verb[0], res.code, res.stdout, res.stderr)
		}
	}
	if res := run(nil, "--connect-to", "a:b:c", "cat", "f"); res.code != exitUsage || !strings.Contains(res.stderr, "--connect-to") {
		t.Fatalf("a malformed rule: exit %d, stderr %q", res.code, res.stderr)
	}
}
