package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// TestBinaryHealth runs lockcell health, the real binary, against five
// lockcelld processes with mutual TLS: a principal listed in acl/monitor
// gets exit 0 on the healthy cell, 3 with one replica stopped and 4 with
// three, and the --json verdicts agree; a principal not listed gets a
// permission error naming the file; an address in --replicas that is no
// member is shown as such and counts for nothing, in health and in status.
func TestBinaryHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "mon", "alice")
	pc := fixtures.NewProcCellWith(t, fixtures.BuildLockcelld(t), "h", 5, 3*time.Second, fixtures.ProcOptions{TLS: set})
	m := pc.MasterIndex(30 * time.Second)
	stray := "127.0.0.1:" + strconv.Itoa(fixtures.FreePorts(t, 1)[0]) // nothing listens: no member
	base := []string{"--cell", "h", "--replicas", strings.Join(append(pc.Addrs(), stray), ","), "--timeout", "20s"}
	as := func(user string) []string {
		cert, key := set.UserFiles(t, user)
		return append([]string{"--cert", cert, "--key", key, "--ca", set.CAFile()}, base...)
	}
	admin, mon, alice := as("admin"), as("mon"), as("alice")
	runBin := func(flags []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), flags...), args...)...)
	}
	// health polls until it exits with code (the master hears from every
	// member, and followers apply acl/monitor, shortly after a start).
	health := func(code int, what string, args ...string) result {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			res := runBin(mon, append([]string{"health"}, args...)...)
			if res.code == code {
				return res
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: health exits %d, want %d; stdout:\n%s\nstderr: %s", what, res.code, code, res.stdout, res.stderr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	verdict := func(res result, want string, members, reachable int) lcadmin.HealthReport {
		t.Helper()
		var rep lcadmin.HealthReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || rep.Verdict != want || rep.Cell != "h" {
			t.Fatalf("health --json: verdict %q (%v); want %q:\n%s", rep.Verdict, err, want, res.stdout)
		}
		nm, nr := 0, 0
		for _, r := range rep.Replicas {
			switch {
			case r.Addr == stray:
				if r.Member || r.Reachable {
					t.Fatalf("the stray address: %+v", r)
				}
			case r.Member:
				nm++
				if r.Reachable {
					nr++
					if r.Disk == nil || r.Disk.DataBytes <= 0 || r.Disk.LogStoreBytes <= 0 {
						t.Fatalf("replica %s's disk: %+v", r.ID, r.Disk)
					}
				}
			}
		}
		if nm != members || nr != reachable || len(rep.Replicas) != members+1 {
			t.Fatalf("health --json: %d members, %d reachable; want %d and %d:\n%s", nm, nr, members, reachable, res.stdout)
		}
		return rep
	}

	// Nobody but the admin has the monitoring role until acl/monitor
	// lists them.
	res := runBin(alice, "health")
	if res.code != exitError || !strings.Contains(res.stderr, "permission") || !strings.Contains(res.stderr, "/ls/h/acl/monitor") {
		t.Fatalf("alice's health: exit %d, stderr %q; want a permission error naming /ls/h/acl/monitor", res.code, res.stderr)
	}
	// A certificate the cell refuses is the caller's problem, not the
	// cell's: exit 1, not a verdict.
	oc, ok := fixtures.TestCerts(t, "mon").UserFiles(t, "mon")
	res = runBin(append([]string{"--cert", oc, "--key", ok, "--ca", set.CAFile()}, base...), "health")
	if res.code != exitError || !strings.Contains(res.stderr, "refused") {
		t.Fatalf("health with a certificate of another CA: exit %d, stderr %q; want exit 1, refused", res.code, res.stderr)
	}
	for _, args := range [][]string{{"mkdir", "acl"}, {"put", "acl/monitor", "mon\n"}} {
		if res := runBin(admin, args...); res.code != exitOK {
			t.Fatalf("admin %q: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}

	res = health(exitOK, "healthy cell")
	if !strings.Contains(res.stdout, "verdict: healthy (5 of 5 voters healthy, a quorum needs 3)") ||
		!strings.Contains(res.stdout, stray) || !strings.Contains(res.stdout, "not a member") {
		t.Fatalf("health on a healthy cell:\n%s", res.stdout)
	}
	verdict(health(exitOK, "healthy cell, --json", "--json"), lcadmin.HealthHealthy, 5, 5)
	if res := runBin(mon, "--json", "status"); res.code != exitOK || !strings.Contains(res.stdout, `"addr":"`+stray+`","up":false,"is_master":false,"not_member":true`) {
		t.Fatalf("status does not mark the stray address: exit %d\n%s", res.code, res.stdout)
	}
	if res := runBin(mon, "status"); res.code != exitOK || !strings.Contains(res.stdout, stray+"  down (not a member)") {
		t.Fatalf("status does not mark the stray address: exit %d\n%s", res.code, res.stdout)
	}
	// The monitoring role lists the members, and changes none.
	if res := runBin(mon, "replica", "list"); res.code != exitOK || !strings.Contains(res.stdout, "5 members, 5 voters") {
		t.Fatalf("mon's replica list: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := runBin(mon, "--json", "replica", "remove", pc.Peers()[0].ID); res.code != exitError || !strings.Contains(res.stderr, `"code":"permission"`) {
		t.Fatalf("mon's replica remove: exit %d, stderr %q; want a permission error", res.code, res.stderr)
	}
	if res := runBin(mon, "health", "--max-contact", "0s"); res.code != exitUsage {
		t.Fatalf("--max-contact 0s: exit %d, stderr %q", res.code, res.stderr)
	}

	// One follower stopped: degraded, and the problem names it.
	others := []int{}
	for i := range 5 {
		if i != m {
			others = append(others, i)
		}
	}
	pc.Stop(others[0])
	gone := pc.Peers()[others[0]].ID
	res = health(exitDegraded, "one replica stopped")
	if !strings.Contains(res.stdout, "verdict: degraded (4 of 5 voters healthy") || !strings.Contains(res.stdout, "problem: replica "+gone+" ") {
		t.Fatalf("health with replica %s stopped:\n%s", gone, res.stdout)
	}
	rep := verdict(health(exitDegraded, "one replica stopped, --json", "--json"), lcadmin.HealthDegraded, 5, 4)
	if !rep.Quorum.Kept || rep.Quorum.HealthyVoters != 4 || len(rep.Problems) != 1 || !strings.HasPrefix(rep.Problems[0], "replica "+gone+" ") {
		t.Fatalf("health --json with replica %s stopped: quorum %+v, problems %q", gone, rep.Quorum, rep.Problems)
	}

	// Three stopped: no quorum.
	pc.Stop(others[1])
	pc.Stop(others[2])
	res = health(exitUnavailable, "three replicas stopped")
	if !strings.Contains(res.stdout, "verdict: unavailable") {
		t.Fatalf("health with three replicas stopped:\n%s", res.stdout)
	}
	rep = verdict(health(exitUnavailable, "three replicas stopped, --json", "--json"), lcadmin.HealthUnavailable, 5, 2)
	if rep.Quorum.Kept {
		t.Fatalf("health --json with three replicas stopped: quorum %+v", rep.Quorum)
	}
}
