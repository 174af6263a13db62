package cell_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// client.Locks (ListLocks) through real mutual-TLS connections: held and
// waited-for locks in name order with holders in grant order and waiters
// in queue order with their modes; free locks and other prefixes are not
// listed; a caller sees only the locks it may read, the admin all. A
// read's Stat names the waiters in queue order.
func TestLocksListsHeldAndWaitedLocks(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "alice", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	const rw = client.Read | client.Write
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Create|client.Directory).Close()
	for name, who := range map[string]string{"all": "*\n", "alice": "alice\n"} {
		if err := mustOpen(t, ctx, admin, c.Name("acl/"+name), rw|client.Create).SetContents(ctx, []byte(who)); err != nil {
			t.Fatal(err)
		}
	}
	mustOpen(t, ctx, admin, c.Name("jobs"), rw|client.Create|client.Directory).Close()
	for name, acl := range map[string]client.ACL{"jobs/a": {Write: "all"}, "jobs/secret": {Read: "alice", Write: "all"},
		"jobs/free": {Write: "all"}, "other": {Write: "all"}} {
		if _, err := mustOpen(t, ctx, admin, c.Name(name), rw|client.Create).SetACL(ctx, acl); err != nil {
			t.Fatal(err)
		}
	}
	if err := mustOpen(t, ctx, alice, c.Name("jobs/a"), rw).Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	if err := mustOpen(t, ctx, bob, c.Name("jobs/secret"), client.Write).Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	if err := mustOpen(t, ctx, alice, c.Name("other"), rw).Acquire(ctx, client.Shared); err != nil {
		t.Fatal(err)
	}
	hb := mustOpen(t, ctx, bob, c.Name("jobs/a"), rw)
	ha := mustOpen(t, ctx, admin, c.Name("jobs/a"), rw)
	waits := make(chan error, 2)
	go func() { waits <- hb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "bob queued", func() bool { s, _ := ha.GetStat(ctx); return s.LockWaiters == 1 })
	go func() { waits <- ha.Acquire(ctx, client.Shared) }()
	pollUntil(t, 10*time.Second, "admin queued", func() bool { s, _ := ha.GetStat(ctx); return s.LockWaiters == 2 })

	me := client.ProcessIdentity() // what every client here declares
	a := lcadmin.LockInfo{Name: c.Name("jobs/a"), Mode: client.Exclusive,
		Holders: []client.LockHolder{{Session: alice.Session(), Principal: "alice", Identity: me}}, HolderCount: 1,
		Waiters: []client.LockWaiter{{Session: bob.Session(), Principal: "bob", Mode: client.Exclusive, Identity: me},
			{Session: admin.Session(), Principal: "admin", Mode: client.Shared, Identity: me}}, WaiterCount: 2}
	secret := lcadmin.LockInfo{Name: c.Name("jobs/secret"), Mode: client.Exclusive,
		Holders: []client.LockHolder{{Session: bob.Session(), Principal: "bob", Identity: me}}, HolderCount: 1}
	check := func(who *client.Client, prefix string, want ...lcadmin.LockInfo) {
		t.Helper()
		got, truncated, err := lcadmin.New(who).Locks(ctx, prefix)
		if err != nil || truncated {
			t.Fatalf("Locks(%s): %v, truncated %v", prefix, err, truncated)
		}
		for i := range got {
			if got[i].Generation == 0 {
				t.Fatalf("Locks(%s): %s has no generation", prefix, got[i].Name)
			}
			got[i].Generation = 0
			got[i].Holders = untimed(t, got[i].Holders)
			got[i].Waiters = untimedWaiters(t, got[i].Waiters)
		}
		if want == nil {
			want = []lcadmin.LockInfo{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Locks(%s):\n got %+v\nwant %+v", prefix, got, want)
		}
	}
	check(admin, c.Name("jobs"), a, secret)
	// A read's Stat names the waiters too, in queue order.
	if st, err := hb.GetStat(ctx); err != nil || !reflect.DeepEqual(untimedWaiters(t, st.Waiters), a.Waiters) || st.LockWaiters != 2 {
		t.Fatalf("Stat waiters: %+v (%d), %v; want %+v", st.Waiters, st.LockWaiters, err, a.Waiters)
	}
	check(alice, c.Name("jobs"), a, secret)
	check(bob, c.Name("jobs"), a) // bob may lock secret but not read it
	check(bob, c.Name("jobs/a"), a)
	check(admin, c.Name("jobs/free"))
	if got, _, err := lcadmin.New(admin).Locks(ctx, "/ls/t"); err != nil || len(got) != 3 || got[2].Name != c.Name("other") || got[2].Mode != client.Shared {
		t.Fatalf("Locks of the root: %+v, %v", got, err)
	}
}

// untimedWaiters is untimed for waiters: each queued at a known, recent
// time, returned without it.
func untimedWaiters(t *testing.T, ws []client.LockWaiter) []client.LockWaiter {
	t.Helper()
	out := slices.Clone(ws)
	for i := range out {
		if age := time.Since(out[i].Since); out[i].Since.IsZero() || age < -time.Minute || age > time.Minute {
			t.Errorf("waiter %d since %v", out[i].Session, out[i].Since)
		}
		out[i].Since = time.Time{}
	}
	return out
}
