package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// adminAndAlice dials pc as the admin and as alice, closing both when
// the test ends; acfg is alice's configuration.
func adminAndAlice(ctx context.Context, t *testing.T, pc *fixtures.ProcCell, set *fixtures.CertSet) (admin, alice *client.Client, acfg client.Config) {
	t.Helper()
	admin, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	acfg = pc.ClientConfig()
	acfg.TLS = set.ClientTLS(t, "alice")
	if alice, err = client.Dial(ctx, acfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	return admin, alice, acfg
}

// auditLines returns the audit lines the replicas wrote to stderr so far.
func auditLines(pc *fixtures.ProcCell) []string {
	var out []string
	for i := range pc.N() {
		for _, l := range strings.Split(pc.Log(i), "\n") {
			if strings.Contains(l, "msg=audit ") {
				out = append(out, l)
			}
		}
	}
	return out
}

// With default flags (log level warn) a TLS replica writes its audit
// lines, a permission denial and ACL changes, on stderr, structured, while
// its other Info lines stay off.
func TestServeAuditLinesAtDefaultLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, bin, "aud", 3, 8*time.Second, fixtures.ProcOptions{TLS: set})
	pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, alice, _ := adminAndAlice(ctx, t, pc, set)

	for _, n := range []struct {
		name string
		mode client.OpenMode
		opts []client.OpenOption
	}{
		{"acl", client.Directory, nil},
		{"acl/writers", 0, []client.OpenOption{client.WithContents([]byte("admin\n"))}},
	} {
		h, err := admin.Open(ctx, pc.Name(n.name), n.mode|client.Read|client.Write|client.Create, n.opts...)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	f, err := admin.Open(ctx, pc.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.SetACL(ctx, client.ACL{Write: "writers"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Open(ctx, pc.Name("f"), client.Read|client.Write); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice opens f for writing: %v, want ErrPermission", err)
	}

	want := map[string][]string{
		"denial":         {"principal=alice", "op=Open", "path=" + pc.Name("f"), `result="permission denied"`},
		"SetACL":         {"principal=admin", "op=SetACL", "path=" + pc.Name("f"), "result=ok"},
		"ACL file write": {"principal=admin", "op=Open", "path=" + pc.Name("acl/writers"), "result=ok"},
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := auditLines(pc)
		missing := ""
		for what, parts := range want {
			found := false
			for _, l := range lines {
				ok := true
				for _, p := range parts {
					ok = ok && strings.Contains(l, p)
				}
				found = found || ok
			}
			if !found {
				missing = what
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit line for the %s on stderr; audit lines:\n%s", missing, strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A principal that keeps asking for what it may not have gets a ration
	// of denial lines (200 at once, 10 a second after), not a line per
	// call: the stream is on by default and a replica's disk is finite.
	// What is held back is counted on its next logged denial.
	const flood = 600
	start := time.Now()
	for range flood {
		if _, err := alice.Open(ctx, pc.Name("f"), client.Read|client.Write); !errors.Is(err, client.ErrPermission) {
			t.Fatalf("alice opens f for writing: %v, want ErrPermission", err)
		}
	}
	bound := 1 + 200 + int(10*time.Since(start).Seconds()) + 1
	denials := func() (n int, held string) {
		for _, l := range auditLines(pc) {
			if strings.Contains(l, "principal=alice") {
				n++
				if i := strings.Index(l, "not_logged_before="); i >= 0 {
					held = strings.Fields(l[i:])[0]
				}
			}
		}
		return n, held
	}
	if n, _ := denials(); n > bound || n < 200 {
		t.Fatalf("%d denials by one principal in %v wrote %d audit lines; want between 200 and %d", flood+1, time.Since(start), n, bound)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		if _, err := alice.Open(ctx, pc.Name("f"), client.Read|client.Write); !errors.Is(err, client.ErrPermission) {
			t.Fatalf("alice opens f for writing: %v, want ErrPermission", err)
		}
		if _, held := denials(); held != "" {
			t.Logf("after %d denials, the next logged one says %s", flood, held)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no audit line says how many denials were not logged")
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline; the ration refills at 10 a second
	}

	// The audit stream is on by itself: the level of the other logs
	// stays at warn.
	for i := range pc.N() {
		for _, l := range strings.Split(pc.Log(i), "\n") {
			if strings.Contains(l, "level=INFO") && !strings.Contains(l, "msg=audit ") {
				t.Errorf("replica %d logged an Info line at the default level: %s", i, l)
			}
		}
	}
}

// readTrail reads replica addr's whole audit trail, page by page.
func readTrail(cfg client.Config, addr string) ([]lcadmin.AuditRecord, error) {
	var out []lcadmin.AuditRecord
	q := lcadmin.AuditQuery{Since: 1, Max: 7} // small pages: paging is part of what is checked
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := lcadmin.ReadAudit(ctx, cfg, addr, q)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, page.Records...)
		if len(page.Records) == 0 || page.Next > page.Last {
			return out, nil
		}
		q.Since = page.Next
	}
}

// The audit trail is the cell's, not a master's: mutations made before
// and after the master is killed are on every replica's trail, in one
// order, each once, with the new master's epoch between them, also on
// the killed replica once it is back (it replays what it had and skips
// it). Any replica serves it, to the admin only.
func TestAuditTrailAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, bin, "trail", 3, 4*time.Second, fixtures.ProcOptions{TLS: set})
	mi := pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin, _, acfg := adminAndAlice(ctx, t, pc, set) // alice's session is in the trail

	write := func(i int) {
		t.Helper()
		h, err := admin.Open(ctx, pc.Name(fmt.Sprintf("w-%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, []byte("v")); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	for i := range 10 {
		write(i)
	}
	pc.Kill(mi)
	pc.MasterIndex(60 * time.Second)
	for i := 10; i < 20; i++ {
		write(i) // through the fail-over: the client finds the new master
	}
	pc.Start(mi)

	if _, err := lcadmin.ReadAudit(ctx, acfg, pc.Addrs()[(mi+1)%pc.N()], lcadmin.AuditQuery{}); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice reads the audit trail: %v, want ErrPermission", err)
	}
	cfg := pc.ClientConfig()
	trails := make([][]lcadmin.AuditRecord, pc.N())
	deadline := time.Now().Add(60 * time.Second)
	for i := range pc.N() {
		for { // the restarted replica starts and catches up
			trail, err := readTrail(cfg, pc.Addrs()[i])
			trails[i] = trail
			if n := len(trail); err == nil && n > 0 && trail[n-1].Name == pc.Name("w-19") && trail[n-1].Op == "write" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d's trail ends with %v (err %v), not the last write", i, trail[max(len(trail)-1, 0):], err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	key := func(r lcadmin.AuditRecord) string {
		return fmt.Sprintf("%d %s %s %s %s", r.Index, r.Op, r.Principal, r.Name, r.Result)
	}
	for i, trail := range trails {
		creates, writes, epochs, aliceSessions := map[string]int{}, map[string]int{}, 0, 0
		var prev uint64
		epochAt := -1
		for j, r := range trail {
			if r.Index <= prev {
				t.Fatalf("replica %d: record %d (%s) after %d: the trail must be in index order, each once", i, r.Index, key(r), prev)
			}
			prev = r.Index
			if i > 0 && (j >= len(trails[0]) || key(trails[0][j]) != key(r)) {
				t.Fatalf("replica %d's record %d is %q, replica 0's differs: every replica holds the same trail", i, j, key(r))
			}
			switch {
			case r.Op == "gap":
				t.Fatalf("replica %d: gap record %s (no snapshot was installed)", i, r.Detail)
			case r.Op == "create" && r.Result == "ok":
				creates[r.Name]++
			case r.Op == "write" && r.Result == "ok":
				writes[r.Name]++
				if r.Principal != "admin" || r.Session == 0 || r.Program == "" {
					t.Fatalf("replica %d: write record %+v: want the admin's principal, session and declared program", i, r)
				}
			case r.Op == "epoch":
				epochs++
				if r.Detail == "master epoch 2" {
					epochAt = j
				}
			case r.Op == "create_session" && r.Principal == "alice":
				aliceSessions++
			}
		}
		for w := range 20 {
			n := pc.Name(fmt.Sprintf("w-%d", w))
			if creates[n] != 1 || writes[n] != 1 {
				t.Fatalf("replica %d: %s created %d and written %d times in the trail; want once each", i, n, creates[n], writes[n])
			}
		}
		if epochs != 2 || epochAt < 0 || aliceSessions != 1 {
			t.Fatalf("replica %d: %d epoch records (epoch 2 at %d), %d sessions of alice; want 2, one after the kill, and 1", i, epochs, epochAt, aliceSessions)
		}
		for j, r := range trail {
			if r.Name == pc.Name("w-9") && r.Op == "write" && j > epochAt || r.Name == pc.Name("w-10") && r.Op == "create" && j < epochAt {
				t.Fatalf("replica %d: %s at %d, new epoch at %d: the trail's order is the cell's", i, key(r), j, epochAt)
			}
		}
	}
	if len(trails[mi]) != len(trails[0]) {
		t.Fatalf("the restarted replica holds %d records, the others %d", len(trails[mi]), len(trails[0]))
	}
}
