package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// Mistakes on a replica command line are usage errors, found before any
// dialing (the replicas given here do not exist).
func TestReplicaUsage(t *testing.T) {
	r := cliRunner{t, []string{"--replicas", "127.0.0.1:1", "--timeout", "2s"}}
	r.fails(exitUsage, "no replica command given", "replica")
	r.fails(exitUsage, "unknown replica command", "replica", "rename")
	r.fails(exitUsage, "want exactly 3 argument(s)", "replica", "add", "6", "127.0.0.1:7006")
	r.fails(exitUsage, "want exactly 1 argument(s)", "replica", "remove")
	r.fails(exitUsage, "want exactly 0 argument(s)", "replica", "list", "extra")
	// Options go anywhere, as with every verb.
	r.fails(exitUsage, "want exactly 3 argument(s)", "replica", "add", "--no-wait", "6")
}

// replicaRows parses replica list's table into rows of fields, by id.
func replicaRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "cell ") || !strings.HasPrefix(lines[1], "ID") {
		t.Fatalf("replica list output:\n%s", out)
	}
	rows := map[string][]string{}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	return rows
}

// TestReplicaVerbs runs replica list and remove through the real binary
// against a TLS cell, given one replica's address: the admin lists and
// removes (the master itself, which hands over first), anyone else is
// refused with a message that says why, and the master's refusal to go
// below a majority of the configured size reaches the operator.
func TestReplicaVerbs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: 4 * time.Second})
	m := c.WaitForMaster(20 * time.Second)
	// One address, not the master's: the master is removed below.
	base := []string{"--cell", "t", "--replicas", c.Addrs()[(m+1)%3], "--timeout", "20s"}
	adminCert, adminKey := set.UserFiles(t, "admin")
	aliceCert, aliceKey := set.UserFiles(t, "alice")
	admin := append([]string{"--cert", adminCert, "--key", adminKey, "--ca", set.CAFile()}, base...)
	alice := append([]string{"--cert", aliceCert, "--key", aliceKey, "--ca", set.CAFile()}, base...)
	runBin := func(flags []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}
	check := func(res result, code int, stderr string, what string) {
		t.Helper()
		if res.code != code || !strings.Contains(res.stderr, stderr) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit %d, stderr with %q", what, res.code, res.stdout, res.stderr, code, stderr)
		}
	}

	res := runBin(admin, "replica", "list")
	check(res, exitOK, "", "replica list")
	rows := replicaRows(t, res.stdout)
	if !strings.Contains(res.stdout, "3 members, 3 voters, configured size 3") || len(rows) != 3 {
		t.Fatalf("replica list:\n%s", res.stdout)
	}
	masters := 0
	for i, p := range c.Options().Peers {
		f := rows[p.ID]
		if len(f) != 7 || f[1] != p.ClientAddr || f[2] != p.RaftAddr || f[3] != "voter" || f[5] != "yes" {
			t.Fatalf("row of replica %d: %q in\n%s", i, f, res.stdout)
		}
		if f[4] == "*" {
			masters++
		}
	}
	if masters != 1 {
		t.Fatalf("%d rows marked master:\n%s", masters, res.stdout)
	}
	res = runBin(admin, "replica", "list", "--json")
	check(res, exitOK, "", "replica list --json")
	var list lcadmin.ReplicaList
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list.Replicas) != 3 || list.ConfiguredSize != 3 || list.Voters() != 3 {
		t.Fatalf("replica list --json: %v: %q", err, res.stdout)
	}

	// Not the admin: refused, with the reason and what to do.
	check(runBin(alice, "replica", "list"), exitError, "only the cell's admin", "alice: replica list")
	check(runBin(alice, "replica", "remove", "3"), exitError, "permission", "alice: replica remove")
	res = runBin(alice, "--json", "replica", "remove", "3")
	check(res, exitError, `"code":"permission"`, "alice: --json replica remove")

	// A member whose machine never answers: added as a non-voter, never
	// promoted; add says so when --timeout ends its wait, and it can be
	// removed again.
	ports := fixtures.FreePorts(t, 2)
	ghost := []string{"9", fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	res = runBin(append(admin, "--timeout", "3s"), append([]string{"replica", "add"}, ghost...)...)
	check(res, exitError, "is not a voter yet", "replica add of a replica that does not run")
	if !strings.Contains(res.stderr, "replica 9: nonvoter, not heard from yet") {
		t.Fatalf("replica add showed no progress: %q", res.stderr)
	}
	res = runBin(admin, "replica", "list")
	if f := replicaRows(t, res.stdout)["9"]; len(f) != 7 || f[3] != "nonvoter" || f[5] != "no" {
		t.Fatalf("the added replica's row: %q in\n%s", f, res.stdout)
	}
	check(runBin(admin, "replica", "remove", "9"), exitOK, "", "replica remove 9")

	// Remove the master itself: it hands its leadership over first and the
	// new master removes it. Two voters stay, a majority of three.
	victim := c.Options().Peers[m]
	res = runBin(admin, "replica", "remove", victim.ID)
	check(res, exitOK, "", "replica remove "+victim.ID)
	if rows := replicaRows(t, res.stdout); len(rows) != 2 || rows[victim.ID] != nil {
		t.Fatalf("after removing %s:\n%s", victim.ID, res.stdout)
	}
	for _, f := range replicaRows(t, res.stdout) {
		if f[4] == "*" && f[0] == victim.ID {
			t.Fatalf("the removed master is still master:\n%s", res.stdout)
		}
	}
	// Again: it is gone, so nothing changes and nothing fails.
	check(runBin(admin, "replica", "remove", victim.ID), exitOK, "", "replica remove "+victim.ID+" again")
	// One more would leave one voter, fewer than a majority of three.
	other := c.Options().Peers[(m+1)%3]
	res = runBin(admin, "replica", "remove", other.ID)
	if res.code != exitError || !strings.Contains(res.stderr, "replica remove "+other.ID+":") {
		t.Fatalf("removing a second member: exit %d, stderr %q; want a refusal", res.code, res.stderr)
	}
	res = runBin(admin, "replica", "list")
	check(res, exitOK, "", "replica list after the refusal")
	if rows := replicaRows(t, res.stdout); len(rows) != 2 || rows[other.ID] == nil {
		t.Fatalf("the refused removal changed the members:\n%s", res.stdout)
	}
}
