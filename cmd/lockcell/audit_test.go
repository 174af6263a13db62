package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// auditJSON parses lockcell audit --json's output: one record a line.
func auditJSON(t *testing.T, out string) []lcadmin.AuditRecord {
	t.Helper()
	var recs []lcadmin.AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r lcadmin.AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit --json line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestBinaryAudit runs lockcell audit, the real binary, against three
// lockcelld processes with mutual TLS: the admin reads every mutation, by
// name prefix and from an index, for people and as JSON lines; another
// principal is refused with a typed code; a follow prints new records as
// they are applied, goes on at another replica when the one it reads is
// killed, without repeating a record, and ends at its --timeout with 75.
func TestBinaryAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, fixtures.BuildLockcelld(t), "au", 3, 3*time.Second, fixtures.ProcOptions{TLS: set})
	pc.MasterIndex(30 * time.Second)
	base := []string{"--cell", "au", "--replicas", strings.Join(pc.Addrs(), ","), "--timeout", "20s"}
	as := func(user string) []string {
		cert, key := set.UserFiles(t, user)
		return append([]string{"--cert", cert, "--key", key, "--ca", set.CAFile()}, base...)
	}
	admin, alice := as("admin"), as("alice")
	run := func(flags []string, code int, args ...string) result {
		t.Helper()
		res := runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
		if res.code != code {
			t.Fatalf("lockcell %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.code, code, res.stdout, res.stderr)
		}
		return res
	}
	run(admin, 0, "put", "svc/a", "one")
	run(admin, 0, "put", "svc/a", "two")
	run(admin, 0, "put", "other", "x")

	// Any replica answers, maybe a follower a few entries behind: read
	// until the last put's create is there.
	var all []lcadmin.AuditRecord
	for deadline := time.Now().Add(20 * time.Second); ; {
		all = auditJSON(t, run(admin, 0, "audit", "--json").stdout)
		if n := len(all); n > 0 && slices.ContainsFunc(all, func(r lcadmin.AuditRecord) bool { return r.Name == "/ls/au/other" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of other's create in\n%+v", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	writes := 0
	var prev uint64
	for _, r := range all {
		if r.Index <= prev {
			t.Fatalf("record %d after %d", r.Index, prev)
		}
		prev = r.Index
		if r.Op == "write" && r.Name == "/ls/au/svc/a" && r.Result == "ok" {
			writes++
			if r.Principal != "admin" || r.Program != "lockcell" || r.Session == 0 {
				t.Fatalf("write record %+v: want the admin, its session and program", r)
			}
		}
	}
	if writes != 1 { // the first put creates with its contents, the second writes
		t.Fatalf("%d write records of svc/a in\n%+v", writes, all)
	}
	svc := auditJSON(t, run(admin, 0, "audit", "--json", "svc").stdout)
	for _, r := range svc {
		if !strings.HasPrefix(r.Name, "/ls/au/svc") {
			t.Fatalf("audit svc listed %+v", r)
		}
	}
	if len(svc) < 3 { // svc created, svc/a created, svc/a written
		t.Fatalf("audit svc: %+v", svc)
	}
	at := slices.IndexFunc(all, func(r lcadmin.AuditRecord) bool { return r.Op == "write" })
	from := all[at].Index
	if tail := auditJSON(t, run(admin, 0, "audit", "--json", "--since", strconv.FormatUint(from, 10)).stdout); len(tail) < len(all)-at || tail[0].Index != from {
		t.Fatalf("audit --since %d: %+v", from, tail)
	}
	human := run(admin, 0, "audit", "--since", strconv.FormatUint(from, 10)).stdout
	if !strings.Contains(human, "/ls/au/svc/a") || !strings.Contains(human, "admin s") || !strings.Contains(human, "create_session") {
		t.Fatalf("audit for people:\n%s", human)
	}
	if res := run(alice, exitError, "--json", "audit"); !strings.Contains(res.stderr, `"code":"permission"`) {
		t.Fatalf("alice's audit: %s", res.stderr)
	}
	run(admin, exitUsage, "audit", "--since", "yesterday")

	// Follow from here, reading the first replica; kill it while the
	// follow runs.
	next := strconv.FormatUint(all[len(all)-1].Index+1, 10)
	cmd := exec.CommandContext(t.Context(), bin, append(append([]string(nil), admin...), "audit", "--follow", "--json", "--since", next, "--replicas", strings.Join(pc.Addrs(), ","))...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan lcadmin.AuditRecord, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r lcadmin.AuditRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				lines <- r
			}
		}
	}()
	seen := map[uint64]bool{}
	waitFor := func(name string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case r, ok := <-lines:
				if !ok {
					t.Fatalf("the follow ended before %s's write", name)
				}
				if seen[r.Index] {
					t.Fatalf("the follow printed record %d twice", r.Index)
				}
				seen[r.Index] = true
				if r.Op == "write" && r.Name == "/ls/au/"+name {
					return
				}
			case <-deadline:
				t.Fatalf("the follow printed no write of %s", name)
			}
		}
	}
	run(admin, 0, "put", "other", "y")
	waitFor("other")
	pc.Kill(0) // the replica the follow reads (maybe the master)
	pc.MasterIndex(30 * time.Second)
	run(admin, 0, "put", "other", "z")
	waitFor("other")
	cmd.Process.Signal(syscall.SIGINT)
	for r := range lines {
		if seen[r.Index] {
			t.Fatalf("the follow printed record %d twice", r.Index)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the follow, interrupted: %v (want exit 0)", err)
	}
	res := run(admin, exitTimeout, "audit", "--follow", "--timeout", "1s", "--since", next, "--replica", pc.Addrs()[1])
	if !strings.Contains(res.stdout, "/ls/au/other") {
		t.Fatalf("a follow ended by --timeout printed:\n%s", res.stdout)
	}
}

// A record of a call made through a proxy names the proxy after its
// principal, for people ("alice via edge") and under --json ("proxy");
// a direct call's names none.
func TestPrintAuditRecordNamesTheProxy(t *testing.T) {
	proxied := lcadmin.AuditRecord{Index: 7, Time: "2026-12-07T09:00:00Z", Op: "write", Principal: "alice", Proxy: "edge",
		Session: 5, Name: "/ls/c/f", Result: "ok"}
	direct := proxied
	direct.Proxy = ""
	for _, c := range []struct {
		json      bool
		r         lcadmin.AuditRecord
		want, not string
	}{
		{false, proxied, "alice via edge s5", ""},
		{false, direct, "alice s5", " via "},
		{true, proxied, `"proxy":"edge"`, ""},
		{true, direct, `"principal":"alice"`, `"proxy"`},
	} {
		var out strings.Builder
		e := &env{stdout: &out, json: c.json}
		if err := e.printAuditRecord(c.r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), c.want) || (c.not != "" && strings.Contains(out.String(), c.not)) {
			t.Errorf("json %v, proxy %q printed %q: want %q in it and not %q", c.json, c.r.Proxy, out.String(), c.want, c.not)
		}
	}
}
