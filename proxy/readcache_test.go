package proxy_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/proxy"
	"lockcell/wire"
)

// cachingProxy starts a proxy with its read cache on in front of c, and
// waits until its cache serves.
func cachingProxy(t *testing.T, c *fixtures.Cell) *proxy.Proxy {
	t.Helper()
	p := fixtures.StartProxyWith(t, c, func(cfg *proxy.Config) { cfg.CacheReads = true })
	pollUntil(t, 30*time.Second, "the proxy's cache serving", func() bool { return p.Stats().Cache.Serving })
	return p
}

// readAs reads h and fails the test unless it reads want.
func readAs(t *testing.T, ctx context.Context, who string, h *client.Handle, want string) {
	t.Helper()
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != want {
		t.Fatalf("%s read %q (%v), want %q", who, data, err, want)
	}
}

// The proxy's cache answers the reads of its clients after one of them
// filled it, and lets them cache what it served; a write returns only
// after every such client dropped the old data, reported by the proxy
// with its acknowledgement, without waiting out any lease.
func TestProxyCacheServesReadsAndWritesInvalidateItsClients(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
	p := cachingProxy(t, c)
	ctx := ctxT(t, 90*time.Second)
	filler := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p))
	reader := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p))
	writer := c.Client(t)
	hw := mustOpen(t, ctx, writer, c.Name("f"), rw, client.WithContents([]byte("v0")))
	hf := mustOpen(t, ctx, filler, c.Name("f"), client.Read)
	// Not pooled: a pooled handle's Open registers the reader at the
	// master as a cacher, and the master would invalidate it itself.
	hr := mustOpen(t, ctx, reader, c.Name("f"), client.Read, client.WithEvents(client.OnHandleInvalid))
	m := c.WaitForMaster(30 * time.Second)
	late0 := c.Server(m).Master().InvalidationStats().Late
	// A client is served cacheable once its lease came from a batch
	// naming the proxy's cache session (the first within half a lease).
	pollUntil(t, 30*time.Second, "the reader caching what the proxy served", func() bool {
		readAs(t, ctx, "the filler", hf, "v0")
		h0, c0 := p.Stats().Cache.Hits, admin.New(reader).CacheStats().Hits
		readAs(t, ctx, "the reader", hr, "v0")
		if p.Stats().Cache.Hits == h0 {
			// Forwarded (the proxy's cache was not serving, say its
			// session's lease ran short on a loaded machine): the master
			// registered the reader, whose reads its own cache now
			// answers. The same value again invalidates it, so the next
			// try starts afresh.
			if err := hw.SetContents(ctx, []byte("v0")); err != nil {
				t.Fatal(err)
			}
			return false
		}
		readAs(t, ctx, "the reader, again", hr, "v0")
		return admin.New(reader).CacheStats().Hits > c0
	})
	proxyHits, clientHits := 0, 0
	for i := 1; i <= 20; i++ {
		next := fmt.Sprintf("v%d", i)
		if err := hw.SetContents(ctx, []byte(next)); err != nil {
			t.Fatal(err)
		}
		// The write returned: every read now sees it. The filler's
		// fills the proxy's cache; the reader's is then the cache's.
		readAs(t, ctx, "the filler, after the write returned", hf, next)
		before := p.Stats().Cache.Hits
		readAs(t, ctx, "the reader, after the write returned", hr, next)
		if p.Stats().Cache.Hits > before {
			proxyHits++
			// Served cacheable: its next read is its own cache's.
			h0 := admin.New(reader).CacheStats().Hits
			readAs(t, ctx, "the reader, again", hr, next)
			if admin.New(reader).CacheStats().Hits > h0 {
				clientHits++
			}
		}
	}
	st := p.Stats().Cache
	t.Logf("proxy hits %d of 20 rounds, then the reader's own cache %d; cache %+v", proxyHits, clientHits, st)
	if proxyHits < 10 || clientHits < 5 {
		t.Fatalf("the proxy served %d rounds from its cache, and the reader cached %d of them: the test proves nothing", proxyHits, clientHits)
	}
	if st.Reported == 0 || st.Invalidations == 0 {
		t.Fatalf("no client was reported with an invalidation: %+v", st)
	}
	if late := c.Server(m).Master().InvalidationStats().Late - late0; late != 0 {
		t.Fatalf("%d invalidations ran to their deadline: the proxy's reports should have answered every one", late)
	}
}

// A proxy that dies after serving a client from its cache cannot report
// it: the write waits out the leases that proxy relayed, and the client,
// once it has moved to another proxy, never reads what the dead one
// served it.
func TestProxyCacheDiesItsClientsDropWhatItServed(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
	p1 := cachingProxy(t, c)
	p2 := cachingProxy(t, c)
	ctx := ctxT(t, 90*time.Second)
	filler := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p1))
	reader := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p1, p2))
	evs := watch(reader)
	writer := c.Client(t)
	// The reader holds an entry p1's cache served it, and only that: it
	// never read or opened the name through the master as a cacher
	// (which would register it, and invalidate it itself), so each try is
	// on a name of its own.
	var hw, hr *client.Handle
	for try := 0; hr == nil; try++ {
		if try == 30 {
			t.Fatal("the reader never cached what p1's cache served it")
		}
		name := c.Name(fmt.Sprintf("f%d", try))
		w := mustOpen(t, ctx, writer, name, rw, client.WithContents([]byte("old")))
		readAs(t, ctx, "the filler", mustOpen(t, ctx, filler, name, client.Read), "old")
		// Not a pooled handle, whose Open registers the reader at the
		// master as a cacher of the name (handle events make it one).
		r := mustOpen(t, ctx, reader, name, client.Read, client.WithEvents(client.OnHandleInvalid))
		h0, c0 := p1.Stats().Cache.Hits, admin.New(reader).CacheStats().Hits
		readAs(t, ctx, "the reader", r, "old")
		if p1.Stats().Cache.Hits == h0 {
			continue
		}
		readAs(t, ctx, "the reader, again", r, "old")
		if admin.New(reader).CacheStats().Hits > c0 {
			hw, hr = w, r
			break
		}
		time.Sleep(200 * time.Millisecond) // a lease from a batch comes within half a lease: not a synchronisation
	}
	p1.Close()
	if err := hw.SetContents(ctx, []byte("new")); err != nil {
		t.Fatal(err)
	}
	// Whatever route the reader is on now, the write completed: no read
	// of it may return what p1 served.
	pollUntil(t, 30*time.Second, "the reader on p2", func() bool {
		data, _, err := hr.GetContentsAndStat(ctx)
		if err == nil && string(data) != "new" {
			t.Fatalf("the reader read %q after the write of %q completed: stale, served by a dead proxy's cache", data, "new")
		}
		return err == nil && p2.Stats().Sessions > 0
	})
	readAs(t, ctx, "the reader through p2", hr, "new")
	evs.mu.Lock()
	t.Logf("the reader's events: %v", evs.got)
	evs.mu.Unlock()
}

// rawCacher is a hostile client behind a proxy, on the wire: it keeps its
// session alive but never acknowledges an event, and reads one file
// asking to cache it.
type rawCacher struct {
	mux     *fixtures.WireMux
	session uint64
	epoch   uint64
	handle  uint64
	replies atomic.Int64 // KeepAlive answers with a lease
}

// newRawCacher makes a session through p as the principal of tlsCfg,
// keeps it alive without acknowledging anything until the test ends, and
// opens name for reading.
func newRawCacher(t *testing.T, ctx context.Context, p *proxy.Proxy, tlsCfg *tls.Config, name string) *rawCacher {
	t.Helper()
	mux, cs := rawProxySession(t, ctx, p, tlsCfg, "never-acks")
	r := &rawCacher{mux: mux, session: cs.Session, epoch: cs.Epoch}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for kctx.Err() == nil {
			var ka wire.KeepAliveResponse
			// AckEvent 0, always: it hears every invalidation and
			// acknowledges none.
			st, err := mux.Call(kctx, wire.Header{Method: wire.MethodKeepAlive, Session: r.session, Epoch: r.epoch},
				&wire.KeepAliveRequest{}, &ka)
			if err != nil {
				return
			}
			if st.Code == wire.CodeOK && ka.LeaseMillis > 0 {
				r.replies.Add(1)
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	var or wire.OpenResponse
	if st, err := mux.Call(ctx, wire.Header{Method: wire.MethodOpen, Session: r.session, Epoch: r.epoch, Seq: 1},
		&wire.OpenRequest{Path: name, Flags: wire.OpenRead}, &or); err != nil || st.Code != wire.CodeOK {
		t.Fatalf("open %s through the proxy: %v %v", name, st, err)
	}
	r.handle = or.Handle
	return r
}

// read reads the file asking to cache it: whether the proxy's cache
// served it (Proxy set) and as cacheable.
func (r *rawCacher) read(t *testing.T, ctx context.Context) (fromProxy, cacheable bool) {
	t.Helper()
	var cr wire.ContentsResponse
	st, err := r.mux.Call(ctx, wire.Header{Method: wire.MethodGetContentsAndStat, Session: r.session, Epoch: r.epoch},
		&wire.HandleRequest{Handle: r.handle, Cache: true}, &cr)
	if err != nil || st.Code != wire.CodeOK {
		t.Fatalf("read through the proxy: %v %v", st, err)
	}
	return cr.Proxy != 0, cr.Cacheable
}

// A principal whose sessions behind a caching proxy are served a name as
// cacheable and never acknowledge its invalidation holds a write of it at
// most the lease those sessions held, as any cacher; its holds are
// charged to it, it is barred, and the proxy, told with its next report,
// serves it nothing cacheable: writes then go on without waiting for it.
// A session with an invalidation it has not acknowledged is served
// nothing cacheable either, as the master registers it for nothing more.
func TestProxyCacheNonAckingPrincipalIsBounded(t *testing.T) {
	set := fixtures.TestCerts(t, fixtures.ProxyPrincipal, "mallory")
	const lease = time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease, TLS: set,
		Configure: func(cfg *cell.Config) { cfg.ProxyPrincipals = []string{fixtures.ProxyPrincipal} }})
	p := cachingProxy(t, c)
	ctx := ctxT(t, 120*time.Second)
	adm := c.Client(t)
	mustOpen(t, ctx, adm, c.Name("acl"), rw|client.Directory)
	mustOpen(t, ctx, adm, c.Name("acl/readers"), rw, client.WithContents([]byte("mallory\n")))
	hw := mustOpen(t, ctx, adm, c.Name("f"), rw, client.WithContents([]byte("v0")))
	if _, err := hw.SetACL(ctx, client.ACL{Read: "readers"}); err != nil {
		t.Fatal(err)
	}
	// The admin's reads through the proxy fill its cache.
	filler := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p))
	hf := mustOpen(t, ctx, filler, c.Name("f"), client.Read, client.WithoutCache())
	mallory := set.ClientTLS(t, "mallory")
	m := c.WaitForMaster(30 * time.Second)
	inv := func() (late, bars uint64) {
		s := c.Server(m).Master().InvalidationStats()
		return s.Late, s.Bars
	}
	barredAt := 0
	for round := 1; round <= 8; round++ {
		cur := fmt.Sprintf("v%d", round-1)
		readAs(t, ctx, "the filler", hf, cur)
		// Fresh sessions of mallory's, each served the name by the
		// proxy's cache: cacheable once its lease came from a batch
		// naming the cache session (by its second KeepAlive answer),
		// until the proxy hears of a bar.
		var rs []*rawCacher
		for range 3 {
			rs = append(rs, newRawCacher(t, ctx, p, mallory, c.Name("f")))
		}
		pollUntil(t, 20*time.Second, "mallory's sessions answered twice", func() bool {
			for _, r := range rs {
				if r.replies.Load() < 2 {
					return false
				}
			}
			return true
		})
		var served, cacheable int
		for _, r := range rs {
			readAs(t, ctx, "the filler", hf, cur)
			fromProxy, ok := r.read(t, ctx)
			if fromProxy {
				served++
			}
			if fromProxy && ok {
				cacheable++
			}
		}
		late0, _ := inv()
		began := time.Now()
		if err := hw.SetContents(ctx, []byte(fmt.Sprintf("v%d", round))); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		late, bars := inv()
		t.Logf("round %d: %d of mallory's sessions served, %d cacheable; the write took %v, %d invalidations ran late, %d bars",
			round, served, cacheable, took.Round(time.Millisecond), late-late0, bars)
		if took > lease+time.Second {
			t.Fatalf("round %d: the write took %v, over the lease its cachers held (%v) + 1 s", round, took, lease)
		}
		if bars > 0 && barredAt == 0 {
			barredAt = round
		}
		if barredAt == 0 && cacheable == 0 {
			t.Fatalf("round %d: no read of mallory's served cacheable before any bar: the test proves nothing", round)
		}
		if barredAt > 0 && round >= barredAt+2 {
			// The proxy heard of the bar with the report after it.
			if served == 0 || cacheable != 0 || late != late0 {
				t.Fatalf("round %d, barred since round %d: %d of %d reads from the proxy's cache served cacheable, %d invalidations late",
					round, barredAt, cacheable, served, late-late0)
			}
			return
		}
	}
	t.Fatalf("mallory was barred at round %d (0: never), and the proxy went on serving it cacheable", barredAt)
}
