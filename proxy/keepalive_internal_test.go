package proxy

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/wire"
)

// A batch is held to the next half-lease tick unless a client that has
// heard the proxy's latest lease needs a newer one sooner: then it comes
// back a quarter lease before that client's lease ends, and at once (a
// millisecond: 0 would mean no bound) for a session told the cell's
// base lease while the master grants a longer one.
func TestBatchHoldEndsBeforeAClientNeedsItsLease(t *testing.T) {
	k := &keeper{}
	const ttl = 60 * time.Second
	now := time.Unix(999_990, 0).Add(7 * time.Second) // 7 s past a tick (a multiple of 30 s)
	tick := k.holdFor(now, ttl)
	if tick != 23*time.Second {
		t.Fatalf("holdFor %v, want to the next half-lease tick, 23s", tick)
	}
	if got := k.holdUntilNeeded(now, ttl, time.Time{}); got != tick {
		t.Fatalf("no client waiting on it: hold %v, want %v", got, tick)
	}
	// Told a lease from the last answer, a lease from now: no cut.
	if got := k.holdUntilNeeded(now, ttl, now.Add(ttl)); got != tick {
		t.Fatalf("a client told a whole lease: hold %v, want %v", got, tick)
	}
	// Told 30 s: back by 15 s, a quarter lease before.
	if got := k.holdUntilNeeded(now, ttl, now.Add(30*time.Second)); got != 15*time.Second {
		t.Fatalf("a client told 30s: hold %v, want 15s", got)
	}
	// A new session told the base lease, 12 s, under a 60 s lease.
	if got := k.holdUntilNeeded(now, ttl, now.Add(12*time.Second)); got != time.Millisecond {
		t.Fatalf("a new session told 12s: hold %v, want 1ms", got)
	}
}

// A call whose client was told the latest lease the proxy has waits for
// the next batch until an eighth of the lease it was told before its end,
// not an eighth of the master's: a session created with the cell's 12 s
// base lease while the master grants 60 s would otherwise hear NotMaster
// 7.5 s early, with 4.5 s of its lease gone. With a newer lease, it is
// answered a quarter to a half of the master's lease before the told end,
// and never later than three quarters of a lease after it arrived.
func TestHoldEndsByTheLeaseTheClientWasTold(t *testing.T) {
	const ttl = 60 * time.Second
	k := &keeper{ttl: ttl}
	now := time.Unix(1_000_000, 0)
	s := &kaSession{toldEnd: now.Add(12 * time.Second), toldFor: 12 * time.Second, leaseEnd: now.Add(11800 * time.Millisecond)}
	c := &clientCall{s: s, arrived: now}
	if got, want := k.holdEndLocked(c), s.toldEnd.Add(-1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("told 12s, nothing newer: hold ends at +%v, want +%v", got.Sub(now), want.Sub(now))
	}
	s.toldEnd, s.toldFor, s.leaseEnd = now.Add(50*time.Second), 50*time.Second, now.Add(80*time.Second)
	for range 100 {
		end := k.holdEndLocked(c)
		if end.Before(s.toldEnd.Add(-ttl/2)) || end.After(s.toldEnd.Add(-ttl/4)) {
			t.Fatalf("told +50s, a newer lease: hold ends at +%v, want within [+20s, +35s]", end.Sub(now))
		}
	}
	s.toldEnd = now.Add(2 * ttl)
	if got := k.holdEndLocked(c); !got.Equal(now.Add(ttl * 3 / 4)) {
		t.Fatalf("told far ahead: hold ends at +%v, want three quarters of a lease", got.Sub(now))
	}
}

// A client is never answered with a lease that has ended: it counts its
// lease from when it sent the call, so it would hold an ended one and
// call again at once, in a loop, flapping between jeopardy and safe for
// as long as the proxy has nothing newer. Here the proxy's lease for the
// session, though longer than the one its client was told, has ended
// (a batch answered before the master was lost): the client's call, with
// or without events waiting for it, hears NotMaster, as from a master
// that cannot prove it leads.
func TestNoAnswerWithAnEndedLease(t *testing.T) {
	for _, events := range []bool{false, true} {
		k := newKeeper(context.Background(), nil, newMetrics(), slog.New(slog.DiscardHandler))
		k.ttl = 3 * time.Second
		now := time.Now()
		s := &kaSession{id: 7, principal: "p", told: true, toldEnd: now.Add(-time.Second), toldFor: k.ttl,
			leaseEnd: now.Add(-100 * time.Millisecond), epoch: 2, atMaster: 1}
		if events {
			s.delivered, s.events = 5, []wire.Event{{Seq: 5, Kind: wire.EventMasterFailover}}
		}
		k.sess[s.id] = s
		body, err := msgpack.Marshal(&wire.KeepAliveRequest{Prompt: true})
		if err != nil {
			t.Fatal(err)
		}
		type reply struct {
			resp any
			err  error
		}
		got := make(chan reply, 1)
		k.keepAlive("p", 0, &wire.Header{Method: wire.MethodKeepAlive, Session: s.id}, body,
			func(resp any, _ uint64, err error) { got <- reply{resp, err} })
		select {
		case r := <-got:
			if wire.CodeOf(r.err) != wire.CodeNotMaster {
				t.Fatalf("events %v: answered %+v, %v; want NotMaster", events, r.resp, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v: no answer within 10 s (want NotMaster an eighth of a lease before the told end, long past)", events)
		}
	}
}

// A session whose lease ran out with events its client has not
// acknowledged is still sent to the master: its client gets events only
// with a lease it can use, so waiting for its acknowledgement first would
// wait for ever, and lose the session at a fail-over (it did, through a
// master's isolation, while a contender's conflict events kept coming).
// With a lease to tell, the proxy waits for the acknowledgement, as
// before.
func TestUnacknowledgedEventsDoNotStallAnEndedLease(t *testing.T) {
	k := newKeeper(context.Background(), nil, newMetrics(), slog.New(slog.DiscardHandler))
	k.ttl = 3 * time.Second
	now := time.Now()
	s := &kaSession{id: 7, principal: "p", told: true, toldEnd: now.Add(-time.Second), toldFor: k.ttl,
		leaseEnd: now.Add(-100 * time.Millisecond), epoch: 2, clientAck: 3, delivered: 5,
		events: []wire.Event{{Seq: 4, Kind: wire.EventLockConflict}, {Seq: 5, Kind: wire.EventLockConflict}}}
	k.sess[s.id] = s
	k.queueIfDueLocked(s)
	if !s.queued {
		t.Fatal("a session with an ended lease and unacknowledged events was not queued for the master")
	}
	s2 := &kaSession{id: 8, principal: "p", told: true, toldEnd: now.Add(k.ttl), toldFor: k.ttl,
		leaseEnd: now.Add(k.ttl), epoch: 2, clientAck: 3, delivered: 5}
	k.sess[s2.id] = s2
	k.queueIfDueLocked(s2)
	if s2.queued {
		t.Fatal("a session with a lease to tell was queued before its client acknowledged its events")
	}
}
