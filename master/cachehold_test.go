package master

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// The bounds on what cachers that do not acknowledge cost writes (the top
// of invalidate.go), on a fake clock. End to end:
// cell.TestFreshSilentCachersDoNotHoldWrites.

// A session never heard on a KeepAlive is not registered as a cacher, so
// a write of what it read waits for nobody; a session whose KeepAlive
// arrived caches as before, and the write waits for its acknowledgement.
// (The real sessions part: the rule is its cacheable.)
func TestInvalidatorNeverHeardSessionHoldsNoWrite(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	inv := newInvalidator(clock, ss, "admin", testLease, slog.New(slog.NewTextHandler(io.Discard, nil)))
	const name = "/ls/c/f"
	ss.created(1, 0) // never calls
	ss.created(2, 0)
	ka := keepAliveAsync(t, ss, clock, stop, 2, 0)
	parked(t, ka)
	// Session 2's next KeepAlive, acknowledging ack; it parks until stop.
	ackOn := func(ack uint64) {
		go func() {
			_, _ = ss.keepAlive(context.Background(), stop, keepAliveArgs{session: 2, epoch: testEpoch, clientEpoch: testEpoch,
				ack: ack})
		}()
	}
	if inv.register(1, "p", name) {
		t.Error("a session never heard on a KeepAlive was registered as a cacher")
	}
	if !inv.register(2, "p", name) {
		t.Fatal("a session whose KeepAlive arrived may not cache")
	}
	done := make(chan error, 1)
	go func() {
		done <- inv.invalidate(context.Background(), stop, []string{name})
		inv.release([]string{name})
	}()
	// The invalidation wakes session 2's parked KeepAlive; it
	// acknowledges on its next call. No time passes on the clock.
	r := answered(t, ka)
	if r.err != nil || len(r.resp.Events) != 1 {
		t.Fatalf("session 2's KeepAlive: %+v, %v; want the invalidation", r.resp, r.err)
	}
	ackOn(r.resp.Events[0].Seq)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write still waits: it waits on the session that was never heard from")
	}
	if sent, late := inv.counts(); sent != 1 || late != 0 {
		t.Errorf("sent %d late %d; want only the heard session's invalidation, acknowledged", sent, late)
	}
}

// holdRounds runs up to rounds changes of name, each after a fresh
// session of principal registered as its cacher (its lease ending hold
// from now) that never acknowledges. It returns how long the changes
// waited in all and how many sessions were registered before the
// principal was barred.
func holdRounds(t *testing.T, f *invFixture, principal, name string, hold time.Duration, rounds int, first uint64) (waited time.Duration, registered int) {
	t.Helper()
	for i := range rounds {
		id := first + uint64(i)
		f.sess.add(id, f.clock.Now().Add(hold))
		if !f.inv.register(id, principal, name) {
			return waited, registered
		}
		registered++
		c := f.change(name)
		f.parked(t, 1)
		f.clock.Advance(hold - time.Millisecond)
		if c.finished() {
			t.Fatalf("round %d: the write went ahead before the cacher's lease ran out", i)
		}
		f.clock.Advance(2 * time.Millisecond)
		c.wait(t)
		waited += hold + time.Millisecond
	}
	return waited, registered
}

// Fresh sessions of one principal, each caching a file and then silent
// (never acknowledging), hold its writes for about one lease in all: then
// the principal is barred, its new sessions' reads are answered
// uncacheable and no write waits for them. Other principals cache on;
// the bar ends with its penalty. The master says why, naming the
// principal and the file.
func TestInvalidatorSilentCachersOfAPrincipalHoldWritesAboutOneLease(t *testing.T) {
	f := newInvFixture(t)
	var logs syncBuffer
	f.inv.log = slog.New(slog.NewTextHandler(&logs, nil))
	const name = "/ls/c/victim"
	waited, registered := holdRounds(t, f, "mallory", name, testLease, 20, 1)
	if registered == 20 {
		t.Fatalf("20 silent sessions of one principal held writes for %v; it was never barred", waited)
	}
	if waited > testLease+testLease/8 {
		t.Fatalf("silent cachers of one principal held writes for %v in all (%d sessions); want about one lease (%v)",
			waited, registered, testLease)
	}
	t.Logf("%d silent session(s) held writes for %v in all before the bar", registered, waited)
	f.session(100)
	if f.inv.register(100, "mallory", "/ls/c/other") {
		t.Error("a new session of the barred principal was registered")
	}
	f.session(101)
	if !f.inv.register(101, "bob", name) {
		t.Error("another principal was barred too")
	}
	line := logs.String()
	if !strings.Contains(line, "mallory") || !strings.Contains(line, name) || !strings.Contains(line, "may not cache") {
		t.Errorf("the master did not say whose cachers held which write and that it was barred; it logged:\n%s", line)
	}
	if st := statsOf(f.inv); st.Bars != 1 || st.HoldCharged < testLease/2 {
		t.Errorf("stats %+v; want one bar and at least half a lease charged", st)
	}
	f.clock.Advance(cachePenaltyLeases * testLease)
	if !f.inv.register(100, "mallory", "/ls/c/other") {
		t.Error("the bar outlasted its penalty")
	}
}

// Holds shorter than the budget add up: a principal whose cachers each
// hold a write a quarter of a lease is barred once they held about half a
// lease past the grace; the same holds spread over many leases drain
// away and bar nobody, as a client that crashes now and then.
func TestInvalidatorHoldAccountAddsUpAndDrains(t *testing.T) {
	f := newInvFixture(t)
	const name = "/ls/c/victim"
	waited, registered := holdRounds(t, f, "p", name, testLease/4, 20, 1)
	if registered == 20 {
		t.Fatalf("short holds adding up to %v never barred the principal", waited)
	}
	if waited > testLease {
		t.Fatalf("short holds of one principal added up to %v; want at most a lease", waited)
	}
	grace, budget := cacheGrace(testLease), holdBudget(testLease)
	if charged := statsOf(f.inv).HoldCharged; charged < budget || charged > budget+testLease/4 {
		t.Errorf("%v charged; want the budget (%v) and at most one hold more", charged, budget)
	}
	if testLease/4-grace >= budget {
		t.Fatal("the test's holds are not shorter than the budget")
	}

	// Another principal, the same holds, a drain's worth of time apart.
	for i := range 6 {
		_, n := holdRounds(t, f, "q", name, testLease/4, 1, uint64(100+i))
		if n != 1 {
			t.Fatalf("hold %d: a principal whose holds drain away between them was barred", i)
		}
		f.clock.Advance(cachePenaltyLeases * testLease / 2)
	}
}

// The admin is never barred, however long its cachers hold writes: it may
// change any node anyway, and without TLS every caller is the admin. Its
// holds are still counted.
func TestInvalidatorAdminIsNeverBarred(t *testing.T) {
	f := newInvFixture(t)
	_, registered := holdRounds(t, f, "admin", "/ls/c/f", testLease, 5, 1)
	if registered != 5 {
		t.Fatalf("the admin was barred after %d holds", registered)
	}
	if st := statsOf(f.inv); st.Bars != 0 || st.HoldCharged < 4*testLease {
		t.Errorf("stats %+v; want no bar and the holds counted", st)
	}
}

// Honest cachers acknowledge within the grace: many of them, over many
// writes, cost their principal nothing; one a little slower than the
// grace now and then is charged only what it ran over.
func TestInvalidatorHonestCachersAreNotCharged(t *testing.T) {
	f := newInvFixture(t)
	const name = "/ls/c/f"
	const sessions = 50
	for id := uint64(1); id <= sessions; id++ {
		f.session(id)
	}
	for round := range 40 {
		for id := uint64(1); id <= sessions; id++ {
			f.sess.extend(id, f.clock.Now().Add(testLease)) // its KeepAlives
			if !f.inv.register(id, "p", name) {
				t.Fatalf("round %d: an honest cacher may not cache", round)
			}
		}
		c := f.change(name)
		f.parked(t, 1)
		took := 50 * time.Millisecond
		if round%10 == 9 {
			took = cacheGrace(testLease) + 100*time.Millisecond
		}
		f.clock.Advance(took)
		f.sess.ackEverySession() // at one instant: the change's look at each finds it done
		c.wait(t)
		f.clock.Advance(time.Second)
	}
	st := statsOf(f.inv)
	if st.Bars != 0 || st.HoldCharged > 4*100*time.Millisecond {
		t.Fatalf("stats %+v; want no bar and at most the slow acknowledgements' overrun charged", st)
	}
}

// The caps on registrations are exact under concurrency: many sessions of
// several principals registering at once get exactly the per-principal cap
// each, or together exactly the process-wide one, and what an invalidation
// or a session's end gives back may be taken again.
func TestInvalidatorRegistrationCapsAreExactUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		total, perPrincipal int
		wantEach            func(total, each int) bool
	}{
		{total: 1000, perPrincipal: 30, wantEach: func(total, each int) bool { return each == 30 }},
		{total: 100, perPrincipal: 30, wantEach: func(total, each int) bool { return each <= 30 && total == 100 }},
	} {
		t.Run(fmt.Sprintf("total%d-each%d", tc.total, tc.perPrincipal), func(t *testing.T) {
			f := newInvFixture(t)
			f.inv.limit(tc.total, tc.perPrincipal)
			const principals, sessionsEach, namesEach = 6, 5, 20
			for id := uint64(1); id <= principals*sessionsEach; id++ {
				f.session(id)
			}
			var mu sync.Mutex
			got := map[string]int{}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for id := uint64(1); id <= principals*sessionsEach; id++ {
				principal := fmt.Sprintf("p%d", (id-1)%principals)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for n := range namesEach {
						if f.inv.register(id, principal, fmt.Sprintf("/ls/c/%d", n)) {
							mu.Lock()
							got[principal]++
							mu.Unlock()
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			total := 0
			for p, n := range got {
				total += n
				if n > tc.perPrincipal {
					t.Errorf("principal %s holds %d registrations; the cap is %d", p, n, tc.perPrincipal)
				}
			}
			for p, n := range got {
				if !tc.wantEach(total, n) {
					t.Errorf("principal %s got %d registrations, %d in all (caps %d each, %d in all)", p, n, total, tc.perPrincipal, tc.total)
				}
			}
			st := statsOf(f.inv)
			demand := principals * sessionsEach * namesEach
			if st.Registrations != total || st.RegistrationsPeak != total || st.RegistrationsRefused != uint64(demand-total) {
				t.Errorf("stats %+v; want %d now and at peak, %d refused", st, total, demand-total)
			}
			// Registering again what is registered takes nothing.
			var again int
			for id := uint64(1); id <= principals*sessionsEach; id++ {
				for n := range namesEach {
					if f.inv.register(id, fmt.Sprintf("p%d", (id-1)%principals), fmt.Sprintf("/ls/c/%d", n)) {
						again++
					}
				}
			}
			if again != total || statsOf(f.inv).Registrations != total {
				t.Errorf("registering again: %d answered cacheable, %d held; want %d both", again, statsOf(f.inv).Registrations, total)
			}
			// A write of one name and the end of every session give all back.
			c := f.change("/ls/c/0")
			f.parked(t, 1)
			for id := uint64(1); id <= principals*sessionsEach; id++ {
				f.sess.ackAll(id)
			}
			c.wait(t)
			for id := uint64(1); id <= principals*sessionsEach; id++ {
				f.inv.forget(id)
			}
			if st := statsOf(f.inv); st.Registrations != 0 || len(f.inv.byPrincipal) != 0 {
				t.Errorf("after the write and the sessions' end %d registrations are held (%v)", st.Registrations, f.inv.byPrincipal)
			}
		})
	}
}

// statsOf reads the invalidator's counters as Server.InvalidationStats
// reports them.
func statsOf(inv *invalidator) InvalidationStats {
	regs, peak, refused, bars, charged := inv.registrations()
	return InvalidationStats{Registrations: regs, RegistrationsPeak: peak, RegistrationsRefused: refused, Bars: bars, HoldCharged: charged}
}

// syncBuffer is a bytes.Buffer the invalidator may log to while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
