package proxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/internal/testhook"
	"lockcell/proxy"
	"lockcell/wire"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pollUntil and mustOpen are the fixtures' (PollUntil, MustOpen).
var (
	pollUntil = fixtures.PollUntil
	mustOpen  = fixtures.MustOpen
)

// events records a client's session events.
type events struct {
	mu   sync.Mutex
	got  []client.EventKind
	more chan struct{}
}

func watch(cl *client.Client) *events {
	e := &events{more: make(chan struct{}, 1)}
	go func() {
		for ev := range cl.Events() {
			e.mu.Lock()
			e.got = append(e.got, ev.Kind)
			e.mu.Unlock()
			select {
			case e.more <- struct{}{}:
			default:
			}
		}
	}()
	return e
}

func (e *events) has(k client.EventKind) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.got, k)
}

func (e *events) waitFor(t *testing.T, k client.EventKind, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !e.has(k) {
		select {
		case <-e.more:
		case <-deadline.C:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("no %v event within %v; got %v", k, d, e.got)
		}
	}
}

const rw = client.Read | client.Write | client.Create

// Sessions behind a proxy live for many leases on its batched KeepAlives
// alone, and the proxy makes far fewer calls than its clients'
// KeepAlives: locks are exclusive across them, and a sequencer a client
// behind the proxy got is checked valid while held and stale after.
func TestProxyLocksAndSequencers(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	p := fixtures.StartProxy(t, c)
	ctx := ctxT(t, 60*time.Second)
	var cls []*client.Client
	for range 20 {
		cls = append(cls, c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p)))
	}
	began, batches0 := time.Now(), p.Stats().Batches
	a, b := cls[0], cls[1]
	ha := mustOpen(t, ctx, a, c.Name("lock"), rw)
	hb := mustOpen(t, ctx, b, c.Name("lock"), rw)
	if ok, err := ha.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("a acquires: %v %v", ok, err)
	}
	if ok, err := hb.TryAcquire(ctx, client.Exclusive); ok || err != nil {
		t.Fatalf("b acquired a held lock: %v %v", ok, err)
	}
	seq, err := ha.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Five leases pass on the proxy's KeepAlives alone: the lock stays.
	time.Sleep(5 * time.Second) // the time under test, not a synchronisation
	if ok, err := b.CheckSequencer(ctx, seq); !ok || err != nil {
		t.Fatalf("a's sequencer after five leases: %v %v", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- hb.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "b queued", func() bool { s, _ := hb.GetStat(ctx); return s.LockWaiters == 1 })
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("b acquire: %v", err)
	}
	if ok, err := b.CheckSequencer(ctx, seq); ok || err != nil {
		t.Fatalf("a's sequencer after release: %v %v", ok, err)
	}
	for i, cl := range cls {
		if _, err := cl.Open(ctx, c.Name("lock"), client.Read); err != nil {
			t.Fatalf("client %d after five leases: %v", i, err)
		}
	}
	st := p.Stats()
	t.Logf("proxy: %d sessions, %d batch calls, %d failed", st.Sessions, st.Batches, st.Failed)
	if st.Sessions != len(cls) {
		t.Fatalf("proxy keeps %d sessions, want %d", st.Sessions, len(cls))
	}
	// Directly, every session makes a KeepAlive per three quarters of a
	// lease at least: the master would have answered that many. Through
	// the proxy it answers a batch per half lease, and one per event.
	direct := len(cls) * int(time.Since(began)/time.Second)
	if n := int(st.Batches - batches0); n > direct/2 {
		t.Fatalf("%d batch calls for %d sessions over %v (directly at least %d KeepAlives): not coalesced",
			n, len(cls), time.Since(began).Round(time.Second), direct)
	}
}

// A client behind a proxy that dies holding a lock loses it as one
// talking to the master would: its session expires (the proxy stops
// keeping a lease its client no longer asks for) and a waiter gets the
// lock no earlier than the lock-delay after.
func TestProxyLockDelayAfterClientDies(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	p := fixtures.StartProxy(t, c)
	ctx := ctxT(t, 60*time.Second)
	cut := fixtures.NewCutter()
	cfgA := fixtures.ProxiedConfig(c.ClientConfig(), p)
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	b := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p))
	const delay = 2 * time.Second
	mustOpen(t, ctx, a, c.Name("a-alive"), rw|client.Ephemeral)
	la := mustOpen(t, ctx, a, c.Name("lock"), rw, client.WithLockDelay(delay))
	if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("a acquires: %v %v", ok, err)
	}
	lb := mustOpen(t, ctx, b, c.Name("lock"), rw)
	got := make(chan time.Time, 1)
	go func() {
		if err := lb.Acquire(ctx, client.Exclusive); err != nil {
			t.Errorf("b acquire: %v", err)
		}
		got <- time.Now()
	}()
	pollUntil(t, 10*time.Second, "b queued", func() bool { s, _ := lb.GetStat(ctx); return s.LockWaiters == 1 })
	cut.Cut() // a dies, as far as anyone can tell
	cutAt := time.Now()
	pollUntil(t, 20*time.Second, "a's ephemeral file deleted", func() bool {
		_, err := b.Open(ctx, c.Name("a-alive"), client.Read)
		return errors.Is(err, client.ErrNotFound)
	})
	gotAt := <-got
	st, err := lb.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LockDelayUntil.IsZero() || gotAt.Before(st.LockDelayUntil) {
		t.Fatalf("b got the lock at %v; lock-delay until %v", gotAt, st.LockDelayUntil)
	}
	t.Logf("a cut at T; b holds the lock at T+%v (lock-delay %v)", gotAt.Sub(cutAt).Round(time.Millisecond), delay)
}

// A caching client behind a proxy never reads a stale value: a write
// (by a client talking to the master directly) returns only once the
// invalidation reached the caching client through the proxy, so the
// read right after it, which would be a cache hit, sees the new value.
func TestProxyInvalidationBeforeWriteReturns(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: 2 * time.Second})
	p := fixtures.StartProxy(t, c)
	ctx := ctxT(t, 60*time.Second)
	reader := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p))
	writer := c.Client(t)
	hw := mustOpen(t, ctx, writer, c.Name("f"), rw, client.WithContents([]byte("v0")))
	hr := mustOpen(t, ctx, reader, c.Name("f"), client.Read)
	hits := 0
	for i := 1; i <= 20; i++ {
		// Fill the cache, then read it from the cache.
		for range 2 {
			if _, _, err := hr.GetContentsAndStat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		h0, c0 := admin.New(reader).CacheStats().Hits, testhook.CallsSent()
		data, _, err := hr.GetContentsAndStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if admin.New(reader).CacheStats().Hits > h0 && testhook.CallsSent() == c0 {
			hits++
		}
		want := []byte{'v', byte('0' + (i-1)%10)}
		if string(data) != string(want) && i > 1 {
			t.Fatalf("round %d: read %q, want %q", i, data, want)
		}
		next := []byte{'v', byte('0' + i%10)}
		if err := hw.SetContents(ctx, next); err != nil {
			t.Fatal(err)
		}
		if data, _, err := hr.GetContentsAndStat(ctx); err != nil || string(data) != string(next) {
			t.Fatalf("round %d: read %q (%v) after the write of %q returned: stale", i, data, err, next)
		}
	}
	if hits < 10 {
		t.Fatalf("only %d of 20 reads came from the cache: the test proves nothing", hits)
	}
}

// A proxy cut off from the master leaves its clients in jeopardy, as a
// dead master would; when it reaches the master again within the grace
// period they are safe again, with the same session and lock.
func TestProxyCutFromMasterMeansJeopardy(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	cut := fixtures.NewCutter()
	ctx := ctxT(t, 60*time.Second)
	a, ev, la, st0 := holdBehindProxy(t, ctx, c, cut.Dial)
	session := a.Session()
	cut.Cut()
	cutAt := time.Now()
	ev.waitFor(t, client.Jeopardy, 10*time.Second)
	t.Logf("proxy cut at T; client in jeopardy at T+%v", time.Since(cutAt).Round(time.Millisecond))
	cut.Heal()
	ev.waitFor(t, client.Safe, 20*time.Second)
	if ev.has(client.Expired) {
		t.Fatalf("session expired: %v", ev.got)
	}
	if a.Session() != session {
		t.Fatalf("session %d became %d", session, a.Session())
	}
	st, err := la.GetStat(ctx)
	if err != nil || st.LockGen != st0.LockGen || st.LockHolders != 1 {
		t.Fatalf("lock after jeopardy: %+v %v; before %+v", st, err, st0)
	}
}

// holdBehindProxy starts a proxy in front of c that reaches the replicas
// with dial, and a client behind it (grace period 20 s) that takes an
// exclusive lock: the client, its events, the lock's handle and its stat.
func holdBehindProxy(t *testing.T, ctx context.Context, c *fixtures.Cell,
	dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*client.Client, *events, *client.Handle, client.Stat) {
	t.Helper()
	p := fixtures.StartProxyWith(t, c, func(cfg *proxy.Config) { cfg.Dialer = dial })
	cfg := fixtures.ProxiedConfig(c.ClientConfig(), p)
	cfg.GracePeriod, cfg.RetryTimeout = 20*time.Second, 20*time.Second
	a := c.ClientWith(t, cfg)
	ev := watch(a)
	la := mustOpen(t, ctx, a, c.Name("lock"), rw)
	if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("a acquires: %v %v", ok, err)
	}
	st0, err := la.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a, ev, la, st0
}

// A client whose proxy dies carries on, same session, same lock, through
// another proxy or through the replicas directly, whichever its address
// list offers.
func TestProxyClientFailsOver(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 90*time.Second)
	for _, to := range []string{"proxy", "replicas"} {
		t.Run("to "+to, func(t *testing.T) {
			p1 := fixtures.StartProxy(t, c)
			cfg := fixtures.ProxiedConfig(c.ClientConfig(), p1)
			if to == "proxy" {
				cfg = fixtures.ProxiedConfig(c.ClientConfig(), p1, fixtures.StartProxy(t, c))
			} else {
				cfg.Replicas = append(cfg.Replicas, c.Addrs()...)
			}
			cfg.GracePeriod, cfg.RetryTimeout = 20*time.Second, 20*time.Second
			a := c.ClientWith(t, cfg)
			ev := watch(a)
			if got := admin.New(a).Master(); got != p1.Addr().String() {
				t.Fatalf("client talks to %s, not the first proxy %s", got, p1.Addr())
			}
			session := a.Session()
			la := mustOpen(t, ctx, a, c.Name("lock-"+to), rw)
			if ok, err := la.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
				t.Fatalf("a acquires: %v %v", ok, err)
			}
			p1.Close()
			// Three leases later the session, its lock and its calls are
			// still there.
			time.Sleep(3 * time.Second) // the time under test
			if _, err := la.GetStat(ctx); err != nil {
				t.Fatalf("call after the proxy died: %v", err)
			}
			if err := la.SetContents(ctx, []byte("still mine")); err != nil {
				t.Fatalf("write after the proxy died: %v", err)
			}
			if a.Session() != session || ev.has(client.Expired) {
				t.Fatalf("session %d -> %d, events %v", session, a.Session(), ev.got)
			}
			if got := admin.New(a).Master(); got == p1.Addr().String() {
				t.Fatalf("client still believes in the dead proxy")
			}
		})
	}
}

// Identity passes through a trusted proxy: a session made through it
// belongs to the client's principal, not the proxy's. A proxy whose
// principal the cell does not trust cannot make calls for anyone else:
// its clients are refused with ErrPermission.
func TestProxyIdentity(t *testing.T) {
	certs := fixtures.TestCerts(t, "alice", fixtures.ProxyPrincipal, "mallory")
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second, TLS: certs,
		Configure: func(cfg *cell.Config) { cfg.ProxyPrincipals = []string{fixtures.ProxyPrincipal} }})
	ctx := ctxT(t, 60*time.Second)
	trusted := fixtures.StartProxy(t, c)
	alice := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfigAs("alice"), trusted))
	mine, err := admin.New(alice).Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].ID != alice.Session() || mine[0].Principal != "alice" {
		t.Fatalf("alice's sessions through the proxy: %+v", mine)
	}
	// The ACLs judge the client's principal: the default ACL lets only
	// the admin create, so the admin through the proxy may, alice
	// through it may not (nor could the proxy's own principal).
	adm := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), trusted))
	mustOpen(t, ctx, adm, c.Name("admins"), rw)
	if _, err := alice.Open(ctx, c.Name("alices"), rw); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice creates through the proxy: %v, want ErrPermission", err)
	}

	untrusted := fixtures.StartProxyWith(t, c, func(cfg *proxy.Config) {
		cfg.Upstream = certs.ClientTLS(t, "mallory")
	})
	cfg := fixtures.ProxiedConfig(c.ClientConfigAs("alice"), untrusted)
	cfg.RetryTimeout = 5 * time.Second
	_, err = client.Dial(ctx, cfg)
	if !errors.Is(err, client.ErrPermission) {
		t.Fatalf("dial through a proxy the cell does not trust: %v, want ErrPermission", err)
	}
	// Its readiness says so; the trusted one is ready (a master that
	// trusts it, fresh leases for its clients' sessions).
	pollUntil(t, 10*time.Second, "the untrusted proxy not ready, saying why", func() bool {
		ok, why := untrusted.Ready()
		return !ok && strings.Contains(why, "not trusted as a proxy")
	})
	pollUntil(t, 10*time.Second, "the trusted proxy ready", func() bool { ok, _ := trusted.Ready(); return ok })
}

// A client behind a proxy that calls again as soon as each KeepAlive is
// answered always hears of a longer lease before the one it was told
// runs low (it never falls into jeopardy while the proxy's batches flow),
// and is never answered again at once: a proxy that answers as soon as
// its own lease runs low would have it call again and again, in a loop,
// until the next batch came back, and one that holds it by the proxy's
// lease rather than the client's leaves it in jeopardy.
func TestProxyKeepAliveAnswersInTimeNeverInALoop(t *testing.T) {
	const ttl = time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: ttl})
	cut := fixtures.NewCutter()
	p := fixtures.StartProxyWith(t, c, func(cfg *proxy.Config) { cfg.Dialer = cut.Dial })
	ctx := ctxT(t, 60*time.Second)
	sent := time.Now()
	mux, cs := rawProxySession(t, ctx, p, nil, "eager")
	epoch := cs.Epoch
	leaseEnd := sent.Add(time.Duration(cs.LeaseMillis) * time.Millisecond) // as the client reckons it: from the send
	var answers []time.Time
	began := time.Now()
	const window = 8 * ttl
	for time.Since(began) < window {
		var ka wire.KeepAliveResponse
		sent := time.Now()
		st, err := mux.Call(ctx, wire.Header{Method: wire.MethodKeepAlive, Session: cs.Session, Epoch: epoch}, &wire.KeepAliveRequest{}, &ka)
		now := time.Now()
		if err != nil || st.Code != wire.CodeOK {
			t.Fatalf("KeepAlive %d through the proxy: %v %v", len(answers)+1, st, err)
		}
		if now.After(leaseEnd) {
			t.Fatalf("KeepAlive %d answered %v after the client's lease ended: jeopardy with the proxy's batches flowing",
				len(answers)+1, now.Sub(leaseEnd).Round(time.Millisecond))
		}
		if ka.LeaseMillis <= 0 {
			t.Fatalf("KeepAlive %d answered with no lease: %+v", len(answers)+1, ka)
		}
		epoch = ka.Epoch
		leaseEnd = sent.Add(time.Duration(ka.HeldMillis+ka.LeaseMillis) * time.Millisecond)
		answers = append(answers, now)
	}
	elapsed := time.Since(began)
	// After the first (the session's first batch), a call waits at
	// least until the lease it was told runs low: never an eighth of a
	// lease between answers.
	for i := 2; i < len(answers); i++ {
		if gap := answers[i].Sub(answers[i-1]); gap < ttl/8 {
			t.Fatalf("KeepAlive %d answered %v after the one before: answered again at once", i+1, gap)
		}
	}
	t.Logf("%d KeepAlives answered over %v", len(answers), elapsed.Round(time.Millisecond))

	// Cut from the master, the proxy has no newer lease to tell: the
	// client hears at most the lease the proxy still has, never the same
	// one again at once, and then NotMaster before its lease ends, so it
	// looks elsewhere in time.
	cut.Cut()
	last := answers[len(answers)-1]
	for n := 0; ; n++ {
		var ka wire.KeepAliveResponse
		sent := time.Now()
		st, err := mux.Call(ctx, wire.Header{Method: wire.MethodKeepAlive, Session: cs.Session, Epoch: epoch}, &wire.KeepAliveRequest{}, &ka)
		now := time.Now()
		if err != nil {
			t.Fatalf("KeepAlive after the cut: %v", err)
		}
		if now.After(leaseEnd) {
			t.Fatalf("after the cut, KeepAlive answered %v (%s) %v after the client's lease ended: told too late",
				st, st.Msg, now.Sub(leaseEnd).Round(time.Millisecond))
		}
		if st.Code == wire.CodeNotMaster {
			t.Logf("cut from the master: %d more leases told, then NotMaster %v before the client's lease ended", n, leaseEnd.Sub(now).Round(time.Millisecond))
			break
		}
		if st.Code != wire.CodeOK {
			t.Fatalf("KeepAlive after the cut: %v", st)
		}
		if gap := now.Sub(last); gap < ttl/8 {
			t.Fatalf("after the cut, a KeepAlive answered %v after the one before, with the lease already told: a loop", gap)
		}
		last, epoch = now, ka.Epoch
		leaseEnd = sent.Add(time.Duration(ka.HeldMillis+ka.LeaseMillis) * time.Millisecond)
	}
}

// rawProxySession dials p in the wire protocol directly (no client
// library: the test makes every KeepAlive itself) and creates a session
// named name, over TLS as tlsCfg's principal when it is set; the
// connection closes with the test.
func rawProxySession(t *testing.T, ctx context.Context, p *proxy.Proxy, tlsCfg *tls.Config, name string) (*fixtures.WireMux, wire.CreateSessionResponse) {
	t.Helper()
	addr := p.Addr().String()
	var conn net.Conn
	var err error
	if tlsCfg != nil {
		var cfg *tls.Config
		if cfg, err = certs.ForAddr(tlsCfg, addr); err != nil {
			t.Fatal(err)
		}
		conn, err = tls.Dial("tcp", addr, cfg)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	mux, err := fixtures.NewWireMux(conn, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mux.Close)
	var cs wire.CreateSessionResponse
	if st, err := mux.Call(ctx, wire.Header{Method: wire.MethodCreateSession}, &wire.CreateSessionRequest{ClientName: name}, &cs); err != nil || st.Code != wire.CodeOK {
		t.Fatalf("create session through the proxy: %v %v", st, err)
	}
	return mux, cs
}

// A client that falls silent behind a proxy (paused, or cut off with
// its connection left open) keeps its session no longer than one
// talking to the master directly: seven quarters of a lease after its
// last KeepAlive left it (held up to three quarters, then a lease), and
// then it expires, though the proxy's batches may carry it a while yet.
// Without the master's ceiling a batch in flight when the client fell
// silent, held half a lease, extends the lease a whole lease past its
// answer, and the session outlives its client by well over two leases.
func TestProxySilentClientLosesItsSessionInTime(t *testing.T) {
	const ttl = time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: ttl})
	p := fixtures.StartProxy(t, c)
	ad := admin.New(c.Client(t))
	ctx := ctxT(t, 60*time.Second)
	mux, cs := rawProxySession(t, ctx, p, nil, "silent")
	epoch := cs.Epoch
	keepAlive := func() (wire.KeepAliveResponse, error) {
		var ka wire.KeepAliveResponse
		st, err := mux.Call(ctx, wire.Header{Method: wire.MethodKeepAlive, Session: cs.Session, Epoch: epoch}, &wire.KeepAliveRequest{}, &ka)
		if err == nil {
			err = st.Err()
		}
		return ka, err
	}
	// Kept alive a few leases, so batches are in flight at the master
	// (each held up to half a lease) when the client falls silent.
	for began := time.Now(); time.Since(began) < 3*ttl; {
		ka, err := keepAlive()
		if err != nil {
			t.Fatalf("KeepAlive through the proxy: %v", err)
		}
		epoch = ka.Epoch
	}
	// The last call: parked at the proxy, answered, and never followed.
	lastSent := time.Now()
	last := make(chan error, 1)
	go func() { _, err := keepAlive(); last <- err }()

	ceiling := lastSent.Add(ttl * 7 / 4)
	var latestEnd, goneAt time.Time
	pollUntil(t, 20*time.Second, "the silent client's session expired at the master", func() bool {
		ss, err := ad.Sessions(ctx)
		now := time.Now()
		if err != nil {
			return false
		}
		for _, s := range ss {
			if s.ID == cs.Session {
				// now is after the master's reckoning: an over-estimate
				// of the lease end by the call's own latency.
				// A lease run out lists as 0 until the session expires.
				if end := now.Add(s.Lease); s.Lease > 0 && end.After(latestEnd) {
					latestEnd = end
				}
				return false
			}
		}
		goneAt = now
		return true
	})
	if err := <-last; err != nil {
		t.Logf("the last KeepAlive: %v", err)
	}
	t.Logf("client silent from T: the master's lease ran to T+%v at the latest (ceiling T+%v); session gone at T+%v",
		latestEnd.Sub(lastSent).Round(time.Millisecond), ceiling.Sub(lastSent), goneAt.Sub(lastSent).Round(time.Millisecond))
	// The listing's latency (the poll's round trip) is the only slack.
	if latestEnd.After(ceiling.Add(150 * time.Millisecond)) {
		t.Fatalf("the master extended the silent client's lease to T+%v: past its last call plus seven quarters of a lease (T+%v)",
			latestEnd.Sub(lastSent).Round(time.Millisecond), ceiling.Sub(lastSent))
	}
}
