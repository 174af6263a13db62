package cell_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// openRacing fires n concurrent opens of name on session r and counts
// the handles opened (returned in handles) and the refusals with
// TooMany; any other answer fails the test.
func openRacing(t *testing.T, ctx context.Context, r *rawSession, name string, n int, seq0 uint64) (handles []uint64, refused int64) {
	t.Helper()
	var mu sync.Mutex
	var tooMany atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp wire.OpenResponse
			rr := &rawSession{t: t, mux: r.mux, session: r.session, epoch: r.epoch, seq: seq0 + uint64(i)}
			st, err := rr.try(ctx, wire.MethodOpen, &wire.OpenRequest{Path: name, Flags: wire.OpenRead}, &resp)
			switch {
			case err != nil:
				t.Errorf("open: %v", err)
			case st.Code == wire.CodeOK:
				mu.Lock()
				handles = append(handles, resp.Handle)
				mu.Unlock()
			case st.Code == wire.CodeTooMany:
				tooMany.Add(1)
			default:
				t.Errorf("open: %+v", st)
			}
		}()
	}
	wg.Wait()
	return handles, tooMany.Load()
}

// The caps on open handles per principal (all its sessions together) and
// per cell hold exactly under concurrent opens from many sessions and
// connections, and a closed handle makes room for exactly one more.
func TestHandleCapsAreExactUnderConcurrency(t *testing.T) {
	const perPrincipal, perCell, racers = 25, 40, 20
	set := fixtures.TestCerts(t, "alice", "bob", "carol")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, SessionLimits: master.Limits{
		HandlesPerPrincipal: perPrincipal, Handles: perCell}})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	addr, name := c.Addrs()[m], c.Name("f")
	admin := c.Client(t)
	h := mustOpen(t, ctx, admin, name, client.Read|client.Write|client.Create)
	defer h.Close()

	// Per principal: alice's three sessions, over three connections,
	// race for her 25.
	sessions := func(user string, n int) []*rawSession {
		var out []*rawSession
		cfg := set.ClientTLS(t, user)
		for range n {
			out = append(out, dialRawSession(t, ctx, addr, cfg.Clone()))
		}
		return out
	}
	race := func(rs []*rawSession, seq0 uint64) (opened [][]uint64, total, refused int64) {
		opened = make([][]uint64, len(rs))
		var wg sync.WaitGroup
		var tot, ref atomic.Int64
		for i, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hs, n := openRacing(t, ctx, r, name, racers, seq0)
				opened[i] = hs
				tot.Add(int64(len(hs)))
				ref.Add(n)
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return opened, tot.Load(), ref.Load()
	}
	alice := sessions("alice", 3)
	aliceOpened, got, refused := race(alice, 1)
	if got != perPrincipal || refused != 3*racers-perPrincipal {
		t.Fatalf("%d racing opens of one principal over 3 sessions: %d opened, %d refused; its cap is %d",
			3*racers, got, refused, perPrincipal)
	}

	// Per cell: with alice's 25 and the admin's one, bob's and carol's
	// sessions race for the 14 left, each under its own principal cap.
	others := append(sessions("bob", 2), sessions("carol", 2)...)
	_, got, refused = race(others, 1)
	if left := int64(perCell - perPrincipal - 1); got != left || refused != 4*racers-left {
		t.Fatalf("%d racing opens of two principals: %d opened, %d refused; %d were left under the cell's cap of %d",
			4*racers, got, refused, left, perCell)
	}

	// A handle closed makes room for exactly one more, for any principal.
	// (Alice's sessions raced: close one of whichever got one.)
	k := 0
	for len(aliceOpened[k]) == 0 {
		k++
	}
	r := alice[k]
	for i, hd := range aliceOpened[k][:1] {
		var resp wire.Empty
		if st := (&rawSession{t: t, mux: r.mux, session: r.session, epoch: r.epoch, seq: 100 + uint64(i)}).call(ctx,
			wire.MethodClose, &wire.HandleRequest{Handle: hd}, &resp); st.Code != wire.CodeOK {
			t.Fatalf("close: %+v", st)
		}
	}
	_, got, _ = race(others[:1], 200)
	if got != 1 {
		t.Fatalf("after one close, %d racing opens opened %d; want exactly 1", racers, got)
	}
}
