package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// The drift margin against a real cell (Config.Clock): a client whose
// clock runs 1 % slow, or fast, must see its local lease end no later
// than the master's, so it is in jeopardy before the master can expire it.
// A clock 10 % slow must overrun, or the check proves nothing.
//
// Each client is cut off from the cell (fixtures.Cutter) right after a
// KeepAlive reply was applied, so from then on neither lease moves. The
// master's lease end is read on the shared real clock (the master is in
// this process) through another client's Sessions call: with the call
// sent at b and answered at a, and the master reporting L ms left
// (truncated), its end lies in [b+L, a+L+1ms]. The client's end, computed
// on its skewed clock, is mapped to real time through that clock's rate.
// The check compares those times, not the moment events were seen.
func TestDriftMarginCoversOnePercentSlowClock(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	obs := c.Client(t)
	for _, tc := range []struct {
		rate float64
		safe bool // must the client's lease end no later than the master's?
	}{{0.99, true}, {1.01, true}, {0.90, false}} {
		t.Run(fmt.Sprintf("rate=%.2f", tc.rate), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			clk := fixtures.NewSkewedClock(tc.rate)
			cut := fixtures.NewCutter()
			cfg := c.ClientConfig()
			cfg.Clock, cfg.Dialer = clk, cut.Dial
			cfg.GracePeriod, cfg.RetryTimeout = 2*time.Second, 2*time.Second
			cl, err := client.Dial(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				cut.Heal()
				cl.Close()
			}()
			id := cl.Session()

			// A lease computed from a KeepAlive reply on this clock, not
			// just the one from CreateSession: wait until the end moves.
			first, _ := cl.LeaseEnd()
			moved := time.Now().Add(10 * time.Second)
			for end, _ := cl.LeaseEnd(); end.Equal(first); end, _ = cl.LeaseEnd() {
				if time.Now().After(moved) {
					t.Fatalf("no KeepAlive reply within 10 s of dialling")
				}
				time.Sleep(5 * time.Millisecond)
			}
			cut.Cut()
			cutAt := time.Now()

			// Sample the master's lease end until the client enters
			// jeopardy (or the master has expired the session: the
			// overrunning case). The end never moves earlier (a
			// KeepAlive still in flight at the cut can only move it
			// later), so every sample's lower bound holds for the final
			// end and the highest is the tightest (the one whose call
			// reached the master fastest: a loaded machine delays some);
			// the upper bound is the last sample's.
			type bounds struct{ lo, hi time.Time }
			var last *bounds
			var goneAt time.Time
			sample := func() {
				b := time.Now()
				infos, err := admin.New(obs).Sessions(ctx)
				a := time.Now()
				if err != nil {
					t.Fatalf("sessions: %v", err)
				}
				for _, in := range infos {
					if in.ID == id && in.Lease > 0 {
						lo := b.Add(in.Lease)
						if last != nil && last.lo.After(lo) {
							lo = last.lo
						}
						last = &bounds{lo: lo, hi: a.Add(in.Lease + time.Millisecond)}
						return
					}
				}
				goneAt = a // expired at the master (or its lease already ran out)
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			var jeopardyAt time.Time
			sample()
			for jeopardyAt.IsZero() {
				select {
				case ev, ok := <-cl.Events():
					if !ok {
						t.Fatal("events closed before jeopardy")
					}
					// A jeopardy a later KeepAlive reply ended came before
					// the cut (a reply late on a loaded machine): after
					// the cut no reply can end one.
					if _, in := cl.LeaseEnd(); ev.Kind == client.Jeopardy && in {
						jeopardyAt = time.Now()
					}
				case <-tick.C:
					if goneAt.IsZero() {
						sample()
					}
				case <-ctx.Done():
					t.Fatal("no jeopardy within 30 s of the cut")
				}
			}
			if last == nil {
				t.Fatalf("the master had no lease for session %d right after the cut", id)
			}
			end, jeopardy := cl.LeaseEnd()
			if !jeopardy {
				t.Fatal("jeopardy event but the session is not in jeopardy")
			}
			if last.lo.After(last.hi) {
				t.Fatalf("inconsistent samples of the master's lease end: at least %v, at most %v", last.lo, last.hi)
			}
			endReal := clk.Real(end)
			t.Logf("rate %.2f: client's lease ends %v after the cut, master's in [%v, %v]: client minus master %v..%v; jeopardy seen %v after the cut; master expiry seen: %v",
				tc.rate, endReal.Sub(cutAt).Round(time.Millisecond), last.lo.Sub(cutAt).Round(time.Millisecond), last.hi.Sub(cutAt).Round(time.Millisecond),
				endReal.Sub(last.hi).Round(time.Millisecond), endReal.Sub(last.lo).Round(time.Millisecond),
				jeopardyAt.Sub(cutAt).Round(time.Millisecond), !goneAt.IsZero())
			if tc.safe && endReal.After(last.lo) {
				t.Errorf("clock rate %.2f: the client's lease may end up to %v after the master's: the drift margin does not cover it",
					tc.rate, endReal.Sub(last.lo))
			}
			if !tc.safe && !endReal.After(last.hi) {
				t.Errorf("clock rate %.2f: the client's lease ends %v before the master's: a clock this slow should overrun; the check does not bite",
					tc.rate, last.hi.Sub(endReal))
			}
		})
	}
}

// The drift margin's arithmetic for leases from 300 ms to a minute: the
// local share of a lease, run on a clock 1 % slow, ends within the lease;
// on a clock 10 % slow it overruns.
func TestDriftMarginArithmetic(t *testing.T) {
	slow, slower := fixtures.NewSkewedClock(0.99), fixtures.NewSkewedClock(0.90)
	for _, lease := range []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second, 3500 * time.Millisecond, 12 * time.Second, 16 * time.Second, time.Minute} {
		local := lease - client.DriftMargin(lease)
		if r := slow.RealDuration(local); r > lease {
			t.Errorf("lease %v: on a clock 1 %% slow the client's share %v lasts %v real", lease, local, r)
		}
		if r := slower.RealDuration(local); r <= lease {
			t.Errorf("lease %v: on a clock 10 %% slow the client's share %v lasts only %v real: expected an overrun", lease, local, r)
		}
	}
}
