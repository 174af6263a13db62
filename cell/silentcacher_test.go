package cell_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/wire"
)

// An attacker that makes a fresh session every tenth of a lease, caches
// the victim's file and the absence of a name in the victim's directory
// (a negative cacher of the directory) through each, and never sends a
// KeepAlive, holds neither the victim's writes of the file nor its
// creates in the directory: over the whole run they wait at most about
// one lease in all, not a lease each. An honest cacher of the file keeps
// caching and sees every write.
func TestFreshSilentCachersDoNotHoldWrites(t *testing.T) {
	file, creates, bars := silentCachers(t, false)
	if total, bound := file+creates, silentLease+silentLease/2; total > bound {
		t.Fatalf("the victim's writes and creates waited %v in all; want at most about one lease (%v)", total, silentLease)
	}
	if bars != 0 {
		t.Errorf("%d principals barred: sessions never heard from should hold nothing to be charged for", bars)
	}
}

// The same attacker, each of its sessions sending one KeepAlive before it
// caches and none after (so the master can reach it, but it never
// acknowledges), holds the victim's writes of the file about one lease in
// all, and its creates in the directory as much: then mallory is barred
// and no fresh session of hers holds anything.
func TestHeardOnceSilentCachersHoldWritesAboutOneLease(t *testing.T) {
	file, creates, bars := silentCachers(t, true)
	bound := silentLease + silentLease/2
	if file > bound || creates > bound {
		t.Fatalf("the victim's writes waited %v in all and its creates %v; want at most about one lease (%v) each", file, creates, silentLease)
	}
	if bars == 0 {
		t.Error("mallory's cachers held writes and she was not barred")
	}
}

// silentLease is the lease of the silentCachers cells.
const silentLease = 3 * time.Second

// silentCachers runs the attack of TestFreshSilentCachersDoNotHoldWrites
// (with one prompt KeepAlive from each session if keepAliveOnce) and
// returns how long the victim's writes of the file and its creates in the
// directory waited in all, and the bars the master counted. It fails the
// test as soon as either waited past twice a lease.
func silentCachers(t *testing.T, keepAliveOnce bool) (file, creates time.Duration, bars uint64) {
	t.Helper()
	const lease = silentLease
	set := fixtures.TestCerts(t, "bob", "mallory")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: lease})
	ctx := ctxT(t, 3*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	dir, name := c.Name("d"), c.Name("d/f")

	writer := c.Client(t) // the admin
	mustOpen(t, ctx, writer, dir, client.Read|client.Write|client.Create|client.Directory).Close()
	hw := mustOpen(t, ctx, writer, name, client.Read|client.Write|client.Create, client.WithContents([]byte("v0")))

	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	hb := mustOpen(t, ctx, bob, name, client.Read)
	bobReads := func(want string) func() error {
		return func() error {
			data, _, err := hb.GetContentsAndStat(ctx)
			if err == nil && string(data) != want {
				err = fmt.Errorf("bob read %q, want %q", data, want)
			}
			return err
		}
	}

	// mallory: a fresh session every tenth of a lease, each caching the
	// file and an absence in its directory, none ever calling KeepAlive.
	mux := dialRawMux(t, c.Addrs()[m], set.ClientTLS(t, "mallory"))
	var sessions, cacheable atomic.Int64
	attackErr := make(chan error, 1)
	actx, stopAttack := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fail := func(err error) {
			select {
			case attackErr <- err:
			default:
			}
		}
		tick := time.NewTicker(lease / 10)
		defer tick.Stop()
		for i := 0; ; i++ {
			r := &rawSession{t: t, mux: mux}
			var cs wire.CreateSessionResponse
			if st, err := r.try(actx, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "silent"}, &cs); err != nil || st.Code != wire.CodeOK {
				if actx.Err() == nil {
					fail(fmt.Errorf("mallory's session %d: %+v %v", i, st, err))
				}
				return
			}
			r.session, r.epoch = cs.Session, cs.Epoch
			sessions.Add(1)
			if keepAliveOnce {
				var ka wire.KeepAliveResponse
				if st, err := r.try(actx, wire.MethodKeepAlive, &wire.KeepAliveRequest{Prompt: true}, &ka); err != nil || st.Code != wire.CodeOK {
					if actx.Err() == nil {
						fail(fmt.Errorf("mallory's KeepAlive: %+v %v", st, err))
					}
					return
				}
			}
			var open wire.OpenResponse
			if st, err := r.try(actx, wire.MethodOpen, &wire.OpenRequest{Path: name, Flags: wire.OpenRead, Cache: true}, &open); err != nil || st.Code != wire.CodeOK {
				if actx.Err() == nil {
					fail(fmt.Errorf("mallory's open of the file: %+v %v", st, err))
				}
				return
			}
			var read wire.ContentsResponse
			if st, err := r.try(actx, wire.MethodGetContentsAndStat, &wire.HandleRequest{Handle: open.Handle, Cache: true}, &read); err != nil || st.Code != wire.CodeOK {
				if actx.Err() == nil {
					fail(fmt.Errorf("mallory's read of the file: %+v %v", st, err))
				}
				return
			}
			var missing wire.OpenResponse
			if st, err := r.try(actx, wire.MethodOpen, &wire.OpenRequest{Path: dir + "/absent", Flags: wire.OpenRead, CacheMissing: true}, &missing); err != nil || st.Code != wire.CodeOK || !missing.Missing {
				if actx.Err() == nil {
					fail(fmt.Errorf("mallory's open of a missing name: %+v %+v %v", missing, st, err))
				}
				return
			}
			for _, ok := range []bool{open.Cacheable, read.Cacheable, missing.Cacheable} {
				if ok {
					cacheable.Add(1)
				}
			}
			select {
			case <-actx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		stopAttack()
		wg.Wait()
	}()
	// Let the attack get going: a lease's worth of fresh sessions.
	deadline := time.Now().Add(time.Minute)
	for sessions.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("mallory made %d sessions in a minute", sessions.Load())
		}
		select {
		case err := <-attackErr:
			t.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The victim writes the file and creates in the directory, a few
	// times a lease, for three leases. What they wait in all is bounded,
	// not each: a write may meet a cacher that crashed, but the silent
	// sessions must not add a lease each.
	const rounds = 12
	limit := 2 * lease
	tick := time.NewTicker(lease / 4) // pacing, not synchronisation
	defer tick.Stop()
	for i := 1; i <= rounds; i++ {
		start := time.Now()
		if err := hw.SetContents(ctx, []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		file += time.Since(start)
		start = time.Now()
		h, err := writer.Open(ctx, fmt.Sprintf("%s/new%d", dir, i), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		creates += time.Since(start)
		h.Close()
		if file > limit || creates > limit {
			t.Fatalf("after %d rounds the victim's writes waited %v in all and its creates %v, with silent cachers of mallory's "+
				"(%d sessions, %d cacheable answers); want at most about one lease (%v)", i, file.Round(time.Millisecond),
				creates.Round(time.Millisecond), sessions.Load(), cacheable.Load(), lease)
		}
		select {
		case err := <-attackErr:
			t.Fatal(err)
		case <-tick.C:
		}
	}
	bars = c.Server(m).Master().InvalidationStats().Bars
	t.Logf("%d writes waited %v and %d creates %v in all against %d silent sessions (%d cacheable answers to them, %d bars)",
		rounds, file.Round(time.Millisecond), rounds, creates.Round(time.Millisecond), sessions.Load(), cacheable.Load(), bars)

	// The honest cacher saw every write and caches on.
	if err := bobReads(fmt.Sprintf("v%d", rounds))(); err != nil {
		t.Fatal(err)
	}
	expectHit(t, bob, "bob's read after the run", bobReads(fmt.Sprintf("v%d", rounds)))
	return file, creates, bars
}
