package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// `lockcell locks` and `lockcell break` through the real binary on a
// mutual-TLS cell: locks lists the held lock with its holder; a
// non-admin's break is refused (exit 1, permission), the admin frees the holder
// and names it, the holder's lock context ends with ErrLockBroken, and
// --json reports the freed holders and the new generation; no --reason is
// a usage error.
func TestBreakVerbBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set, Admin: "admin"})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	adminCert, adminKey := set.UserFiles(t, "admin")
	aliceCert, aliceKey := set.UserFiles(t, "alice")
	asAdmin := append([]string{"--cert", adminCert, "--key", adminKey, "--ca", set.CAFile()}, base...)
	asAlice := append([]string{"--cert", aliceCert, "--key", aliceKey, "--ca", set.CAFile()}, base...)
	run := func(as []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", nil, append(append([]string(nil), as...), args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The admin makes the lock file and lets everyone write (lock) it.
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	const rwc = client.Read | client.Write | client.Create
	for _, f := range []struct {
		name, contents string
		mode           client.OpenMode
	}{{"/ls/t/acl", "", rwc | client.Directory}, {"/ls/t/acl/all", "*\n", rwc}, {"/ls/t/job", "", rwc}} {
		ah, err := admin.Open(ctx, f.name, f.mode)
		if err == nil && f.contents != "" {
			err = ah.SetContents(ctx, []byte(f.contents))
		}
		if err == nil && f.name == "/ls/t/job" {
			_, err = ah.SetACL(ctx, client.ACL{Write: "all"})
		}
		if err != nil {
			t.Fatal(f.name, err)
		}
	}
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	h, err := alice.Open(ctx, "/ls/t/job", client.Read|client.Write)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	lockCtx := h.LockContext()
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// lockcell locks names the holder, for people and for scripts.
	if res := run(asAdmin, "locks"); res.code != exitOK || !strings.Contains(strings.Join(strings.Fields(res.stdout), " "),
		fmt.Sprintf("/ls/t/job exclusive %d %d/alice -", st.LockGen, alice.Session())) {
		t.Fatalf("locks: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	var ljs locksJSON
	if res := run(asAlice, "--json", "locks", "job"); json.Unmarshal([]byte(res.stdout), &ljs) != nil || res.code != exitOK ||
		len(ljs.Locks) != 1 || ljs.Locks[0].Mode != "exclusive" || len(ljs.Locks[0].Holders) != 1 || ljs.Locks[0].Holders[0].Session != alice.Session() {
		t.Fatalf("--json locks job: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	if res := run(asAdmin, "break", "job"); res.code != exitUsage {
		t.Fatalf("break without --reason: exit %d, stderr %q; want %d", res.code, res.stderr, exitUsage)
	}
	if res := run(asAlice, "break", "job", "--reason", "mine"); res.code != exitError || !strings.Contains(res.stderr, "permission") {
		t.Fatalf("alice's break: exit %d, stderr %q; want exit %d naming the permission", res.code, res.stderr, exitError)
	}
	if lockCtx.Err() != nil {
		t.Fatalf("a refused break ended the holder's lock context: %v", context.Cause(lockCtx))
	}
	res := run(asAdmin, "break", "job", "--reason", "wedged host")
	if res.code != exitOK || !strings.Contains(res.stdout, "broke /ls/t/job") || !strings.Contains(res.stdout, fmt.Sprintf("session %d (alice)", alice.Session())) {
		t.Fatalf("admin's break: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	select {
	case <-lockCtx.Done():
	case <-ctx.Done():
		t.Fatal("the holder's lock context did not end after the break")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, client.ErrLockBroken) {
		t.Fatalf("lock context cause %v, want ErrLockBroken", cause)
	}

	// A free lock: nothing to free, still a success; --json for scripts.
	res = run(asAdmin, "--json", "break", "job", "--reason", "again")
	var js breakJSON
	if err := json.Unmarshal([]byte(res.stdout), &js); err != nil || res.code != exitOK || js.Name != "/ls/t/job" ||
		js.Reason != "again" || len(js.Holders) != 0 || js.Generation == 0 {
		t.Fatalf("--json break of a free lock: exit %d, %v: %q", res.code, err, res.stdout)
	}
}
