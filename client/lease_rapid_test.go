package client_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"lockcell/client"
)

// The lease arithmetic under injected clocks whose rates differ: a
// client's idea of its lease must never outlast the master's, for any
// client clock running at least 99 % of the master's rate (the bound
// Config.Clock documents), any network and scheduling delays, and any
// KeepAlive hold the master chooses.
//
// The master's side follows master/sessions.go: CreateSession grants
// until its clock's now + TTL; a KeepAlive extends the lease to arrival +
// TTL, is held at most until a quarter of the previous lease is left,
// waits for a leadership proof (a round begun at most a tenth of a lease
// before it asked, waited for at most a quarter lease), extends to reply +
// TTL and grants until min(lease end, proof + TTL), reporting how long it
// held the call and how much lease is left, both in whole milliseconds.
// The client's side is the rule Config.Clock states: the lease a reply
// reports, counted from when the call was sent on the client's clock,
// less client.DriftMargin of it.

// simClock is a clock running at rate times the simulated real time.
type simClock struct {
	base time.Time
	rate float64
	real *time.Duration
}

func (c simClock) Now() time.Time { return c.base.Add(time.Duration(float64(*c.real) * c.rate)) }

func (c simClock) AfterFunc(time.Duration, func()) client.Timer {
	panic("simClock: no timers in the lease arithmetic")
}

// realOf is the simulated real time at which c reads t.
func (c simClock) realOf(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.base)) / c.rate)
}

// clientLeaseEnd is the client's local lease end for a reply that
// reports lease (held + left), for a call sent at sent on its clock.
func clientLeaseEnd(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - client.DriftMargin(lease))
}

// leaseRun simulates one session: a CreateSession and KeepAlives, and
// returns the first moment the client's lease outlasted the master's (as
// a description), or "".
func leaseRun(t *rapid.T, ratio float64) string {
	var now time.Duration // simulated real time
	ttl := time.Duration(rapid.IntRange(100, 60_000).Draw(t, "ttl ms")) * time.Millisecond
	rm := rapid.Float64Range(0.5, 2).Draw(t, "master rate")
	master := simClock{base: time.Unix(1_700_000_000, 0), rate: rm, real: &now}
	cl := simClock{base: time.Unix(1_800_000_000, 0), rate: rm * ratio, real: &now}
	var _ client.Clock = cl // the client library's clock interface
	// delay passes up to max of real time.
	delay := func(label string, max time.Duration) {
		now += time.Duration(rapid.Int64Range(0, int64(max)).Draw(t, label))
	}
	// masterWait passes d on the master's clock.
	masterWait := func(d time.Duration) { now += time.Duration(float64(d)/rm) + 1 }
	check := func(what string, clientEnd, masterEnd time.Time) string {
		if c, m := cl.realOf(clientEnd), master.realOf(masterEnd); c > m {
			return fmt.Sprintf("%s: the client's lease ends at real %v, the master's at %v (ttl %v, rates %.4f/%.4f)", what, c, m, ttl, cl.rate, rm)
		}
		return ""
	}

	// CreateSession.
	sent := cl.Now()
	delay("to master", 200*time.Millisecond)
	delay("apply", 2*ttl)
	end := master.Now().Add(ttl)
	leaseMillis := ttl.Milliseconds()
	delay("to client", 200*time.Millisecond)
	if v := check("CreateSession", clientLeaseEnd(sent, time.Duration(leaseMillis)*time.Millisecond), end); v != "" {
		return v
	}

	for i := range rapid.IntRange(1, 20).Draw(t, "keepalives") {
		delay("before sending", ttl)
		sent := cl.Now()
		delay("to master", ttl/2)
		arrived := master.Now()
		if end.Before(arrived) {
			return "" // the master has expired the session: nothing left to outlast
		}
		holdUntil := end.Add(-ttl / 4)
		if e := arrived.Add(ttl); e.After(end) {
			end = e
		}
		if d := holdUntil.Sub(arrived); d > 0 {
			masterWait(time.Duration(rapid.Int64Range(0, int64(d)).Draw(t, "hold")))
		}
		asked := master.Now()
		masterWait(time.Duration(rapid.Int64Range(0, int64(ttl/4)).Draw(t, "proof wait")))
		replied := master.Now()
		lo := asked.Add(-ttl / 10)
		proven := lo.Add(time.Duration(rapid.Int64Range(0, int64(replied.Sub(lo))).Draw(t, "proof round")))
		if e := replied.Add(ttl); e.After(end) {
			end = e
		}
		granted := end
		if e := proven.Add(ttl); e.Before(granted) {
			granted = e
		}
		held, left := replied.Sub(arrived).Milliseconds(), granted.Sub(replied).Milliseconds()
		delay("to client", ttl/2)
		lease := time.Duration(held+left) * time.Millisecond
		if v := check(fmt.Sprintf("KeepAlive %d", i+1), clientLeaseEnd(sent, lease), end); v != "" {
			return v
		}
	}
	return ""
}

// TestLeaseNeverOutlastsMasterUnderRateSkew: for a client clock at any
// rate from 99 % of the master's up, the local lease ends first.
func TestLeaseNeverOutlastsMasterUnderRateSkew(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ratio := rapid.Float64Range(0.99, 1.5).Draw(t, "client rate / master rate")
		if v := leaseRun(t, ratio); v != "" {
			t.Fatal(v)
		}
	})
}

// TestLeaseSimulationCatchesSlowClock shows the check above has teeth:
// with the client's clock 3 % to 10 % slower than the master's (outside
// the bound), the same simulation finds a lease that outlasts the
// master's.
func TestLeaseSimulationCatchesSlowClock(t *testing.T) {
	runs, overruns := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		runs++
		if leaseRun(t, rapid.Float64Range(0.90, 0.97).Draw(t, "client rate / master rate")) != "" {
			overruns++
		}
	})
	t.Logf("%d of %d sessions with a slow client clock outlasted the master's lease", overruns, runs)
	if overruns == 0 {
		t.Fatalf("no overrun in %d sessions with a client clock 3-10 %% slow: the simulation cannot see one", runs)
	}
}
