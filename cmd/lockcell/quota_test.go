package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// TestBinaryQuotaFullCellAdminRepairs runs the real binaries: three
// lockcelld processes with mutual TLS and an 8 KiB content quota, the last
// 2 KiB the admin's. alice fills the cell through `lockcell put` until it
// is refused (exit 1, "quota_exceeded" under --json), tops it up to the
// byte with what `lockcell quota --json` says is left, and `lockcell
// quota` then reports the cell full for her; she may not look at another
// principal's figures. The admin, on the same full cell, still writes a
// new ACL file and `acl set`s the filled directory to it, which takes
// alice's write access away: the reserve is what lets the cell be
// repaired.
func TestBinaryQuotaFullCellAdminRepairs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries; skipped with -short")
	}
	const cellBytes, reserve = 8 << 10, 2 << 10
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, fixtures.BuildLockcelld(t), "q", 3, 3*time.Second, fixtures.ProcOptions{TLS: set,
		ExtraArgs: []string{"--max-content-bytes", "8KiB", "--admin-reserve-content-bytes", "2KiB"}})
	// The CLI reports a cell whose every replica refuses connections as
	// dead at once, as it should: wait until the processes serve.
	pc.MasterIndex(30 * time.Second)
	base := []string{"--cell", "q", "--replicas", strings.Join(pc.Addrs(), ","), "--timeout", "20s"}
	as := func(user string) []string {
		cert, key := set.UserFiles(t, user)
		return append([]string{"--cert", cert, "--key", key, "--ca", set.CAFile()}, base...)
	}
	admin, alice := as("admin"), as("alice")
	runBin := func(who []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), who...), args...)...)
	}
	ok := func(who []string, args ...string) result {
		t.Helper()
		res := runBin(who, args...)
		if res.code != exitOK {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q", args, res.code, res.stdout, res.stderr)
		}
		return res
	}
	quota := func(who []string, args ...string) lcadmin.QuotaReport {
		t.Helper()
		var rep lcadmin.QuotaReport
		res := ok(who, append([]string{"--json", "quota"}, args...)...)
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
			t.Fatalf("quota --json: %v\n%s", err, res.stdout)
		}
		return rep
	}
	contentLimit := func(rep lcadmin.QuotaReport) lcadmin.QuotaLimit {
		t.Helper()
		l, found := rep.Limit("content_bytes")
		if !found || l.Max != cellBytes || l.Reserve != reserve {
			t.Fatalf("%s's content_bytes: %+v (found %v); want max %d, reserve %d", rep.Principal, l, found, cellBytes, reserve)
		}
		return l
	}

	// The admin gives alice a directory to write in.
	ok(admin, "mkdir", "acl")
	ok(admin, "put", "acl/writers", "alice\n")
	ok(admin, "mkdir", "pub")
	ok(admin, "acl", "set", "pub", "--write", "writers")

	// alice writes 1 KiB files until the cell refuses one.
	kib := strings.Repeat("x", 1<<10)
	var refused result
	for i := 0; ; i++ {
		if i > cellBytes>>10 {
			t.Fatalf("%d KiB written into a cell of %d bytes and nothing refused", i, cellBytes)
		}
		res := runBin(alice, "--json", "put", "pub/f"+string(rune('a'+i)), kib)
		if res.code != exitOK {
			refused = res
			break
		}
	}
	if refused.code != exitError || !strings.Contains(refused.stderr, `"code":"quota_exceeded"`) || !strings.Contains(refused.stderr, "kept for the admin") {
		t.Fatalf("the write past the quota: exit %d, stderr %q; want exit 1, quota_exceeded, kept for the admin", refused.code, refused.stderr)
	}
	// What is left for her, from the report a script reads, to the byte.
	l := contentLimit(quota(alice))
	if l.Full || l.Used > cellBytes-reserve || cellBytes-reserve-l.Used >= 1<<10 {
		t.Fatalf("after the refusal alice sees %+v", l)
	}
	ok(alice, "put", "pub/rest", strings.Repeat("y", int(cellBytes-reserve-l.Used)))
	rep := quota(alice)
	if l := contentLimit(rep); !l.Full || l.Used != cellBytes-reserve || l.Percent != 75 || rep.Principal != "alice" || rep.Admin {
		t.Fatalf("the full cell as alice sees it: %+v", rep)
	}
	if res := runBin(alice, "--json", "put", "pub/more", "z"); res.code != exitError || !strings.Contains(res.stderr, `"code":"quota_exceeded"`) {
		t.Fatalf("alice's byte into the full cell: exit %d, stderr %q", res.code, res.stderr)
	}
	human := ok(alice, "quota").stdout
	if !strings.Contains(human, "principal alice\n") || !strings.Contains(human, "LIMIT") ||
		!strings.Contains(human, "content_bytes  ") || !strings.Contains(human, "FULL: the last 2.0 KiB are kept for the admin") {
		t.Fatalf("lockcell quota as alice on the full cell:\n%s", human)
	}
	if res := runBin(alice, "--json", "quota", "--principal", "admin"); res.code != exitError || !strings.Contains(res.stderr, `"code":"permission"`) {
		t.Fatalf("alice asks about the admin: exit %d, stderr %q", res.code, res.stderr)
	}

	// The admin sees the same cell with room left (the reserve), and who
	// filled it.
	rep = quota(admin, "--principal", "alice")
	if l := contentLimit(rep); !l.Full || l.Used != cellBytes-reserve {
		t.Fatalf("the admin's report on alice: %+v", rep)
	}
	if len(rep.TopByContentBytes) == 0 || rep.TopByContentBytes[0].Principal != "alice" || rep.TopByContentBytes[0].ContentBytes != cellBytes-reserve-6 {
		t.Fatalf("the biggest principals by content: %+v", rep.TopByContentBytes)
	}
	if l := contentLimit(quota(admin)); l.Full {
		t.Fatalf("the full cell as the admin sees it: %+v", l)
	}

	// The repair: a new ACL file and the directory set to it, on the full
	// cell. alice can no longer create there (an empty file, so no quota
	// is in play); the admin's bytes came from the reserve.
	ok(admin, "put", "acl/ops", "admin\n")
	ok(admin, "acl", "set", "pub", "--write", "ops")
	if res := ok(admin, "acl", "get", "pub"); !strings.Contains(res.stdout, "ops") {
		t.Fatalf("acl get pub after the repair:\n%s", res.stdout)
	}
	if res := runBin(alice, "--json", "touch", "pub/new"); res.code != exitError || !strings.Contains(res.stderr, `"code":"permission"`) {
		t.Fatalf("alice creates after the repair: exit %d, stderr %q; want a permission error", res.code, res.stderr)
	}
	if l := contentLimit(quota(admin)); l.Used != cellBytes-reserve+6 {
		t.Fatalf("after the repair the cell holds %d bytes, want %d", l.Used, cellBytes-reserve+6)
	}
}
