package master

import (
	"strings"
	"testing"

	"lockcell/wire"
)

// makeSession creates a session as caller, for behalf (may be "").
func makeSession(t *testing.T, m *testMaster, caller, behalf string) uint64 {
	t.Helper()
	resp, err := m.callAs(caller, behalf, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*wire.CreateSessionResponse).Session
}

// A batch naming a cache session is checked before anything is taken in:
// the session must be the proxy's own and live, a report must travel with
// the cache session's KeepAlive, name valid names and stay within its
// bound. Each refusal is a typed error and changes nothing.
func TestBatchCacheSessionRefusals(t *testing.T) {
	m := newProxiedMaster(t)
	mk := func(caller, behalf string) uint64 { return makeSession(t, m, caller, behalf) }
	cache, alice := mk("p", ""), mk("p", "alice")
	entry := func(s uint64, who string) wire.BatchKeepAliveEntry {
		return wire.BatchKeepAliveEntry{Session: s, Principal: who, Epoch: m.epoch, Prompt: true}
	}
	name := "/ls/c/f"
	cases := []struct {
		why  string
		req  *wire.BatchKeepAliveRequest
		code wire.Code
		msg  string
	}{
		{"another principal's session as the cache session",
			&wire.BatchKeepAliveRequest{CacheSession: alice, Entries: []wire.BatchKeepAliveEntry{entry(alice, "alice")}},
			wire.CodePermission, "belongs to another principal"},
		{"a cache session never made",
			&wire.BatchKeepAliveRequest{CacheSession: 1 << 40, Entries: []wire.BatchKeepAliveEntry{entry(alice, "alice")}},
			wire.CodeSessionExpired, wire.CacheSessionGoneMsg},
		{"a report without the cache session's KeepAlive",
			&wire.BatchKeepAliveRequest{CacheSession: cache, Entries: []wire.BatchKeepAliveEntry{entry(alice, "alice")},
				Served: []wire.ServedName{{Name: name, Sessions: []uint64{alice}}}},
			wire.CodeBadRequest, "without its cache session's KeepAlive"},
		{"a report without a cache session",
			&wire.BatchKeepAliveRequest{Entries: []wire.BatchKeepAliveEntry{entry(alice, "alice")},
				Served: []wire.ServedName{{Name: name, Sessions: []uint64{alice}}}},
			wire.CodeBadRequest, "without a cache session"},
		{"a report of a name no node can have",
			&wire.BatchKeepAliveRequest{CacheSession: cache, Entries: []wire.BatchKeepAliveEntry{entry(cache, "p")},
				Served: []wire.ServedName{{Name: "/ls/other/f", Sessions: []uint64{alice}}}},
			wire.CodeInvalidName, "served name"},
		{"a report over its bound",
			&wire.BatchKeepAliveRequest{CacheSession: cache, Entries: []wire.BatchKeepAliveEntry{entry(cache, "p")},
				Served: []wire.ServedName{{Name: name, Sessions: make([]uint64, wire.MaxServedSessions+1)}}},
			wire.CodeBadRequest, "served sessions"},
	}
	for _, c := range cases {
		_, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, c.req)
		if codeOf(err) != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: %v, want %v (%q)", c.why, err, c.code, c.msg)
		}
	}
	if sent, _ := m.inv.counts(); sent != 0 {
		t.Fatalf("a refused report sent %d invalidations", sent)
	}
	// A proper batch names the cache session, whose lease then outlives
	// every lease the batch told.
	resp, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive,
		&wire.BatchKeepAliveRequest{CacheSession: cache, Entries: []wire.BatchKeepAliveEntry{entry(alice, "alice")}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*wire.BatchKeepAliveResponse).Results; len(r) != 1 || r[0].Code != wire.CodeOK {
		t.Fatalf("the batch's answer: %+v", r)
	}
	left := m.sess.leaseLeft([]uint64{cache, alice}, m.clock.Now())
	if left[cache] < left[alice] {
		t.Fatalf("the cache session's lease (%v left) ends before the lease its batch told alice (%v)", left[cache], left[alice])
	}
}

// A read names a cache session to register it only when a trusted proxy
// makes it, naming a session of its own: from anyone else, or naming
// another's session, the read is answered as it would be without it.
func TestFillRegistersOnlyTheProxysOwnCacheSession(t *testing.T) {
	m := newProxiedMaster(t)
	mk := func(caller, behalf string) uint64 { return makeSession(t, m, caller, behalf) }
	cache, admin := mk("p", ""), mk("p", "admin")
	// Both heard on a KeepAlive: until then neither may cache.
	if _, err := m.callAs("p", "", 0, wire.MethodBatchKeepAlive, &wire.BatchKeepAliveRequest{CacheSession: cache,
		Entries: []wire.BatchKeepAliveEntry{{Session: cache, Principal: "p", Epoch: m.epoch, Prompt: true},
			{Session: admin, Principal: "admin", Epoch: m.epoch, Prompt: true}}}); err != nil {
		t.Fatal(err)
	}
	open := &wire.OpenRequest{Path: "/ls/c/f", Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate, Contents: []byte("x")}
	h := &wire.Header{Method: wire.MethodOpen, Session: admin, Epoch: m.epoch, Seq: 1, OnBehalfOf: "admin"}
	resp, _, err := m.Dispatch(t.Context(), Caller{Principal: "p", Conn: 1}, h, mustMarshal(open))
	if err != nil {
		t.Fatal(err)
	}
	handle := resp.(*wire.OpenResponse).Handle
	read := func(caller, behalf string, cacheSession uint64) bool {
		t.Helper()
		h := &wire.Header{Method: wire.MethodGetContentsAndStat, Session: admin, Epoch: m.epoch, OnBehalfOf: behalf, ProxyCache: cacheSession}
		resp, _, err := m.Dispatch(t.Context(), Caller{Principal: caller, Conn: 1}, h, mustMarshal(&wire.HandleRequest{Handle: handle}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*wire.ContentsResponse).ProxyCacheable
	}
	if read("admin", "", cache) {
		t.Fatal("the admin's own read registered the proxy's cache session")
	}
	if read("p", "admin", admin) {
		t.Fatal("the proxy registered admin's session as its cache session")
	}
	if !read("p", "admin", cache) {
		t.Fatal("the proxy's fill did not register its cache session")
	}
	if regs, _, _, _, _ := m.inv.registrations(); regs != 1 {
		t.Fatalf("%d registrations after one fill, want 1", regs)
	}
}
