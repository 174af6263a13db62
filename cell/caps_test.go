package cell_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// createSessions fires n concurrent CreateSession calls over mux and
// counts the sessions created and the refusals with TooMany; any other
// answer fails the test (with Errorf: callers may run it in goroutines).
func createSessions(t *testing.T, ctx context.Context, mux *fixtures.WireMux, n int) (created, refused int64) {
	t.Helper()
	var ok, tooMany atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rawSession{t: t, mux: mux}
			var resp wire.CreateSessionResponse
			st, err := r.try(ctx, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "racer"}, &resp)
			switch {
			case err != nil:
				errs <- err.Error()
			case st.Code == wire.CodeOK:
				ok.Add(1)
			case st.Code == wire.CodeTooMany:
				tooMany.Add(1)
			default:
				errs <- fmt.Sprintf("status %+v", st)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("create session: %s", e) // Errorf: callers run it in goroutines
	}
	return ok.Load(), tooMany.Load()
}

// liveSessions is the number of sessions the cell holds, as the master
// reports it.
func liveSessions(t *testing.T, ctx context.Context, c *fixtures.Cell, m int) uint64 {
	t.Helper()
	st, err := admin.QueryStatusWith(ctx, c.ClientConfig(), c.Addrs()[m])
	if err != nil {
		t.Fatal(err)
	}
	return st.Sessions
}

// Caps on sessions per connection, per principal and per cell, and on
// handles per session, hold exactly under concurrent creates: a check
// and the command it admits are no longer separate steps that racing
// callers can all pass.
func TestCapsAreExactUnderConcurrency(t *testing.T) {
	const perConn, perPrincipal, perSession = 10, 25, 10
	c := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{
		SessionsPerConn: perConn, SessionsPerPrincipal: perPrincipal, HandlesPerSession: perSession}})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	addr := c.Addrs()[m]

	// Per connection: 100 racing creates over one connection.
	created, refused := createSessions(t, ctx, dialRawMux(t, addr, nil), 100)
	if created != perConn || refused != 100-perConn {
		t.Fatalf("100 racing creates over one connection: %d created, %d refused; cap %d", created, refused, perConn)
	}
	// Per principal (everyone is "anonymous" without TLS): four more
	// connections race for what is left.
	muxes := []*fixtures.WireMux{dialRawMux(t, addr, nil), dialRawMux(t, addr, nil), dialRawMux(t, addr, nil), dialRawMux(t, addr, nil)}
	var more atomic.Int64
	var wg sync.WaitGroup
	for _, mux := range muxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := createSessions(t, ctx, mux, 50)
			more.Add(n)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if total := created + more.Load(); total != perPrincipal {
		t.Fatalf("racing creates over five connections made %d sessions; the principal's cap is %d", total, perPrincipal)
	}
	if n := liveSessions(t, ctx, c, m); n != perPrincipal {
		t.Fatalf("the cell holds %d sessions; the cap is %d", n, perPrincipal)
	}

	// Handles per session: 100 racing opens on one session (of a second
	// cell: the sessions above used up the principal's cap).
	c2 := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{HandlesPerSession: perSession}})
	m2 := c2.WaitForMaster(30 * time.Second)
	r := dialRawSession(t, ctx, c2.Addrs()[m2], nil)
	var opened, refusedOpens atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp wire.OpenResponse
			rr := &rawSession{t: t, mux: r.mux, session: r.session, epoch: r.epoch, seq: uint64(1000 + i)}
			st, err := rr.try(ctx, wire.MethodOpen, &wire.OpenRequest{Path: c2.Name(fmt.Sprintf("f%d", i)),
				Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate}, &resp)
			switch {
			case err != nil:
				t.Errorf("open %d: %v", i, err)
			case st.Code == wire.CodeOK:
				opened.Add(1)
			case st.Code == wire.CodeTooMany:
				refusedOpens.Add(1)
			default:
				t.Errorf("open %d: %+v", i, st)
			}
		}()
	}
	wg.Wait()
	if opened.Load() != perSession || refusedOpens.Load() != 100-perSession {
		t.Fatalf("100 racing opens on one session: %d opened, %d refused; cap %d", opened.Load(), refusedOpens.Load(), perSession)
	}
}

// The cap on sessions in the cell holds exactly under concurrent creates.
func TestCellSessionCapIsExactUnderConcurrency(t *testing.T) {
	const perCell = 15
	c := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{Sessions: perCell}})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		mux := dialRawMux(t, c.Addrs()[m], nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _ := createSessions(t, ctx, mux, 40)
			total.Add(n)
		}()
	}
	wg.Wait()
	if total.Load() != perCell {
		t.Fatalf("160 racing creates made %d sessions; the cell's cap is %d", total.Load(), perCell)
	}
	if n := liveSessions(t, ctx, c, m); n != perCell {
		t.Fatalf("the cell holds %d sessions; the cap is %d", n, perCell)
	}
}

// Racing callers who together ask for exactly a cap all get in: a check
// that finds the cap reached only because sessions or handles just
// applied are still counted as reservations waits for those to be given
// back instead of refusing early. One more caller is then refused.
func TestCapsAdmitEveryCallerWhenDemandIsTheCap(t *testing.T) {
	const perPrincipal, perSession = 60, 60
	c := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{
		SessionsPerPrincipal: perPrincipal, SessionsPerConn: perPrincipal, HandlesPerSession: perSession}})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	addr := c.Addrs()[m]

	// Three connections, each keeping four creates in flight, so that
	// creates arrive while earlier ones are being applied and answered.
	var made atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		mux := dialRawMux(t, addr, nil)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perPrincipal / 12 {
					n, refused := createSessions(t, ctx, mux, 1)
					if refused != 0 {
						t.Errorf("a create racing below the cap of %d was refused", perPrincipal)
					}
					made.Add(n)
				}
			}()
		}
	}
	wg.Wait()
	if made.Load() != perPrincipal {
		t.Fatalf("%d racing creates made %d sessions", perPrincipal, made.Load())
	}
	if n, refused := createSessions(t, ctx, dialRawMux(t, addr, nil), 1); n != 0 || refused != 1 {
		t.Fatalf("a create past the full cap: %d made, %d refused", n, refused)
	}

	c2 := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{HandlesPerSession: perSession}})
	m2 := c2.WaitForMaster(30 * time.Second)
	r := dialRawSession(t, ctx, c2.Addrs()[m2], nil)
	name := c2.Name("f")
	mustOpen(t, ctx, c2.Client(t), name, client.Read|client.Write|client.Create) // another session's handle
	// Six openers, one open in flight each, as the sessions above.
	var opened atomic.Int64
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < perSession; i += 6 {
				handles, refused := openRacing(t, ctx, r, name, 1, uint64(1000+i))
				if refused != 0 {
					t.Errorf("open %d of %d racing below the cap of %d was refused", i, perSession, perSession)
				}
				opened.Add(int64(len(handles)))
			}
		}()
	}
	wg.Wait()
	if opened.Load() != perSession {
		t.Fatalf("%d racing opens opened %d handles", perSession, opened.Load())
	}
	if handles, refused := openRacing(t, ctx, r, name, 1, 2000); len(handles) != 0 || refused != 1 {
		t.Fatalf("an open past the full cap: %d opened, %d refused", len(handles), refused)
	}
}
