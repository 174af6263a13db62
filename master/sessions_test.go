package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// The sessions part against a fake clock and a fake leadership, without
// Raft. End to end: cell.TestMasterFailoverKeepsSessionsAndLocks, the
// KeepAlive and Jeopardy tests of package cell, and
// fixtures/safety.TestSessionsSurviveShortFailovers.

// alwaysLeader is a leaseAuthority whose leadership is proven at every
// instant of its clock.
type alwaysLeader struct{ clock *fakeClock }

func (a alwaysLeader) leads() bool { return true }

func (a alwaysLeader) provenSince(context.Context, time.Time, time.Duration) (time.Time, error) {
	return a.clock.Now(), nil
}

func (a alwaysLeader) stale() <-chan struct{} { return nil }

// adoptWith is a leaseState that answers every adoption with err.
type adoptWith struct{ err error }

func (a adoptWith) adopt(uint64) error { return a.err }

func (adoptWith) movedSince(uint64, uint64) bool { return false }

// keepAlive serves a KeepAlive through keepAliveAsync and waits for its
// answer, ctx and stop ending the park, as the tests of the lease table
// call it.
func (ss *sessions) keepAlive(ctx context.Context, stop <-chan struct{}, a keepAliveArgs) (*wire.KeepAliveResponse, error) {
	type result struct {
		resp *wire.KeepAliveResponse
		err  error
	}
	ch := make(chan result, 1)
	p := ss.keepAliveAsync(a, 0, func(resp *wire.KeepAliveResponse, err error) { ch <- result{resp, err} })
	if p != nil {
		select {
		case r := <-ch:
			return r.resp, r.err
		case <-ctx.Done():
			ss.cancelParked(p, ctx.Err())
		case <-stop:
			ss.cancelParked(p, errStopped)
		}
	}
	r := <-ch
	return r.resp, r.err
}

const testEpoch = 3

func newTestSessions(t *testing.T, ids ...uint64) (*sessions, *fakeClock, chan struct{}) {
	return newLengtheningSessions(t, testLease, DefaultKeepAliveTarget, ids...) // the longest lease is the lease: no lengthening
}

type keepAliveResult struct {
	resp *wire.KeepAliveResponse
	err  error
}

// keepAliveAsync runs one KeepAlive of session (acknowledging ack, at the
// master's epoch) and waits until it has parked or answered.
func keepAliveAsync(t *testing.T, ss *sessions, clock *fakeClock, stop chan struct{}, session, ack uint64) <-chan keepAliveResult {
	t.Helper()
	armed := clock.armed()
	out := make(chan keepAliveResult, 1)
	go func() {
		resp, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: session, epoch: testEpoch,
			clientEpoch: testEpoch, ack: ack})
		out <- keepAliveResult{resp, err}
	}()
	eventually(t, "the KeepAlive parks or answers", func() bool { return clock.armed() > armed || len(out) > 0 })
	return out
}

func answered(t *testing.T, ch <-chan keepAliveResult) keepAliveResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the KeepAlive did not answer")
		return keepAliveResult{}
	}
}

func parked(t *testing.T, ch <-chan keepAliveResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the KeepAlive answered %+v, %v; want it parked", r.resp, r.err)
	default:
	}
}

func TestKeepAliveParksUntilAQuarterLeaseIsLeftAndExtendsTheLease(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	clock.Advance(testLease*3/4 - time.Millisecond)
	parked(t, ch)
	clock.Advance(time.Millisecond)
	r := answered(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.HeldMillis != (testLease*3/4).Milliseconds() || r.resp.LeaseMillis != testLease.Milliseconds() {
		t.Fatalf("held %d ms with %d ms of lease; want %d ms held and a full lease", r.resp.HeldMillis, r.resp.LeaseMillis,
			(testLease * 3 / 4).Milliseconds())
	}
	if left := ss.leaseLeft([]uint64{1}, clock.Now())[1]; left != testLease {
		t.Fatalf("the master's lease has %v left after the reply; want %v", left, testLease)
	}
	if n := len(ss.expired(clock.Now().Add(testLease - time.Millisecond))); n != 0 {
		t.Fatalf("%d sessions expire within the extended lease", n)
	}
}

func TestKeepAliveAnswersAtOnceWhenAnEventIsQueued(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ss.created(2, 0)
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	parked(t, ch)
	// A handle event from the state wakes the parked call, with no time
	// passing; a session that is not watching gets nothing.
	ss.observe([]sessionEvent{{1, wire.Event{Kind: wire.EventContents, Path: "/ls/c/f", Handle: 7}}}, nil)
	r := answered(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.HeldMillis != 0 || len(r.resp.Events) != 1 || r.resp.Events[0].Path != "/ls/c/f" {
		t.Fatalf("reply %+v; want the event at once", r.resp)
	}
	// So does an invalidation; the acknowledgement of the first event
	// comes with the next call, and only the new event is sent.
	first := r.resp.Events[0].Seq
	ch = keepAliveAsync(t, ss, clock, stop, 1, first)
	parked(t, ch)
	if _, _, _, ok := ss.queueInvalidation(1, "/ls/c/g"); !ok {
		t.Fatal("no live lease to queue an invalidation on")
	}
	r = answered(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.resp.Events) != 1 || r.resp.Events[0].Kind != wire.EventInvalidate || r.resp.Events[0].Seq <= first {
		t.Fatalf("events %+v; want only the invalidation, numbered after %d", r.resp.Events, first)
	}
	if !ss.cacheable(1, first) || ss.cacheable(1, r.resp.Events[0].Seq) {
		t.Fatal("acknowledgements are not recorded as sent")
	}
}

func TestEventsAreNumberedInOrderAndExpiredLeasesFound(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ss.created(2, 0)
	var notes []sessionEvent
	for i := range 3 {
		notes = append(notes, sessionEvent{uint64(1 + i%2), wire.Event{Kind: wire.EventChildAdded, Path: "/ls/c"}})
	}
	ss.observe(notes, nil)
	_, seq, _, _ := ss.queueInvalidation(2, "/ls/c/x")
	if want := uint64(testEpoch<<40 + 4); seq != want {
		t.Fatalf("fourth event numbered %d; want %d (the epoch in the high bits, counting from 1)", seq, want)
	}
	var got []uint64
	for _, id := range []uint64{1, 2} {
		for _, ev := range ss.leases[id].events {
			got = append(got, ev.Seq)
		}
	}
	// Session 1 has events 1 and 3, session 2 has 2 and 4.
	want := []uint64{testEpoch<<40 + 1, testEpoch<<40 + 3, testEpoch<<40 + 2, testEpoch<<40 + 4}
	if len(got) != len(want) {
		t.Fatalf("queued %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("queued %v; want %v", got, want)
		}
	}

	// Session 2's lease is extended by a KeepAlive's arrival; session
	// 1's runs out.
	clock.Advance(testLease / 2)
	ch := keepAliveAsync(t, ss, clock, stop, 2, testEpoch<<40+4)
	if n := len(ss.expired(clock.Now().Add(testLease / 2))); n != 0 {
		t.Fatalf("%d sessions expired while their leases last", n)
	}
	clock.Advance(testLease/2 + time.Millisecond)
	if r := answered(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
	// Session 1's lease ended; the master waits out the slack first.
	if exp := ss.expired(clock.Now()); len(exp) != 0 {
		t.Fatalf("expired %v within the slack after the lease; want none yet", exp)
	}
	clock.Advance(ss.expirySlack())
	if exp := ss.expired(clock.Now()); len(exp) != 1 || exp[0] != 1 {
		t.Fatalf("expired %v; want [1]", exp)
	}
	// A KeepAlive that arrives after its lease and slack ran out is refused.
	r := answered(t, keepAliveAsync(t, ss, clock, nil, 1, 0))
	if codeOf(r.err) != wire.CodeSessionExpired {
		t.Fatalf("KeepAlive after the lease: %v; want SessionExpired", r.err)
	}
	// The expiry applied: the lease is gone, and its session's ended.
	if ended := ss.observe(nil, []fsm.Change{{Kind: fsm.ChangeSessionClosed, Session: 1}}); len(ended) != 1 || ended[0] != 1 {
		t.Fatalf("ended %v; want [1]", ended)
	}
	if exp := ss.expired(clock.Now()); len(exp) != 0 {
		t.Fatalf("expired %v after the close; want none", exp)
	}
}

func TestFailoverGivesFreshLeasesAndWaitsForEveryAcknowledgement(t *testing.T) {
	ss, clock, stop := newTestSessions(t, 1, 2)
	if rec, n := ss.recovery(); !rec || n != 2 {
		t.Fatalf("recovery %v with %d sessions; want true with 2", rec, n)
	}
	if left := ss.leaseLeft([]uint64{1, 2}, clock.Now()); left[1] != testLease || left[2] != testLease {
		t.Fatalf("leases left %v; want a full lease each", left)
	}
	r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.resp.Events) != 1 || r.resp.Events[0].Kind != wire.EventMasterFailover {
		t.Fatalf("first reply %+v; want the fail-over event", r.resp)
	}
	failover := r.resp.Events[0].Seq
	ch := keepAliveAsync(t, ss, clock, stop, 1, failover)
	if rec, n := ss.recovery(); !rec || n != 1 {
		t.Fatalf("recovery %v with %d sessions after one acknowledged; want true with 1", rec, n)
	}
	parked(t, ch)
	// The other session ends instead of acknowledging: recovery is over.
	ss.observe(nil, []fsm.Change{{Kind: fsm.ChangeSessionClosed, Session: 2}})
	if rec, n := ss.recovery(); rec || n != 0 {
		t.Fatalf("recovery %v with %d sessions; want over", rec, n)
	}
	close(stop)
	if r := answered(t, ch); !errors.Is(r.err, errStopped) {
		t.Fatalf("parked KeepAlive at stop: %v; want errStopped", r.err)
	}
	// A client that last spoke to another master is told of the fail-over
	// even once it has nothing queued.
	resp, err := ss.keepAlive(context.Background(), nil, keepAliveArgs{session: 1, epoch: testEpoch, clientEpoch: testEpoch - 1,
		ack: failover})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Events) != 1 || resp.Events[0].Kind != wire.EventMasterFailover || resp.Events[0].Seq <= failover {
		t.Fatalf("reply to an old epoch's client %+v; want a fail-over event", resp)
	}
}

func TestClosedSessionEndsItsParkedKeepAlive(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	parked(t, ch)
	ss.observe(nil, []fsm.Change{{Kind: fsm.ChangeSessionClosed, Session: 1}})
	if r := answered(t, ch); codeOf(r.err) != wire.CodeSessionExpired {
		t.Fatalf("parked KeepAlive of a closed session: %+v, %v; want SessionExpired", r.resp, r.err)
	}
	// A session with no lease is adopted only as the state says.
	refused := errors.New("not live")
	ss.known = adoptWith{refused}
	if _, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: 5, epoch: testEpoch, clientEpoch: testEpoch,
		prompt: true}); !errors.Is(err, refused) {
		t.Fatalf("KeepAlive of an unknown session: %v; want adopt's error", err)
	}
	ss.known = adoptWith{nil}
	resp, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: 5, epoch: testEpoch, clientEpoch: testEpoch,
		prompt: true})
	if err != nil || resp.LeaseMillis != testLease.Milliseconds() {
		t.Fatalf("adopted session's KeepAlive: %+v, %v; want a full lease", resp, err)
	}
}

// TestExpiryClosesTheSessionInTheState: the master's expiry loop, on the
// master's clock, proposes the close of a session whose lease ran out.
func TestExpiryClosesTheSessionInTheState(t *testing.T) {
	m := newTestMaster(t)
	resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.(*wire.CreateSessionResponse).Session
	live := func() bool {
		var ok bool
		m.read(func(v fsm.View) { ok = v.SessionExists(id) })
		return ok
	}
	m.clock.Advance(testLease - time.Millisecond)
	if !live() {
		t.Fatal("session closed before its lease ran out")
	}
	eventually(t, "the expired session is closed", func() bool {
		m.clock.Advance(testLease / 20) // the expiry loop's period
		return !live()
	})
	if n := m.sess.count(); n != 0 {
		t.Fatalf("%d leases left after the expiry", n)
	}
}

// A master that did not run for longer than a lease (a long garbage
// collection, a paused process) expires nobody for it when it wakes: its
// expiry loop finds itself late and extends every live lease by as much.
// A client that stays silent afterwards still expires a lease later.
func TestMasterStallExpiresNoSession(t *testing.T) {
	m := newTestMaster(t)
	resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.(*wire.CreateSessionResponse).Session
	live := func() bool {
		var ok bool
		m.read(func(v fsm.View) { ok = v.SessionExists(id) })
		return ok
	}
	// The expiry loop waits for its tick (a twentieth of a lease)...
	eventually(t, "the expiry loop to wait for its tick", func() bool { return m.clock.armedIn(testLease / 20) })
	m.clock.Advance(2 * testLease) // ...and the master stalls for two leases
	eventually(t, "the expiry loop to see the stall", func() bool { return m.Stats().Stalls == 1 })
	if !live() || m.sess.count() != 1 {
		t.Fatal("a session expired for the master's own stall")
	}
	// Silent from here: expired after about a lease of regular ticks.
	start := m.clock.Now()
	eventually(t, "the silent session to expire", func() bool {
		m.clock.Advance(testLease / 20)
		return !live()
	})
	if took := m.clock.Now().Sub(start); took < testLease/2 {
		t.Fatalf("the session expired %v after the stall; its lease had been extended past it", took)
	}
	if n := m.Stats().Stalls; n != 1 {
		t.Fatalf("%d stalls counted for one", n)
	}
}

// A KeepAlive that waited in the socket while the master stalled may run
// before the expiry loop's tick: it credits the stall itself, so it is
// served, not refused as expired, and the stall is credited once.
func TestKeepAliveAfterAMasterStallIsServed(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ss.watch(clock.Now(), true)  // the expiry loop waits for its tick
	clock.Advance(2 * testLease) // the master stalls for two leases
	resp, err := ss.keepAlive(context.Background(), stop, keepAliveArgs{session: 1, epoch: testEpoch, clientEpoch: testEpoch,
		prompt: true})
	if err != nil || resp.LeaseMillis != testLease.Milliseconds() {
		t.Fatalf("KeepAlive after the master's stall: %+v, %v; want a full lease", resp, err)
	}
	ss.watch(clock.Now(), false) // the loop's late tick runs next
	if n := ss.stallCount(); n != 1 {
		t.Fatalf("%d stalls credited for one", n)
	}
	if ids := ss.expired(clock.Now()); len(ids) != 0 {
		t.Fatalf("sessions %v expired for the master's stall", ids)
	}
	// While the loop works (not waiting), time passing is no stall.
	clock.Advance(2 * testLease)
	ss.watch(clock.Now(), true)
	if n := ss.stallCount(); n != 1 {
		t.Fatalf("%d stalls after the loop's own work; want still 1", n)
	}
	if ids := ss.expired(clock.Now()); len(ids) != 1 {
		t.Fatalf("expired %v; a silent session must expire a lease after the stall", ids)
	}
}

// A master that is merely late (a busy machine's scheduling delay, shorter
// than the quarter lease a KeepAlive keeps to spare) credits nothing: a
// silent session still expires a lease after its last KeepAlive, however
// often the loop wakes late.
func TestShortMasterDelaysAreNotCredited(t *testing.T) {
	ss, clock, _ := newTestSessions(t)
	ss.created(1, 0)
	start := clock.Now()
	for !clock.Now().After(start.Add(testLease + testLease/10)) {
		ss.watch(clock.Now(), true)
		clock.Advance(testLease / 5) // each wait 4 periods, under a quarter lease
		ss.watch(clock.Now(), false)
	}
	if n := ss.stallCount(); n != 0 {
		t.Fatalf("%d stalls credited for delays shorter than a quarter lease", n)
	}
	if ids := ss.expired(clock.Now()); len(ids) != 1 {
		t.Fatalf("expired %v a lease after the last KeepAlive; a late-waking master must still expire the silent session", ids)
	}
}

// staleAuthority is alwaysLeader with a stale signal the test closes.
type staleAuthority struct {
	alwaysLeader
	ch chan struct{}
}

func (a staleAuthority) stale() <-chan struct{} { return a.ch }

// A KeepAlive parked at a master that then goes half a lease without a
// proof of leadership (its Raft stuck on a stalled disk) is answered
// NotMaster at once, while its client still trusts its lease, instead of
// at the end of its park plus a failed proof (when the client would
// already be in jeopardy).
func TestParkedKeepAliveEndsWhenLeadershipGoesUnproven(t *testing.T) {
	clock := newFakeClock()
	auth := staleAuthority{alwaysLeader{clock}, make(chan struct{})}
	ss := newSessions(clock, testLease, auth, &masterStats{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ss.start(testEpoch, []uint64{1})
	stop := make(chan struct{})
	defer close(stop)
	first := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0)) // the fail-over event
	if first.err != nil || len(first.resp.Events) == 0 {
		t.Fatalf("first KeepAlive: %v, %v", first.resp, first.err)
	}
	ch := keepAliveAsync(t, ss, clock, stop, 1, first.resp.Events[0].Seq)
	parked(t, ch)
	close(auth.ch) // the clock does not move: only the signal ends the park
	if r := answered(t, ch); !errors.Is(r.err, errStopped) {
		t.Fatalf("parked KeepAlive at an unproven master: got %v, %v; want errStopped (NotMaster)", r.resp, r.err)
	}
}

// A KeepAlive that arrives after its lease ended but within the expiry
// slack (a starved master read it late) is served and renews the lease:
// the session is not expired for the master's slowness. One that arrives
// later is refused and the session is expired.
func TestKeepAliveWithinTheExpirySlackIsServed(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	ss.created(2, 0)
	slack := ss.expirySlack()
	if slack <= 0 || slack > testLease/4 {
		t.Fatalf("slack %v; want within a quarter lease", slack)
	}
	clock.Advance(testLease + slack/2) // both leases ended, inside the slack
	if exp := ss.expired(clock.Now()); len(exp) != 0 {
		t.Fatalf("expired %v inside the slack", exp)
	}
	r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if r.err != nil {
		t.Fatalf("KeepAlive inside the slack: %v; want it served", r.err)
	}
	if r.resp.LeaseMillis <= 0 {
		t.Fatalf("KeepAlive inside the slack granted %d ms", r.resp.LeaseMillis)
	}
	clock.Advance(slack)
	if exp := ss.expired(clock.Now()); len(exp) != 1 || exp[0] != 2 {
		t.Fatalf("expired %v past the slack; want [2] (1 was renewed)", exp)
	}
	r = answered(t, keepAliveAsync(t, ss, clock, nil, 2, 0))
	if codeOf(r.err) != wire.CodeSessionExpired {
		t.Fatalf("KeepAlive past the slack: %v; want SessionExpired", r.err)
	}
}

// A session that leaves the events it was sent unacknowledged is not
// answered early for handle events, which would make every write cost a
// reply per such session; an invalidation still wakes it at once (a write
// waits on it), and once it acknowledges, its notices wake it again.
func TestIgnoringSessionIsNotWokenByNotices(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	ss.created(1, 0)
	note := func(h uint64) []sessionEvent {
		return []sessionEvent{{1, wire.Event{Kind: wire.EventContents, Path: "/ls/c/f", Handle: h}}}
	}
	ss.observe(note(1), nil)
	first := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if first.err != nil || len(first.resp.Events) != 1 {
		t.Fatalf("first reply: %+v, %v", first.resp, first.err)
	}
	// Not acknowledged: sent again at once, once (a lost reply looks so).
	if r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0)); r.err != nil || len(r.resp.Events) != 1 {
		t.Fatalf("the redelivery: %+v, %v", r.resp, r.err)
	}
	// Still not acknowledged: parked, and new notices leave it parked.
	ch := keepAliveAsync(t, ss, clock, stop, 1, 0)
	parked(t, ch)
	for h := uint64(2); h < 20; h++ {
		ss.observe(note(h), nil)
	}
	parked(t, ch)
	// An invalidation wakes it.
	if _, _, _, ok := ss.queueInvalidation(1, "/ls/c/g"); !ok {
		t.Fatal("no live lease to queue an invalidation on")
	}
	r := answered(t, ch)
	if r.err != nil || len(r.resp.Events) == 0 || r.resp.Events[len(r.resp.Events)-1].Kind != wire.EventInvalidate {
		t.Fatalf("the reply to the invalidation: %+v, %v", r.resp, r.err)
	}
	// An arriving KeepAlive that still acknowledges nothing, with only
	// new notices queued, parks too.
	ss.observe(note(30), nil)
	ch = keepAliveAsync(t, ss, clock, stop, 1, 0)
	parked(t, ch)
	clock.Advance(testLease * 3 / 4)
	if r := answered(t, ch); r.err != nil || len(r.resp.Events) == 0 {
		t.Fatalf("the reply at the hold's end: %+v, %v", r.resp, r.err)
	}
	// Acknowledging everything restores its standing: a notice wakes it.
	last := ss.leases[1].events[len(ss.leases[1].events)-1].Seq
	ch = keepAliveAsync(t, ss, clock, stop, 1, last)
	parked(t, ch)
	ss.observe(note(40), nil)
	if r := answered(t, ch); r.err != nil || len(r.resp.Events) != 1 || r.resp.Events[0].Handle != 40 {
		t.Fatalf("a notice to a session in good standing: %+v, %v", r.resp, r.err)
	}
}

// The fan-out passes over a session exactly while its queue holds an
// overflow event no reply has carried and it has not acknowledged: the
// set it asks (overflowPending) follows an overflow queued, a reply
// carrying it, an acknowledgement past it, the session's end and the
// term's end.
func TestOverflowPendingFollowsTheQueue(t *testing.T) {
	ss, clock, stop := newTestSessions(t)
	note := func(session, h uint64) []sessionEvent {
		return []sessionEvent{{session, wire.Event{Kind: wire.EventContents, Path: "/ls/c/f", Handle: h}}}
	}
	ev := note(1, 1)[0].ev
	ss.budgetEvents(1<<30, 3*eventBytes(&ev)) // room for three handle events a principal
	ss.created(1, 0)
	fill := func(session uint64) {
		t.Helper()
		for h := uint64(1); h <= 5; h++ {
			ss.observe(note(session, h), nil)
		}
		if !ss.overflowPending(session) {
			t.Fatalf("session %d: handle events dropped into an overflow, yet it is not passed over", session)
		}
	}
	fill(1)
	r := answered(t, keepAliveAsync(t, ss, clock, stop, 1, 0))
	if r.err != nil || len(r.resp.Events) != 4 || r.resp.Events[3].Kind != wire.EventOverflow {
		t.Fatalf("the reply: %+v, %v; want three events and the overflow", r.resp, r.err)
	}
	if ss.overflowPending(1) {
		t.Fatal("a session sent its overflow is still passed over: the events after it would be lost")
	}
	// Unacknowledged, the budget is still full: the next event overflows
	// again, and the session is passed over again.
	ss.observe(note(1, 9), nil)
	if !ss.overflowPending(1) {
		t.Fatal("a second overflow, not yet sent, does not pass the session over")
	}
	ss.mu.Lock()
	last := ss.leases[1].events[len(ss.leases[1].events)-1].Seq
	ss.mu.Unlock()
	ch := keepAliveAsync(t, ss, clock, stop, 1, last) // nothing left to send: it parks
	if ss.overflowPending(1) {
		t.Fatal("after acknowledging everything: still passed over")
	}
	clock.Advance(testLease * 3 / 4)
	if r = answered(t, ch); r.err != nil {
		t.Fatalf("the KeepAlive that acknowledged everything: %v", r.err)
	}
	fill(1)
	ss.drop(1)
	if ss.overflowPending(1) {
		t.Fatal("a session that ended is still listed")
	}
	ss.created(2, 0)
	fill(2)
	ss.stop()
	if ss.overflowPending(2) || len(ss.overflowing) != 0 {
		t.Fatal("the term ended and sessions are still listed")
	}
}
