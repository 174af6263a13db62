package cell_test

import (
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// docs/spec.md#lease-lengthening: under load the master lengthens the
// lease its KeepAlives grant, up to the cell's longest lease; clients
// adopt it from the replies and stay safe; a new master honours the
// longest lease for every session, so a client that vanished keeps its
// lock that long after the fail-over.
func TestLeasesLengthenUnderLoad(t *testing.T) {
	const lease, longest = time.Second, 4 * time.Second
	// One KeepAlive a second is the target: three sessions need a lease
	// of 3/0.75 = 4 s.
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease, MaxLeaseTTL: longest, KeepAliveTarget: 1,
		DefaultLockDelay: 50 * time.Millisecond})
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create

	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer = cut.Dial
	gone := c.ClientWith(t, cfg)
	stay := c.Client(t)
	stayEv := collectEvents(stay)
	other := c.Client(t)

	mi := c.WaitForMaster(30 * time.Second)
	pollUntil(t, 30*time.Second, "the master grants the longest lease", func() bool {
		return c.Server(mi).Master().Stats().LeaseGranted == longest
	})
	// The clients take the long lease from the replies: the master's own
	// view of a session's lease passes the configured one.
	pollUntil(t, 30*time.Second, "a session's lease at the master exceeds the configured lease", func() bool {
		ss, err := admin.New(other).Sessions(ctx)
		if err != nil {
			return false
		}
		for _, s := range ss {
			if s.ID == stay.Session() && s.Lease > lease+lease/2 {
				return true
			}
		}
		return false
	})
	// Two long leases pass with no jeopardy: the calls are held and
	// answered within the leases the clients were told.
	hold := time.Now().Add(2 * longest)
	for time.Now().Before(hold) {
		if _, err := admin.New(stay).Sessions(ctx); err != nil {
			t.Fatal(err)
		}
		<-time.After(100 * time.Millisecond) // a call every tenth of a second, for the whole window
	}
	if stayEv.has(client.Jeopardy) || stayEv.has(client.Expired) {
		t.Fatalf("a client on lengthened leases heard %v", stayEv.kinds())
	}

	lk := mustOpen(t, ctx, gone, c.Name("lock"), rw)
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// The holder vanishes, and the master with it: the new master cannot
	// know how long a lease the old one granted, so it keeps the
	// holder's session for the longest lease from its own start.
	cut.Cut()
	stopped := time.Now()
	c.StopMaster()
	oh := mustOpen(t, ctx, other, c.Name("lock"), rw)
	if err := oh.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatalf("the lock after its holder's session expired: %v", err)
	}
	if took := time.Since(stopped); took < longest {
		t.Fatalf("the vanished holder's lock was granted %v after the fail-over; want no sooner than the longest lease, %v", took, longest)
	}
	stayEv.waitFor(t, client.MasterFailover, 30*time.Second)
	if stayEv.has(client.Expired) {
		t.Fatalf("a live client lost its session in the fail-over: %v", stayEv.kinds())
	}
}
