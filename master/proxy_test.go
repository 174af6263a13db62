package master

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// newProxiedMaster is a test master whose admin is "admin" and which
// trusts principal "p" as a proxy.
func newProxiedMaster(t *testing.T) *testMaster {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	clock := newFakeClock()
	s := New(Config{Cell: "c", LeaseTTL: testLease, Clock: clock, Admin: "admin", ProxyPrincipals: []string{"p"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, &localConsensus{fsm: sm}, sm)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	_, epoch := s.Serving()
	return &testMaster{Server: s, clock: clock, epoch: epoch}
}

// callAs dispatches one call from caller naming onBehalf (may be "").
func (m *testMaster) callAs(caller, onBehalf string, session uint64, method wire.Method, req any) (any, error) {
	h := &wire.Header{Method: method, Session: session, Epoch: m.epoch, OnBehalfOf: onBehalf}
	resp, _, err := m.Dispatch(context.Background(), Caller{Principal: caller, Conn: 1}, h, mustMarshal(req))
	return resp, err
}

// Only a trusted proxy may name another principal; the call is then that
// principal's (its session, its ACLs), and a name no certificate can
// carry is refused.
func TestBehalfOnlyFromTrustedProxies(t *testing.T) {
	m := newProxiedMaster(t)
	create := &wire.CreateSessionRequest{ClientName: "t"}
	if _, err := m.callAs("mallory", "alice", 0, wire.MethodCreateSession, create); codeOf(err) != wire.CodePermission {
		t.Fatalf("an untrusted principal named another: %v, want PermissionDenied", err)
	}
	// A plain connection is anonymous; anonymous speaks for others only
	// where it is the admin anyway (a plain cell's default), not here.
	if _, err := m.callAs(AnonymousPrincipal, "admin", 0, wire.MethodCreateSession, create); codeOf(err) != wire.CodePermission {
		t.Fatalf("an anonymous caller named the admin on a cell whose admin is another: %v, want PermissionDenied", err)
	}
	if _, err := m.callAs("p", "*", 0, wire.MethodCreateSession, create); codeOf(err) != wire.CodeBadRequest {
		t.Fatalf("a proxy named the wildcard: %v, want BadRequest", err)
	}
	resp, err := m.callAs("p", "alice", 0, wire.MethodCreateSession, create)
	if err != nil {
		t.Fatal(err)
	}
	sess := resp.(*wire.CreateSessionResponse).Session
	var owner string
	m.read(func(v fsm.View) { owner, _ = v.SessionPrincipal(sess) })
	if owner != "alice" {
		t.Fatalf("a session made through the proxy for alice belongs to %q", owner)
	}
	// The session is alice's: the proxy itself, or bob through it, may
	// not use it; alice, directly or through the proxy, may.
	list := &wire.ListSessionsRequest{}
	for _, c := range []struct{ caller, behalf string }{{"p", ""}, {"p", "bob"}, {"bob", ""}} {
		if _, err := m.callAs(c.caller, c.behalf, sess, wire.MethodListSessions, list); codeOf(err) != wire.CodePermission {
			t.Fatalf("%s for %q on alice's session: %v, want PermissionDenied", c.caller, c.behalf, err)
		}
	}
	resp, err = m.callAs("p", "alice", sess, wire.MethodListSessions, list)
	if err != nil {
		t.Fatalf("alice through the proxy: %v", err)
	}
	if got := resp.(*wire.ListSessionsResponse); len(got.Sessions) != 1 || got.Sessions[0].Principal != "alice" {
		t.Fatalf("alice's sessions through the proxy: %+v", got)
	}
}

// A BatchKeepAlive serves each session as its own KeepAlive: the owner
// checked per entry, a lease granted to the live ones, no more than a
// lease; it is held until the first of them is answered (here the batch's
// HoldMillis) and only a trusted proxy may send one.
func TestBatchKeepAliveServesEachSessionAsItsOwn(t *testing.T) {
	m := newProxiedMaster(t)
	create := &wire.CreateSessionRequest{ClientName: "t"}
	var alice, bob uint64
	for _, who := range []struct {
		name string
		id   *uint64
	}{{"alice", &alice}, {"bob", &bob}} {
		resp, err := m.callAs("p", who.name, 0, wire.MethodCreateSession, create)
		if err != nil {
			t.Fatal(err)
		}
		*who.id = resp.(*wire.CreateSessionResponse).Session
	}
	req := &wire.BatchKeepAliveRequest{HoldMillis: 1000, Entries: []wire.BatchKeepAliveEntry{
		{Session: alice, Principal: "alice", Epoch: m.epoch},
		{Session: bob, Principal: "alice", Epoch: m.epoch}, // not alice's
		{Session: 1 << 40, Principal: "alice"},             // never made
		{Session: bob, Principal: "bob", Epoch: m.epoch},
	}}
	if _, err := m.callAs("mallory", "", 0, wire.MethodBatchKeepAlive, req); codeOf(err) != wire.CodePermission {
		t.Fatalf("a batch from an untrusted principal: %v", err)
	}
	type result struct {
		resp any
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, req)
		done <- result{resp, err}
	}()
	// A batch ends at its first answer: the refused entries, at once.
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a batch with refused entries was held")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	out := r.resp.(*wire.BatchKeepAliveResponse)
	if len(out.Results) != 4 || out.Epoch != m.epoch || out.TTLMillis != testLease.Milliseconds() {
		t.Fatalf("batch answer %+v", out)
	}
	want := []wire.Code{wire.CodeOK, wire.CodePermission, wire.CodeUnknownSession, wire.CodeOK}
	for i, res := range out.Results {
		if res.Session != req.Entries[i].Session || res.Code != want[i] {
			t.Fatalf("entry %d: %+v, want code %v", i, res, want[i])
		}
		if res.Code == wire.CodeOK && (res.LeaseMillis <= 0 || res.HeldMillis+res.LeaseMillis > testLease.Milliseconds()) {
			t.Fatalf("entry %d: held %d ms + lease %d ms, for a lease of %v", i, res.HeldMillis, res.LeaseMillis, testLease)
		}
	}

	// Only live entries: held until HoldMillis, then every one answered.
	req.Entries = []wire.BatchKeepAliveEntry{{Session: alice, Principal: "alice", Epoch: m.epoch},
		{Session: bob, Principal: "bob", Epoch: m.epoch}}
	go func() {
		resp, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, req)
		done <- result{resp, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case r = <-done:
		default:
			if time.Now().After(deadline) {
				t.Fatal("the batch was not answered at its HoldMillis")
			}
			m.clock.Advance(100 * time.Millisecond) // the batch's hold runs on the master's clock
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	out = r.resp.(*wire.BatchKeepAliveResponse)
	for i, res := range out.Results {
		if res.Code != wire.CodeOK || res.HeldMillis < 1000 || res.HeldMillis+res.LeaseMillis > testLease.Milliseconds()+res.HeldMillis {
			t.Fatalf("entry %d after the hold: %+v", i, res)
		}
	}
}

// A batched entry's lease is extended no further than seven quarters of
// a lease past the moment its client was last heard (SilentMillis before
// the batch arrived), on arrival and on reply alike, and never cut back:
// a client silent behind a proxy keeps its session no longer than one
// whose own last KeepAlive the master held and answered.
func TestBatchKeepAliveLeaseStopsAfterItsClientWentSilent(t *testing.T) {
	m := newProxiedMaster(t)
	resp, err := m.callAs("p", "alice", 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sess := resp.(*wire.CreateSessionResponse).Session
	// A fifth of a lease on: under a stall (stallMin), so nothing is
	// credited, and the create's lease has four fifths left.
	m.clock.Advance(testLease / 5)
	lease := func(silent time.Duration) time.Duration {
		t.Helper()
		req := &wire.BatchKeepAliveRequest{Entries: []wire.BatchKeepAliveEntry{{Session: sess, Principal: "alice",
			Epoch: m.epoch, Prompt: true, SilentMillis: silent.Milliseconds()}}}
		resp, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, req)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.(*wire.BatchKeepAliveResponse).Results[0]
		if r.Code != wire.CodeOK {
			t.Fatalf("silent %v: %+v", silent, r)
		}
		return time.Duration(r.HeldMillis+r.LeaseMillis) * time.Millisecond
	}
	// Silent for two leases: past any ceiling, so not extended; the lease
	// the create granted stands.
	if got := lease(2 * testLease); got != testLease*4/5 {
		t.Fatalf("silent for two leases: lease %v, want the create's remaining %v", got, testLease*4/5)
	}
	// Heard 17/20 of a lease ago: extended to seven quarters after that,
	// nine tenths of a lease from now.
	if got := lease(testLease * 17 / 20); got != testLease*9/10 {
		t.Fatalf("silent for 17/20 of a lease: lease %v, want %v", got, testLease*9/10)
	}
	// Silent for two leases again: never cut back.
	if got := lease(2 * testLease); got != testLease*9/10 {
		t.Fatalf("silent for two leases after a longer grant: lease %v, want %v", got, testLease*9/10)
	}
	// Just heard: a whole lease, as its own KeepAlive would get.
	if got := lease(0); got != testLease {
		t.Fatalf("just heard: lease %v, want %v", got, testLease)
	}
}

// A held batch is one record for its sessions: a session's end (an
// event alike) answers the whole batch at once, the others with their
// leases; a session sent again in a newer batch has the older answered
// at once; the term's end answers a held batch NotMaster; and while
// held, each of its sessions counts as a parked KeepAlive.
func TestHeldBatchEndsTogether(t *testing.T) {
	m := newProxiedMaster(t)
	ids := map[string]uint64{}
	for _, who := range []string{"alice", "bob"} {
		resp, err := m.callAs("p", who, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids[who] = resp.(*wire.CreateSessionResponse).Session
	}
	type result struct {
		resp *wire.BatchKeepAliveResponse
		err  error
	}
	hold := func(who ...string) chan result {
		req := &wire.BatchKeepAliveRequest{HoldMillis: testLease.Milliseconds()}
		for _, w := range who {
			req.Entries = append(req.Entries, wire.BatchKeepAliveEntry{Session: ids[w], Principal: w, Epoch: m.epoch})
		}
		done := make(chan result, 1)
		go func() {
			resp, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, req)
			r, _ := resp.(*wire.BatchKeepAliveResponse)
			done <- result{r, err}
		}()
		return done
	}
	parked := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for calls, _ := m.ParkedKeepAlives(); calls != want; calls, _ = m.ParkedKeepAlives() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d KeepAlives parked, want %d", what, calls, want)
			}
			time.Sleep(time.Millisecond) // polling the count, not ordering anything
		}
	}
	wait := func(done chan result, what string) result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the batch was not answered", what)
		}
		return result{}
	}

	both := hold("alice", "bob")
	parked(2, "a batch of two held")
	if _, err := m.callAs("p", "bob", ids["bob"], wire.MethodCloseSession, &wire.CloseSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	r := wait(both, "bob's session closed")
	if r.err != nil || r.resp.Results[0].Code != wire.CodeOK || r.resp.Results[0].LeaseMillis <= 0 ||
		r.resp.Results[1].Code != wire.CodeSessionExpired {
		t.Fatalf("bob's session closed: %+v %v, want alice's lease and bob's end together", r.resp, r.err)
	}
	parked(0, "the batch answered")

	older := hold("alice")
	parked(1, "alice held")
	newer := hold("alice")
	if r := wait(older, "alice sent again"); r.err != nil || r.resp.Results[0].Code != wire.CodeOK {
		t.Fatalf("the older batch: %+v %v, want alice's lease", r.resp, r.err)
	}
	parked(1, "the newer batch holds alice")

	m.Stop()
	if r := wait(newer, "the term ended"); codeOf(r.err) != wire.CodeNotMaster {
		t.Fatalf("a batch held at the term's end: %+v %v, want NotMaster", r.resp, r.err)
	}
}
