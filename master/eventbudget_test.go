package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"lockcell/wire"
)

// The byte budgets of queued events hold exactly under concurrency: many
// goroutines queue handle events for the sessions of several principals
// at once, while an honest session acknowledges what it is sent. No
// principal's queued handle events ever pass its share, nor all of them
// the process's budget, at any instant a sampler looks (the counters
// always equal what the queues hold); each flooding principal ends filled
// to within one event of its share, the process to within one event of
// its budget; every session that lost an event has an overflow queued,
// and the honest session, crowded out by the others, is sent one. Every
// byte comes back when the events are acknowledged or their sessions end.
func TestEventBudgetsHoldExactlyUnderConcurrency(t *testing.T) {
	ss, _, stop := newTestSessions(t)
	const path = "/ls/c/watched"
	one := eventBytes(&wire.Event{Kind: wire.EventContents, Path: path})
	// Three flooding principals of four sessions each; each could fill
	// its share three times over, and the three shares together are more
	// than the process's budget.
	const share = 40
	perPrincipal, total := share*one, 100*one
	ss.budgetEvents(total, perPrincipal)
	principal := map[uint64]string{}
	var flooders []uint64
	for i := range 12 {
		id := uint64(i + 1)
		principal[id] = fmt.Sprintf("p%d", i%3)
		flooders = append(flooders, id)
		ss.created(id, 0)
	}
	const honest = 100
	principal[honest] = "honest"
	ss.created(honest, 0)
	ss.principalOf = func(id uint64) string { return principal[id] }

	// check compares the budget's counters with what the queues hold
	// and checks the bounds; it returns the handle-event bytes queued
	// per principal.
	check := func() (map[string]int64, error) {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		by, forced := map[string]int64{}, map[string]int64{}
		var used, handle int64
		for id, l := range ss.leases {
			for i := range l.events {
				n := eventBytes(&l.events[i])
				used += n
				if forcedEvent(l.events[i].Kind) {
					forced[principal[id]] += n
				} else {
					by[principal[id]] += n
					handle += n
				}
			}
		}
		b := &ss.budget
		if b.used != used {
			return nil, fmt.Errorf("the budget counts %d bytes; the queues hold %d", b.used, used)
		}
		for p, n := range by {
			if b.by[p] != n+forced[p] {
				return nil, fmt.Errorf("principal %s: the budget counts %d bytes; its queues hold %d", p, b.by[p], n+forced[p])
			}
			if n > perPrincipal {
				return nil, fmt.Errorf("principal %s has %d bytes of handle events queued; its share is %d", p, n, perPrincipal)
			}
		}
		if handle > total || b.peak > total {
			return nil, fmt.Errorf("%d bytes of handle events queued, %d at the peak; the budget is %d", handle, b.peak, total)
		}
		return by, nil
	}

	targets := append(append([]uint64(nil), flooders...), honest)
	flood := func(goroutines, rounds int, to []uint64) {
		var floods sync.WaitGroup
		for g := range goroutines {
			floods.Add(1)
			go func() {
				defer floods.Done()
				for round := range rounds {
					notes := make([]sessionEvent, 0, len(to))
					for _, id := range to {
						notes = append(notes, sessionEvent{id, wire.Event{Kind: wire.EventContents, Path: path, Handle: uint64(g*1000 + round)}})
					}
					ss.observe(notes, nil)
				}
			}()
		}
		floods.Wait()
	}

	// One principal alone fills its share exactly.
	flood(8, 20, flooders[:4:4])
	by, err := check()
	if err != nil {
		t.Fatal(err)
	}
	if by["p0"] != perPrincipal {
		t.Fatalf("p0 alone queued %d bytes of handle events; want its share, %d", by["p0"], perPrincipal)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	done := make(chan struct{})
	// The sampler.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := check(); err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	// The honest session acknowledges everything it is sent, until the
	// floods are over.
	var honestOverflow bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ack uint64
		for {
			resp, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: honest, epoch: testEpoch,
				clientEpoch: testEpoch, ack: ack, prompt: true, admit: func() error { return errors.New("no lease") }})
			if err != nil {
				errs <- err
				return
			}
			for _, ev := range resp.Events {
				ack = max(ack, ev.Seq)
				honestOverflow = honestOverflow || ev.Kind == wire.EventOverflow
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	// Then everyone: every goroutine queues events for every session,
	// the honest one included, in small batches.
	flood(8, 20, targets)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A last round once the honest session stopped acknowledging: the
	// process's budget is full to within one event.
	flood(2, 10, targets)
	if by, err = check(); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for p := range 3 {
		n := by[fmt.Sprintf("p%d", p)]
		sum += n
		if n > perPrincipal {
			t.Fatalf("p%d: %d bytes queued over its share of %d", p, n, perPrincipal)
		}
	}
	sum += by["honest"]
	st := ss.eventStats()
	if sum > total || st.QueuedBytes <= total-one {
		t.Fatalf("%d bytes of handle events queued, %d with the overflows; want at most the budget %d, and it filled to within one event (%d bytes)",
			sum, st.QueuedBytes, total, one)
	}
	if st.OverPrincipal == 0 || st.OverProcess == 0 || st.PeakBytes > total {
		t.Fatalf("stats %+v: want drops over both budgets and a peak within %d", st, total)
	}
	ss.mu.Lock()
	for _, id := range flooders {
		evs := ss.leases[id].events
		if last := evs[len(evs)-1]; last.Kind != wire.EventOverflow {
			ss.mu.Unlock()
			t.Fatalf("session %d lost events but its queue ends with %+v, not an overflow", id, last)
		}
	}
	ss.mu.Unlock()
	if !honestOverflow {
		// Its last overflow may still be queued, not yet sent.
		ss.mu.Lock()
		evs := ss.leases[honest].events
		honestOverflow = len(evs) > 0 && evs[len(evs)-1].Kind == wire.EventOverflow
		ss.mu.Unlock()
	}
	if !honestOverflow {
		t.Fatal("the honest session, crowded out of the process's budget, was never told of an overflow")
	}

	// Acknowledged events and ended sessions give their bytes back.
	for _, id := range flooders[:6] {
		ss.mu.Lock()
		evs := ss.leases[id].events
		last := evs[len(evs)-1].Seq
		ss.mu.Unlock()
		if _, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: id, epoch: testEpoch,
			clientEpoch: testEpoch, ack: last, prompt: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range append(flooders[6:], honest) {
		ss.drop(id)
	}
	if _, err := check(); err != nil {
		t.Fatal(err)
	}
	if st := ss.eventStats(); st.QueuedBytes != 0 || st.ForcedBytes != 0 || len(ss.budget.by) != 0 {
		t.Fatalf("after every event was acknowledged or its session ended: %+v, by principal %v", st, ss.budget.by)
	}
}

// BenchmarkQueuedEventBytes measures what a queued handle event costs the
// master, to size eventOverhead by: each op queues one content event, as
// the fan-out does (a position shared by the events of one change), for
// sessions that never acknowledge, 1,000 events each. Besides -benchmem's
// allocations per event, it reports the live heap each queued event holds
// (after a GC) and the budget's estimate of it:
//
//	go test -run '^$' -bench QueuedEventBytes -benchmem ./master/
func BenchmarkQueuedEventBytes(b *testing.B) {
	clock := newFakeClock()
	ss := newSessions(clock, testLease, alwaysLeader{clock}, &masterStats{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ss.budgetEvents(1<<62, 1<<62)
	ss.start(testEpoch, nil)
	const perSession = 1000
	path := "/ls/c/some/watched/file"
	pos := &wire.EventPos{Instance: 7, ContentGen: 9}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	notes := make([]sessionEvent, 1)
	for i := range b.N {
		id := uint64(i/perSession + 1)
		if i%perSession == 0 {
			ss.created(id, 0)
		}
		notes[0] = sessionEvent{id, wire.Event{Kind: wire.EventContents, Path: path, Handle: uint64(i), Pos: pos}}
		ss.observe(notes, nil)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/event")
	b.ReportMetric(float64(eventBytes(&wire.Event{Path: path})), "estimate-B/event")
	if ss.eventStats().Dropped != 0 {
		b.Fatal("events were dropped: the measure is off")
	}
	runtime.KeepAlive(ss)
}
