package cell_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/sequencer"
	"lockcell/sequencer/kv"
)

// An admin's break (client.BreakLock) through real mutual-TLS connections:
// a non-admin is refused and changes nothing; the admin's break frees the
// holder, whose lock context ends with a cause naming the break and its
// reason, hands the lock to the queued waiter at once (no lock-delay),
// makes the example resource server (sequencer/kv guarded with the cell as
// Checker) refuse the old holder's sequencer, and is in the audit log with
// its reason.
func TestBreakLockFreesHolderFencesItAndIsAudited(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "alice", "bob")
	audit := &aclAudit{}
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin", Logger: slog.New(audit)})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	const rw = client.Read | client.Write
	lock := c.Name("job")
	hl := mustOpen(t, ctx, admin, lock, rw|client.Create)
	// Everyone may write (lock) the file.
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Create|client.Directory).Close()
	if err := mustOpen(t, ctx, admin, c.Name("acl/all"), rw|client.Create).SetContents(ctx, []byte("*\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := hl.SetACL(ctx, client.ACL{Write: "all"}); err != nil {
		t.Fatal(err)
	}

	ha := mustOpen(t, ctx, alice, lock, rw)
	if err := ha.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	lockCtx := ha.LockContext()
	seqA, err := ha.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The guard asks the cell about every write (no confirmation cache),
	// so the break alone, before bob writes, fences alice.
	res := fenceStartKV(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell, Checker: admin, CacheTTL: -1})})
	if ans := res.put(ctx, "k", seqA, "a1"); ans.status != http.StatusOK {
		t.Fatalf("alice writes a1: %d %s", ans.status, ans.body)
	}

	hb := mustOpen(t, ctx, bob, lock, rw)
	got := make(chan error, 1)
	go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "bob queued", func() bool { s, _ := hl.GetStat(ctx); return s.LockWaiters == 1 })

	// Not the admin: refused, and nothing changes.
	if _, err := lcadmin.New(bob).BreakLock(ctx, lock, "mine now"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("bob's break: %v, want ErrPermission", err)
	}
	if lockCtx.Err() != nil {
		t.Fatalf("a refused break ended alice's lock context: %v", context.Cause(lockCtx))
	}
	if _, err := lcadmin.New(admin).BreakLock(ctx, c.Name("nothing"), "x"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("break of a missing name: %v, want ErrNotFound", err)
	}

	const reason = "batch job stuck since Tuesday"
	br, err := lcadmin.New(admin).BreakLock(ctx, lock, reason)
	if err != nil {
		t.Fatal(err)
	}
	if want := []client.LockHolder{{Session: alice.Session(), Principal: "alice"}}; !slices.Equal(br.Holders, want) || br.Generation <= fenceGen(t, seqA) {
		t.Fatalf("break: %+v; want holders %+v and a generation above %d", br, want, fenceGen(t, seqA))
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("bob's acquire after the break: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("bob did not get the broken lock")
	}
	select {
	case <-lockCtx.Done():
	case <-ctx.Done():
		t.Fatal("alice's lock context did not end after the break")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, client.ErrLockBroken) || !strings.Contains(cause.Error(), reason) {
		t.Fatalf("alice's lock context ended with %v; want ErrLockBroken naming the reason", cause)
	}

	// The resource server refuses alice's old sequencer; bob's works.
	if ans := res.put(ctx, "k", seqA, "a2"); ans.status != http.StatusConflict || ans.rej.Reason != kv.ReasonStale {
		t.Fatalf("alice's write after the break: %d %s; want 409 stale", ans.status, ans.body)
	}
	seqB, err := hb.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ans := res.put(ctx, "k", seqB, "b1"); ans.status != http.StatusOK {
		t.Fatalf("bob writes b1: %d %s", ans.status, ans.body)
	}
	if ok, err := alice.CheckSequencer(ctx, seqA); ok || err != nil {
		t.Fatalf("the cell calls alice's sequencer valid=%v (%v) after the break", ok, err)
	}
	if err := ha.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("alice's release after the break: %v, want ErrNotHeld", err)
	}

	if n := audit.count("principal", "admin", "op", "BreakLock", "path", lock, "reason", reason, "result", "ok"); n != 1 {
		t.Errorf("%d audit lines for the admin's break, want 1", n)
	}
	if n := audit.count("principal", "bob", "op", "BreakLock", "result", "permission denied"); n != 1 {
		t.Errorf("%d audit lines for bob's refused break, want 1", n)
	}
}
