package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

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
	admin, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	acfg := pc.ClientConfig()
	acfg.TLS = set.ClientTLS(t, "alice")
	alice, err := client.Dial(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()

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
