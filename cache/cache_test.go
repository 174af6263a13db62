package cache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	kContents uint8 = iota
	kStat
	kList
)

func bytesSize(b []byte) int64 { return int64(len(b)) }

func key(name string, kind uint8) Key { return Key{Name: name, Kind: kind} }

// put stores v with a fresh token and fails the test if it is refused.
func put[V any](t *testing.T, c *Cache[V], k Key, v V) {
	t.Helper()
	if !c.PutIf(k, v, c.Token(k.Name)) {
		t.Fatalf("PutIf(%v) with a fresh token refused", k)
	}
}

func mustGet[V comparable](t *testing.T, c *Cache[V], k Key, want V) {
	t.Helper()
	got, ok := c.Get(k)
	if !ok || got != want {
		t.Fatalf("Get(%v) = %v, %v; want %v, true", k, got, ok, want)
	}
}

func mustMiss[V any](t *testing.T, c *Cache[V], k Key) {
	t.Helper()
	if got, ok := c.Get(k); ok {
		t.Fatalf("Get(%v) = %v, true; want a miss", k, got)
	}
}

func TestGetHitMiss(t *testing.T) {
	c := New(Config{}, bytesSize)
	k := key("/ls/c/a", kContents)
	if _, ok := c.Get(k); ok {
		t.Fatal("empty cache hit")
	}
	put(t, c, k, []byte("hello"))
	got, ok := c.Get(k)
	if !ok || string(got) != "hello" {
		t.Fatalf("Get = %q, %v", got, ok)
	}
	put(t, c, k, []byte("bye"))
	got, _ = c.Get(k)
	if string(got) != "bye" {
		t.Fatalf("after replace Get = %q", got)
	}
	st := c.Stats()
	if st.Hits != 2 || st.Misses != 1 || st.Entries != 1 || st.Bytes != int64(len(k.Name)+3) {
		t.Fatalf("stats %+v", st)
	}
}

func TestPutIfRefusedAfterInvalidate(t *testing.T) {
	c := New[int](Config{}, nil)
	k := key("/ls/c/a", kContents)
	tok := c.Token(k.Name)
	c.Invalidate(k.Name) // the name has no entries: its stamp must still count
	if c.PutIf(k, 1, tok) {
		t.Fatal("PutIf accepted a token taken before Invalidate of an uncached name")
	}
	mustMiss(t, c, k)

	put(t, c, k, 2)
	tok = c.Token(k.Name)
	c.Invalidate(k.Name)
	mustMiss(t, c, k)
	if c.PutIf(k, 3, tok) {
		t.Fatal("PutIf accepted a token taken before Invalidate")
	}
	// A token taken after the invalidation is fine.
	if !c.PutIf(k, 4, c.Token(k.Name)) {
		t.Fatal("PutIf refused a token taken after Invalidate")
	}
	mustGet(t, c, k, 4)
}

func TestInvalidateOtherNameKeepsToken(t *testing.T) {
	c := New[int](Config{}, nil)
	a, b := key("/ls/c/a", kContents), key("/ls/c/b", kContents)
	put(t, c, b, 1)
	tok := c.Token(a.Name)
	c.Invalidate(b.Name)
	if !c.PutIf(a, 1, tok) {
		t.Fatal("Invalidate of another name made the token unacceptable")
	}
	mustGet(t, c, a, 1)
	mustMiss(t, c, b)
}

func TestPutIfRefusedAfterPurge(t *testing.T) {
	c := New[int](Config{}, nil)
	k := key("/ls/c/a", kStat)
	put(t, c, k, 1)
	put(t, c, key("/ls/c/b", kStat), 1)
	tok := c.Token(k.Name)
	c.Purge()
	mustMiss(t, c, k)
	mustMiss(t, c, key("/ls/c/b", kStat))
	if c.PutIf(k, 2, tok) {
		t.Fatal("PutIf accepted a token taken before Purge")
	}
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("after Purge stats %+v", st)
	}
	put(t, c, k, 3)
	mustGet(t, c, k, 3)
}

func TestPutIfRefusedWhileDisabledAndEnableAgain(t *testing.T) {
	c := New[int](Config{}, nil)
	k := key("/ls/c/a", kContents)
	put(t, c, k, 1)
	before := c.Token(k.Name)
	c.Disable()
	if c.Enabled() {
		t.Fatal("Enabled after Disable")
	}
	mustMiss(t, c, k)
	c.Disable() // disabling again is allowed (and purges again)
	mustMiss(t, c, k)
	during := c.Token(k.Name)
	if c.PutIf(k, 2, during) {
		t.Fatal("PutIf accepted while disabled")
	}
	c.Enable()
	if !c.Enabled() {
		t.Fatal("not Enabled after Enable")
	}
	mustMiss(t, c, k) // Enable does not bring data back
	if c.PutIf(k, 3, before) {
		t.Fatal("PutIf accepted a token taken before Disable")
	}
	if c.PutIf(k, 4, during) {
		t.Fatal("PutIf accepted a token taken while disabled")
	}
	after := c.Token(k.Name)
	c.Enable() // no-op on an enabled cache: must not spoil tokens
	if !c.PutIf(k, 5, after) {
		t.Fatal("PutIf refused a token taken after Enable")
	}
	mustGet(t, c, k, 5)
}

func TestTokenMismatchAndZeroRefused(t *testing.T) {
	c := New[int](Config{}, nil)
	if c.PutIf(key("/ls/c/a", 0), 1, c.Token("/ls/c/b")) {
		t.Fatal("PutIf accepted a token of another name")
	}
	if c.PutIf(key("", 0), 1, Token{}) {
		t.Fatal("PutIf accepted the zero Token")
	}
}

func TestKindsIndependent(t *testing.T) {
	c := New(Config{}, func(s string) int64 { return int64(len(s)) })
	n := "/ls/c/dir"
	put(t, c, key(n, kContents), "contents")
	put(t, c, key(n, kStat), "stat")
	mustMiss(t, c, key(n, kList))
	put(t, c, key(n, kList), "a b c")
	mustGet(t, c, key(n, kContents), "contents")
	mustGet(t, c, key(n, kStat), "stat")
	mustGet(t, c, key(n, kList), "a b c")
	put(t, c, key(n, 255), "kind 255") // the whole Kind range works
	mustGet(t, c, key(n, 255), "kind 255")
	put(t, c, key("/ls/c/other", kStat), "other")

	// Replacing one kind leaves the others alone.
	put(t, c, key(n, kStat), "stat2")
	mustGet(t, c, key(n, kContents), "contents")

	// Invalidate drops every kind of the name, and only that name.
	c.Invalidate(n)
	for _, k := range []uint8{kContents, kStat, kList, 255} {
		mustMiss(t, c, key(n, k))
	}
	mustGet(t, c, key("/ls/c/other", kStat), "other")
	if st := c.Stats(); st.Entries != 1 || st.Bytes != int64(len("/ls/c/other")+len("other")) {
		t.Fatalf("stats %+v", st)
	}
}

// Negative entries (keys with a Child) are stored and found under their
// directory's name, each on its own, counted apart from other hits and misses,
// charged for both names' bytes, and all dropped by an Invalidate of the
// directory; an invalidation of the child's own name leaves them alone.
func TestNegativeEntries(t *testing.T) {
	c := New(Config{MaxEntries: 3}, func(s string) int64 { return int64(len(s)) })
	dir := "/ls/c/d"
	ka, kb := Key{Name: dir, Kind: 9, Child: "a"}, Key{Name: dir, Kind: 9, Child: "b"}
	put(t, c, ka, "")
	put(t, c, kb, "")
	put(t, c, key(dir, kList), "x y")
	mustMiss(t, c, Key{Name: dir, Kind: 9, Child: "c"})
	mustGet(t, c, ka, "")
	mustGet(t, c, key(dir, kList), "x y")
	if st := c.Stats(); st.Hits != 1 || st.Misses != 0 || st.NegativeHits != 1 || st.NegativeMisses != 1 || st.Entries != 3 ||
		st.Bytes != int64(3*len(dir)+2+len("x y")) {
		t.Fatalf("stats %+v", st)
	}
	c.Invalidate(dir + "/a") // the child's own name: not where its absence lives
	mustGet(t, c, ka, "")
	// A token taken before an Invalidate of the directory is refused for
	// a negative entry too.
	tok := c.Token(dir)
	c.Invalidate(dir)
	mustMiss(t, c, ka)
	mustMiss(t, c, kb)
	mustMiss(t, c, key(dir, kList))
	if c.PutIf(Key{Name: dir, Kind: 9, Child: "c"}, "", tok) {
		t.Fatal("negative entry stored with a token older than the directory's invalidation")
	}
	if c.PutIf(Key{Name: dir, Kind: 9, Child: "c"}, "", c.Token(dir+"/c")) {
		t.Fatal("negative entry stored with a token of the child's name")
	}
	// Bounded like every entry: the least recently used goes.
	for _, ch := range []string{"p", "q", "r", "s"} {
		put(t, c, Key{Name: dir, Kind: 9, Child: ch}, "")
	}
	mustMiss(t, c, Key{Name: dir, Kind: 9, Child: "p"})
	if st := c.Stats(); st.Entries != 3 || st.Evictions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEvictionByCountLRU(t *testing.T) {
	c := New[int](Config{MaxEntries: 3}, nil)
	a, b, d, e := key("a", 0), key("b", 0), key("d", 0), key("e", 0)
	put(t, c, a, 1)
	put(t, c, b, 2)
	put(t, c, d, 3)
	mustGet(t, c, a, 1) // a is now most recent; b is least recent
	put(t, c, e, 4)
	mustMiss(t, c, b)
	mustGet(t, c, a, 1)
	mustGet(t, c, d, 3)
	mustGet(t, c, e, 4)
	// Replacing refreshes recency too: order now (old->new) a, d, e; put a.
	put(t, c, a, 10)
	put(t, c, b, 2)
	mustMiss(t, c, d)
	mustGet(t, c, a, 10)
	if st := c.Stats(); st.Evictions != 2 || st.Entries != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEvictionByBytesLRU(t *testing.T) {
	// Each entry costs len(name)=1 plus its value's length.
	c := New(Config{MaxBytes: 30}, bytesSize)
	val := func(n int) []byte { return make([]byte, n) }
	put(t, c, key("a", 0), val(9)) // 10
	put(t, c, key("b", 0), val(9)) // 20
	put(t, c, key("c", 0), val(9)) // 30
	if st := c.Stats(); st.Bytes != 30 || st.Evictions != 0 {
		t.Fatalf("stats %+v", st)
	}
	c.Get(key("a", 0))              // b is least recent
	put(t, c, key("d", 0), val(14)) // 45: evict b (35), then c (25)
	mustMiss(t, c, key("b", 0))
	mustMiss(t, c, key("c", 0))
	if _, ok := c.Get(key("a", 0)); !ok {
		t.Fatal("a evicted")
	}
	if st := c.Stats(); st.Bytes != 25 || st.Entries != 2 || st.Evictions != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Growing an entry in place evicts others, never itself.
	put(t, c, key("d", 0), val(29)) // 30 alone
	mustMiss(t, c, key("a", 0))
	if st := c.Stats(); st.Bytes != 30 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A value that cannot fit alone is refused and evicts nothing.
	if c.PutIf(key("e", 0), val(30), c.Token("e")) {
		t.Fatal("oversized value stored")
	}
	if _, ok := c.Get(key("d", 0)); !ok {
		t.Fatal("oversized put evicted d")
	}
}

func TestNegativeSizeCountsZero(t *testing.T) {
	c := New(Config{MaxBytes: 10}, func(int) int64 { return -100 })
	put(t, c, key("ab", 0), 1)
	if st := c.Stats(); st.Bytes != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStats(t *testing.T) {
	c := New[int](Config{MaxEntries: 1}, nil)
	c.Get(key("x", 0))             // miss
	put(t, c, key("x", 0), 1)      //
	c.Get(key("x", 0))             // hit
	c.Get(key("x", 0))             // hit
	put(t, c, key("y", 0), 2)      // evicts x
	c.Invalidate("y")              // drops y
	c.Invalidate("nothing-cached") //
	c.Disable()                    //
	c.Get(key("y", 0))             // miss (disabled)
	want := Stats{Hits: 2, Misses: 2, Invalidations: 2, Evictions: 1}
	if got := c.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// TestTrackedStampsBounded checks that invalidating many names keeps the
// per-name state bounded and that forgetting a stamp stays conservative.
func TestTrackedStampsBounded(t *testing.T) {
	const max = 4
	c := New[int](Config{MaxTracked: max}, nil)
	early := c.Token("/victim")
	c.Invalidate("/victim") // tracked, then forgotten below
	mid := c.Token("/other")
	for i := range 1000 {
		c.Invalidate(fmt.Sprintf("/n%d", i))
		if len(c.names) > max || c.tracked > max {
			t.Fatalf("after %d invalidations: %d names, %d tracked", i+1, len(c.names), c.tracked)
		}
	}
	if c.PutIf(key("/victim", 0), 1, early) {
		t.Fatal("forgetting a stamp let a stale token through")
	}
	// Conservative refusal: /other was never invalidated, but its token is
	// older than forgotten stamps.
	if c.PutIf(key("/other", 0), 1, mid) {
		t.Fatal("token older than the floor accepted")
	}
	put(t, c, key("/victim", 0), 2)
	mustGet(t, c, key("/victim", 0), 2)

	// Names with entries keep their record after their stamp is forgotten,
	// and lose it when their last entry goes.
	c.Invalidate("/victim")
	put(t, c, key("/victim", 0), 3)
	for i := range max {
		c.Invalidate(fmt.Sprintf("/m%d", i))
	}
	if r := c.names["/victim"]; r == nil || r.stamp != 0 || r.n != 1 {
		t.Fatalf("/victim record %+v", r)
	}
	mustGet(t, c, key("/victim", 0), 3)
	c.Invalidate("/victim")
	for i := range max {
		c.Invalidate(fmt.Sprintf("/m%d", i))
	}
	if _, ok := c.names["/victim"]; ok {
		t.Fatal("record of an empty, untracked name kept")
	}

	// The default bound applies when MaxTracked is zero; negative means 1.
	if d := New[int](Config{}, nil); d.cfg.MaxTracked != DefaultMaxTracked {
		t.Fatalf("default MaxTracked %d", d.cfg.MaxTracked)
	}
	if d := New[int](Config{MaxTracked: -5}, nil); d.cfg.MaxTracked != 1 {
		t.Fatalf("negative MaxTracked became %d", d.cfg.MaxTracked)
	}
}

// TestModel runs random operations against an exact reference model (an
// unbounded log of events per name and an LRU list) and checks that PutIf
// never accepts a token the model calls stale, accepts every fresh one when
// no stamp has been forgotten, and that Get and eviction agree with the
// model.
func TestModel(t *testing.T) {
	for _, maxTracked := range []int{1, 3, 1 << 20} {
		t.Run(fmt.Sprint("tracked=", maxTracked), func(t *testing.T) {
			testModel(t, maxTracked)
		})
	}
}

func testModel(t *testing.T, maxTracked int) {
	rng := rand.New(rand.NewPCG(1, uint64(maxTracked)))
	const maxEntries = 6
	c := New[int](Config{MaxEntries: maxEntries, MaxTracked: maxTracked}, nil)
	names := []string{"a", "b", "c", "d", "e"}

	type tok struct {
		t    Token
		name string
		at   int // model time when taken
	}
	var (
		now      int
		lastInv  = map[string]int{} // model time of last Invalidate per name
		lastAll  = -1               // model time of last Purge/Disable/Enable
		enabled  = true
		lru      []Key // least recent first
		vals     = map[Key]int{}
		toks     []tok
		accepted int
	)
	touch := func(k Key) {
		for i, x := range lru {
			if x == k {
				lru = append(lru[:i], lru[i+1:]...)
				break
			}
		}
		lru = append(lru, k)
	}
	drop := func(k Key) {
		for i, x := range lru {
			if x == k {
				lru = append(lru[:i], lru[i+1:]...)
				break
			}
		}
		delete(vals, k)
	}
	for step := range 20000 {
		now++
		name := names[rng.IntN(len(names))]
		// Negative entries (a Child) live under their directory's name.
		k := Key{Name: name, Kind: uint8(rng.IntN(3)), Child: []string{"", "", "x", "y"}[rng.IntN(4)]}
		switch op := rng.IntN(100); {
		case op < 30:
			toks = append(toks, tok{c.Token(name), name, now})
			if len(toks) > 20 {
				toks = toks[1:]
			}
		case op < 60 && len(toks) > 0:
			i := rng.IntN(len(toks))
			tk := toks[i]
			k.Name = tk.name
			li, seen := lastInv[tk.name]
			fresh := enabled && tk.at > lastAll && (!seen || tk.at > li)
			got := c.PutIf(k, step, tk.t)
			if got && !fresh {
				t.Fatalf("step %d: PutIf accepted a stale token", step)
			}
			if !got && fresh && maxTracked >= len(names) {
				t.Fatalf("step %d: PutIf refused a fresh token", step)
			}
			if got {
				accepted++
				vals[k] = step
				touch(k)
				if len(lru) > maxEntries {
					drop(lru[0])
				}
			}
		case op < 80:
			v, ok := c.Get(k)
			want, wok := vals[k]
			if ok != wok || v != want {
				t.Fatalf("step %d: Get(%v) = %d, %v; model %d, %v", step, k, v, ok, want, wok)
			}
			if ok {
				touch(k)
			}
		case op < 95:
			c.Invalidate(name)
			lastInv[name] = now
			for k := range vals {
				if k.Name == name {
					drop(k)
				}
			}
		case op < 97:
			c.Purge()
			lastAll = now
			clear(vals)
			lru = lru[:0]
		case op < 99:
			c.Disable()
			enabled = false
			lastAll = now
			clear(vals)
			lru = lru[:0]
		default:
			c.Enable()
			if !enabled {
				lastAll = now
			}
			enabled = true
		}
		if st := c.Stats(); st.Entries != int64(len(vals)) {
			t.Fatalf("step %d: Entries %d, model %d", step, st.Entries, len(vals))
		}
	}
	if accepted == 0 {
		t.Fatal("model test never stored anything")
	}
}

// TestConcurrentNoStaleReads is the linearizability-style stress test. Each
// name has a server version. A writer bumps the version, calls Invalidate
// (the master waits for the client's acknowledgement) and only then
// "completes" the write. A reader takes a Token, reads the current version
// (the RPC) and offers it with PutIf. A Get must never return a version
// older than the newest write completed when the Get started. Purges,
// Disable/Enable, eviction and forgotten stamps run at the same time.
func TestConcurrentNoStaleReads(t *testing.T) {
	const (
		nNames   = 8
		writers  = 4
		readers  = 8
		writesPW = 3000
		readsPR  = 20000
	)
	names := make([]string, nNames)
	for i := range names {
		names[i] = fmt.Sprintf("/ls/c/n%d", i)
	}
	var server, done [nNames]atomic.Uint64
	c := New[uint64](Config{MaxEntries: nNames, MaxTracked: 3}, func(uint64) int64 { return 8 })

	var stored, hits atomic.Uint64
	var stop atomic.Bool
	var wg, chaos sync.WaitGroup
	errc := make(chan error, readers)

	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range writesPW {
				i := rng.IntN(nNames)
				v := server[i].Add(1)  // the write is applied at the master
				c.Invalidate(names[i]) // every cacher acknowledged
				for {                  // the write completes
					d := done[i].Load()
					if d >= v || done[i].CompareAndSwap(d, v) {
						break
					}
				}
				runtime.Gosched()
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for range readsPR {
				i := rng.IntN(nNames)
				k := Key{Name: names[i], Kind: uint8(rng.IntN(2))}
				floor := done[i].Load()
				if v, ok := c.Get(k); ok {
					hits.Add(1)
					if v < floor {
						errc <- fmt.Errorf("Get(%v) = version %d after version %d completed", k, v, floor)
						return
					}
					continue
				}
				tok := c.Token(k.Name)
				v := server[i].Load()
				if rng.IntN(4) == 0 {
					runtime.Gosched() // a slow reply
				}
				if c.PutIf(k, v, tok) {
					stored.Add(1)
				}
			}
		})
	}
	chaos.Go(func() {
		rng := rand.New(rand.NewPCG(9, 9))
		for !stop.Load() {
			switch rng.IntN(50) {
			case 0:
				c.Purge()
			case 1:
				c.Disable()
				runtime.Gosched()
				c.Enable()
			default:
				_ = c.Stats()
				runtime.Gosched()
			}
		}
	})
	wg.Wait()
	stop.Store(true)
	chaos.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	st := c.Stats()
	t.Logf("stored %d, hits %d, stats %+v", stored.Load(), hits.Load(), st)
	if stored.Load() == 0 || hits.Load() == 0 {
		t.Fatalf("stress test vacuous: stored %d, hits %d", stored.Load(), hits.Load())
	}
	if st.Entries > nNames || st.Bytes != st.Entries*(int64(len(names[0]))+8) {
		t.Fatalf("final stats %+v", st)
	}
}

func TestGetHitAllocationFree(t *testing.T) {
	c := New(Config{}, bytesSize)
	k := key("/ls/c/a/b", kContents)
	put(t, c, k, []byte("data"))
	put(t, c, key("/ls/c/x", kStat), []byte("other"))
	miss := key("/ls/c/none", kStat)
	if n := testing.AllocsPerRun(1000, func() {
		c.Get(k)
		c.Get(miss)
		c.Token(k.Name)
	}); n != 0 {
		t.Fatalf("Get/Token allocate %.1f times per run", n)
	}
}

func BenchmarkGetHit(b *testing.B) {
	c := New(Config{MaxEntries: 1024}, bytesSize)
	keys := make([]Key, 256)
	for i := range keys {
		keys[i] = key(fmt.Sprintf("/ls/cell/dir/file%d", i), kContents)
		c.PutIf(keys[i], []byte("contents"), c.Token(keys[i].Name))
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok := c.Get(keys[i&255]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkGetHitParallel(b *testing.B) {
	c := New(Config{MaxEntries: 1024}, bytesSize)
	keys := make([]Key, 256)
	for i := range keys {
		keys[i] = key(fmt.Sprintf("/ls/cell/dir/file%d", i), kContents)
		c.PutIf(keys[i], []byte("contents"), c.Token(keys[i].Name))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.Get(keys[i&255]); !ok {
				b.Error("miss")
				return
			}
			i++
		}
	})
}

func TestFresh(t *testing.T) {
	c := New[int](Config{}, nil)
	tok := c.Token("a")
	if !c.Fresh(tok) || c.Fresh(Token{}) {
		t.Fatal("a new token is fresh, the zero token never")
	}
	c.Invalidate("b")
	if !c.Fresh(tok) {
		t.Fatal("another name's invalidation spoiled the token")
	}
	c.Invalidate("a")
	if c.Fresh(tok) {
		t.Fatal("token fresh after its name was invalidated")
	}
	tok = c.Token("a")
	c.Purge()
	if c.Fresh(tok) {
		t.Fatal("token fresh after a purge")
	}
}
