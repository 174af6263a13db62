package client_test

import (
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// The first release's status and session calls still answer as they did,
// for programs (benchmark drivers among them) written against them: a
// replica's status names the cell, its state and the master; the session
// list holds the caller's own session with a lease; CallsSent counts the
// calls made.
func TestFirstReleaseStatusCalls(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	m := c.WaitForMaster(30 * time.Second)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	st, err := client.QueryStatus(ctx, c.Addrs()[m])
	if err != nil {
		t.Fatal(err)
	}
	if st.Cell != c.ClientConfig().Cell || st.State != "Leader" || st.Master != c.Addrs()[m] || st.Term == 0 || st.Sessions == 0 {
		t.Fatalf("the master's status %+v: want cell %q, Leader, master %s, a term and the client's session", st, c.ClientConfig().Cell, c.Addrs()[m])
	}
	calls := client.CallsSent()
	ss, err := cl.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if client.CallsSent() <= calls {
		t.Fatalf("CallsSent did not count the Sessions call (%d before, %d after)", calls, client.CallsSent())
	}
	for _, s := range ss {
		if s.ID == cl.Session() {
			if s.Lease <= 0 {
				t.Fatalf("own session listed with lease %v", s.Lease)
			}
			return
		}
	}
	t.Fatalf("own session %d not among %+v", cl.Session(), ss)
}
