package cell_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Cooperative revocation through real mutual-TLS connections: a waiter
// with the write permission asks the holder to let go, and the holder's
// handle hears who asked and why (and its Client's Events a
// ReleaseRequested event) while still holding the lock; the holder lets go
// and the waiter is granted. A reader without the write permission is
// refused, a principal that may neither read nor write is told the name
// does not exist, and a session asking again within the interval gets
// ErrTooMany. Each request that asked holders is one audit line.
func TestRequestReleaseReachesTheHolder(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "alice", "bob", "carol", "dave")
	audit := &aclAudit{}
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin", Logger: slog.New(audit)})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	carol := c.ClientWith(t, c.ClientConfigAs("carol"))
	dave := c.ClientWith(t, c.ClientConfigAs("dave"))
	const rw = client.Read | client.Write
	lock := c.Name("job")
	hl := mustOpen(t, ctx, admin, lock, rw|client.Create)
	// dave opens the file while anyone may read it, then loses that.
	hd := mustOpen(t, ctx, dave, lock, client.Read)
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Create|client.Directory).Close()
	for name, who := range map[string]string{"writers": "alice\nbob\n", "readers": "alice\nbob\ncarol\n"} {
		if err := mustOpen(t, ctx, admin, c.Name("acl/"+name), rw|client.Create).SetContents(ctx, []byte(who)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hl.SetACL(ctx, client.ACL{Read: "readers", Write: "writers"}); err != nil {
		t.Fatal(err)
	}

	ha := mustOpen(t, ctx, alice, lock, rw)
	if err := ha.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	st, err := ha.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hb := mustOpen(t, ctx, bob, lock, rw)
	got := make(chan error, 1)
	go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "bob queued", func() bool { s, _ := hl.GetStat(ctx); return s.LockWaiters == 1 })

	// Those who may not lock it are not heard.
	hc := mustOpen(t, ctx, carol, lock, client.Read)
	if _, err := hc.RequestRelease(ctx, "carol wants it"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("carol (a reader) asks: %v, want ErrPermission", err)
	}
	if _, err := hd.RequestRelease(ctx, "dave wants it"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("dave (who may neither read nor write) asks: %v, want ErrNotFound", err)
	}
	if _, err := hb.RequestRelease(ctx, string(make([]byte, client.MaxReleaseReason+1))); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a reason over the bound: %v, want ErrBadRequest", err)
	}

	const reason = "the nightly report needs it"
	n, err := hb.RequestRelease(ctx, reason)
	if err != nil || n != 1 {
		t.Fatalf("bob asks: %d holders asked, %v; want 1", n, err)
	}
	rr := nextReleaseRequest(t, ctx, ha)
	if rr.Path != lock || rr.Session != bob.Session() || rr.Principal != "bob" || rr.Reason != reason || rr.Generation != st.LockGen {
		t.Fatalf("alice heard %+v; want %s at generation %d from bob's session %d with the reason", rr, lock, st.LockGen, bob.Session())
	}
	// The request is the holder's handle's alone: the session's stream
	// carries no handle events.
	for {
		select {
		case ev := <-alice.Events():
			if ev.Path != "" || ev.Kind == client.ReleaseRequested {
				t.Fatalf("Client.Events carried a handle event: %+v", ev)
			}
			continue
		default:
		}
		break
	}
	// Advice only: alice still holds the lock, and bob still waits.
	if ha.LockContext().Err() != nil {
		t.Fatal("a release request ended the holder's lock context")
	}
	select {
	case err := <-got:
		t.Fatalf("bob's acquire returned (%v) before alice let go", err)
	default:
	}

	if _, err := hb.RequestRelease(ctx, reason); !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("bob asks again at once: %v, want ErrTooMany", err)
	}
	// Once the interval has passed bob may ask again; the refused tries
	// in between did not count.
	pollUntil(t, 10*client.RequestReleaseInterval, "bob may ask again", func() bool {
		n, err := hb.RequestRelease(ctx, "still waiting")
		if errors.Is(err, client.ErrTooMany) {
			return false
		}
		if err != nil || n != 1 {
			t.Fatalf("bob asks after the interval: %d, %v", n, err)
		}
		return true
	})
	if rr := nextReleaseRequest(t, ctx, ha); rr.Reason != "still waiting" {
		t.Fatalf("alice's second request: %+v", rr)
	}

	// The holder lets go; the waiter gets the lock.
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("bob's acquire: %v", err)
	}
	// The admin may ask too, though the lock's ACL does not name it.
	if n, err := hl.RequestRelease(ctx, "maintenance"); err != nil || n != 1 {
		t.Fatalf("the admin asks: %d, %v; want 1", n, err)
	}
	if rr := nextReleaseRequest(t, ctx, hb); rr.Principal != "admin" || rr.Reason != "maintenance" {
		t.Fatalf("bob heard %+v; want the admin's maintenance request", rr)
	}

	if n := audit.count("principal", "bob", "op", "RequestRelease", "path", lock, "reason", reason,
		"asked_sessions", "["+strconv.FormatUint(alice.Session(), 10)+"]", "result", "ok"); n != 1 {
		t.Errorf("%d audit lines for bob's first request, want 1", n)
	}
	if n := audit.count("principal", "carol", "op", "RequestRelease", "result", "permission denied"); n != 1 {
		t.Errorf("%d audit lines for carol's refused request, want 1", n)
	}
}

// nextReleaseRequest is the next request h's holder hears on its
// handle's Events, within ctx (other kinds are skipped).
func nextReleaseRequest(t *testing.T, ctx context.Context, h *client.Handle) client.ReleaseRequest {
	t.Helper()
	for {
		select {
		case ev, ok := <-h.Events():
			if !ok {
				t.Fatalf("%s: the handle's stream closed before the holder was asked to release", h.Name())
			}
			if ev.Kind != client.ReleaseRequested {
				continue
			}
			if ev.ReleaseRequest == nil || ev.Path != h.Name() {
				t.Fatalf("%s: a release-requested event without its request: %+v", h.Name(), ev)
			}
			return *ev.ReleaseRequest
		case <-ctx.Done():
			t.Fatalf("%s: the holder was never asked to release", h.Name())
			return client.ReleaseRequest{}
		}
	}
}
