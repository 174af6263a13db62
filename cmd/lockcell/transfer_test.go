package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// TestReplicaTransferLeadership moves the master through the real binary
// on a TLS cell: to a named voter and to whichever voter is most up to
// date, each time returning only once the new master serves and naming
// it; the master's refusals (an unknown member, itself, a non-voter, a
// caller who is not the admin) are typed, change nothing, and every
// transfer asked for leaves an audit line.
func TestReplicaTransferLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	var logs syncBuffer
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: 4 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	c.WaitForMaster(20 * time.Second)
	peers := c.Options().Peers
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	adminCert, adminKey := set.UserFiles(t, "admin")
	aliceCert, aliceKey := set.UserFiles(t, "alice")
	admin := append([]string{"--cert", adminCert, "--key", adminKey, "--ca", set.CAFile()}, base...)
	alice := append([]string{"--cert", aliceCert, "--key", aliceKey, "--ca", set.CAFile()}, base...)
	runBin := func(flags []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}
	jsonErr := func(res result, code, what string) {
		t.Helper()
		var e struct{ Error, Code string }
		if res.code != exitError || json.Unmarshal([]byte(res.stderr), &e) != nil || e.Code != code {
			t.Fatalf("%s: exit %d, stderr %q; want exit %d and JSON code %q", what, res.code, res.stderr, exitError, code)
		}
	}

	// The master as the cell itself names it (a replica that just lost an
	// early election may still be stopping its term).
	res := runBin(admin, "--json", "replica", "list")
	var list lcadmin.ReplicaList
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil {
		t.Fatalf("replica list: %v: %q %q", err, res.stdout, res.stderr)
	}
	m := -1
	for i, p := range peers {
		if r, ok := list.Find(p.ID); ok && r.Master {
			m = i
		}
	}
	if m < 0 {
		t.Fatalf("no master listed: %+v", list)
	}

	// To a named voter.
	target := (m + 1) % 3
	res = runBin(admin, "replica", "transfer-leadership", peers[target].ID)
	want := fmt.Sprintf("master is now replica %s (%s), was %s", peers[target].ID, peers[target].ClientAddr, peers[m].ID)
	if res.code != exitOK || !strings.HasPrefix(res.stdout, want) {
		t.Fatalf("transfer-leadership %s: exit %d, stdout %q, stderr %q; want %q", peers[target].ID, res.code, res.stdout, res.stderr, want)
	}
	// It returned once the new master served: no waiting here.
	if ok, _ := c.Server(target).IsMaster(); !ok {
		t.Fatalf("transfer-leadership returned before replica %s served as master", peers[target].ID)
	}
	m = target

	// Refusals, each typed, each changing nothing.
	jsonErr(runBin(admin, "--json", "replica", "transfer-leadership", "42"), "not_found", "an unknown member")
	jsonErr(runBin(admin, "--json", "replica", "transfer-leadership", peers[m].ID), "bad_request", "the master itself")
	res = runBin(alice, "replica", "transfer-leadership")
	if res.code != exitError || !strings.Contains(res.stderr, "only the cell's admin") {
		t.Fatalf("alice: exit %d, stderr %q; want a refusal naming the admin", res.code, res.stderr)
	}
	ports := fixtures.FreePorts(t, 2)
	res = runBin(admin, "replica", "add", "--no-wait", "9", fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]))
	if res.code != exitOK {
		t.Fatalf("add a non-voter: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runBin(admin, "--json", "replica", "transfer-leadership", "9")
	jsonErr(res, "bad_request", "a non-voter")
	if !strings.Contains(res.stderr, "non-voter") {
		t.Fatalf("the non-voter refusal does not say why: %q", res.stderr)
	}
	if res := runBin(admin, "replica", "remove", "9"); res.code != exitOK {
		t.Fatalf("remove the non-voter: exit %d, stderr %q", res.code, res.stderr)
	}
	if now := c.WaitForMaster(5 * time.Second); now != m {
		t.Fatalf("a refused transfer moved the master from %d to %d", m, now)
	}

	// A voter that is down: refused at once (the client does not retry
	// it until --timeout), once the master has missed it for two
	// heartbeat timeouts.
	down := (m + 1) % 3
	c.Stop(down)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res = runBin(admin, "--json", "replica", "transfer-leadership", peers[down].ID)
		var e struct{ Error, Code string }
		if json.Unmarshal([]byte(res.stderr), &e) == nil && e.Code == "bad_request" && strings.Contains(e.Error, "not been heard from") {
			break
		}
		if res.code == exitOK || time.Now().After(deadline) {
			t.Fatalf("transfer to the stopped replica %s: exit %d, stderr %q", peers[down].ID, res.code, res.stderr)
		}
	}

	// To whichever voter is most up to date, with --json: the one left.
	res = runBin(admin, "--json", "replica", "transfer-leadership")
	var tr transferJSON
	if res.code != exitOK || json.Unmarshal([]byte(res.stdout), &tr) != nil || tr.From != peers[m].ID || tr.To == "" || tr.To == tr.From {
		t.Fatalf("transfer-leadership --json: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if tr.To == peers[down].ID {
		t.Fatalf("leadership went to the stopped replica: %+v", tr)
	}
	if now := c.WaitForMaster(5 * time.Second); peers[now].ID != tr.To || tr.ToClientAddr != peers[now].ClientAddr {
		t.Fatalf("transfer said %+v, but replica %s serves", tr, peers[now].ID)
	}

	// One audit line per transfer asked for, done or refused.
	var ok, refused int
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "msg=audit") && strings.Contains(l, "op=ReplicaTransferLeadership") {
			if strings.Contains(l, "result=ok") {
				ok++
			} else {
				refused++
			}
		}
	}
	if ok != 2 || refused < 4 {
		t.Fatalf("audit lines for transfers: %d ok, %d refused; want 2 and at least 4 (the admin's refusals)\n%s", ok, refused, logs.String())
	}
}

// TestReplicaTransferUsage: more than one member named is a usage error,
// found before any dialing.
func TestReplicaTransferUsage(t *testing.T) {
	r := cliRunner{t, []string{"--replicas", "127.0.0.1:1", "--timeout", "2s"}}
	r.fails(exitUsage, "argument", "replica", "transfer-leadership", "1", "2")
}
