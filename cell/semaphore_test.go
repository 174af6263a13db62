package cell_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

// Semaphores and multi-locks on a real five-replica cell
// (docs/flows.md#semaphores-and-multi-locks).

// permitStore is a resource server fenced by the semaphore holders'
// sequencers, checked at the cell: a holder enters with its sequencer,
// and the store re-checks every holder inside at that moment, dropping
// those whose permit is gone. More than limit valid sequencers at once
// would be more holders than permits.
type permitStore struct {
	check func(seq []byte) bool
	mu    sync.Mutex
	in    map[uint64][]byte // generation -> sequencer, of the holders inside
	most  int
	bad   error
}

func (s *permitStore) enter(seq []byte, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gen, other := range s.in {
		if !s.check(other) {
			delete(s.in, gen) // lost its permit (its session expired)
		}
	}
	if !s.check(seq) {
		return // already stale: fenced out, as it should be
	}
	f, _ := sequencer.Parse(seq)
	s.in[f.Generation] = seq
	s.most = max(s.most, len(s.in))
	if len(s.in) > limit && s.bad == nil {
		s.bad = fmt.Errorf("%d valid permits at once of a semaphore of %d", len(s.in), limit)
	}
}

func (s *permitStore) exit(seq []byte) {
	f, _ := sequencer.Parse(seq)
	s.mu.Lock()
	delete(s.in, f.Generation)
	s.mu.Unlock()
}

func TestSemaphoreOnCell(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 120*time.Second)

	t.Run("NeverMoreThanNAcrossMasterStop", func(t *testing.T) {
		const limit, contenders, rounds = 3, 8, 6
		checker := c.Client(t)
		store := &permitStore{in: map[uint64][]byte{}, check: func(seq []byte) bool {
			ok, err := checker.CheckSequencer(ctx, seq)
			return err == nil && ok
		}}
		var grants atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, contenders)
		for i := range contenders {
			cl := c.Client(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := cl.OpenSemaphore(ctx, c.Name("pool"), limit)
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				for range rounds {
					if err := s.Acquire(ctx); err != nil {
						errs <- fmt.Errorf("contender %d: %w", i, err)
						return
					}
					seq, err := s.GetSequencer(ctx)
					if err != nil {
						errs <- err
						return
					}
					grants.Add(1)
					store.enter(seq, limit)
					for range 3 { // the work under the permit: the cell's own check of it
						if ok, err := cl.CheckSequencer(ctx, seq); err != nil || !ok {
							errs <- fmt.Errorf("contender %d: its permit's sequencer is not valid while held: %v %v", i, ok, err)
							return
						}
					}
					store.exit(seq)
					if err := s.Release(ctx); err != nil {
						errs <- fmt.Errorf("contender %d release: %w", i, err)
						return
					}
				}
			}()
		}
		pollUntil(t, 30*time.Second, "a third of the grants", func() bool { return grants.Load() >= contenders*rounds/3 })
		old := c.StopMaster()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if m := c.WaitForMaster(10 * time.Second); m == old {
			t.Fatal("the master did not change")
		}
		c.Start(old)
		if store.bad != nil {
			t.Fatal(store.bad)
		}
		t.Logf("%d grants, at most %d holders inside the store at once (limit %d)", grants.Load(), store.most, limit)
		if store.most < 2 {
			t.Fatalf("at most %d holder at once: the test proves nothing about the limit", store.most)
		}
		if grants.Load() != contenders*rounds {
			t.Fatalf("%d grants, want %d", grants.Load(), contenders*rounds)
		}
	})

	t.Run("FIFO", func(t *testing.T) {
		name := c.Name("fifo-sem")
		var holders []*client.Semaphore
		for range 2 {
			s, err := c.Client(t).OpenSemaphore(ctx, name, 2)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := s.TryAcquire(ctx); !ok || err != nil {
				t.Fatalf("holder: %v %v", ok, err)
			}
			holders = append(holders, s)
		}
		type waiter struct {
			s   *client.Semaphore
			got chan error
		}
		var ws []waiter
		for i := range 4 {
			s, err := c.Client(t).OpenSemaphore(ctx, name, 2)
			if err != nil {
				t.Fatal(err)
			}
			w := waiter{s, make(chan error, 1)}
			go func() { w.got <- s.Acquire(ctx) }()
			pollUntil(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
				_, _, waiting, err := holders[0].Holders(ctx)
				return err == nil && waiting == i+1
			})
			ws = append(ws, w)
		}
		granted := func(i int) {
			t.Helper()
			select {
			case err := <-ws[i].got:
				if err != nil {
					t.Fatalf("waiter %d: %v", i, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d was not granted in its turn", i)
			}
			for j := i + 1; j < len(ws); j++ {
				select {
				case <-ws[j].got:
					t.Fatalf("waiter %d was granted before waiter %d's turn came", j, i+1)
				default:
				}
			}
		}
		// Each permit given back goes to the earliest waiter.
		must(t, holders[0].Release(ctx))
		granted(0)
		must(t, holders[1].Release(ctx))
		granted(1)
		must(t, ws[1].s.Release(ctx))
		granted(2)
		must(t, ws[0].s.Release(ctx))
		granted(3)
	})

	t.Run("LockDelayOfAnExpiredHolder", func(t *testing.T) {
		const delay = 3 * time.Second
		name := c.Name("delayed-sem")
		cut := fixtures.NewCutter()
		cfgA := c.ClientConfig()
		cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
		a := c.ClientWith(t, cfgA)
		sa, err := a.OpenSemaphore(ctx, name, 1, client.WithLockDelay(delay))
		must(t, err)
		if ok, err := sa.TryAcquire(ctx); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		sb, err := c.Client(t).OpenSemaphore(ctx, name, 1)
		must(t, err)
		type grant struct {
			at  time.Time
			err error
		}
		got := make(chan grant, 1)
		go func() {
			err := sb.Acquire(ctx)
			got <- grant{time.Now(), err}
		}()
		pollUntil(t, 10*time.Second, "b queued", func() bool { _, _, w, err := sb.Holders(ctx); return err == nil && w == 1 })
		cut.Cut()
		var until time.Time
		pollUntil(t, 20*time.Second, "a's permit held back after its session expired", func() bool {
			st, err := sb.Handle().GetStat(ctx)
			if err == nil && st.LockHolders == 0 && !st.LockDelayUntil.IsZero() {
				until = st.LockDelayUntil
				return true
			}
			return err == nil && st.LockHolders == 1 && st.Holders[0].Session != a.Session()
		})
		var g grant
		select {
		case g = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("b never got the permit after a's lock-delay")
		}
		must(t, g.err)
		if until.IsZero() {
			t.Fatal("b was granted a's permit with no lock-delay seen")
		}
		if g.at.Before(until) {
			t.Fatalf("b got the permit %v before a's lock-delay ended", until.Sub(g.at))
		}
		t.Logf("b granted %v after the lock-delay's end", g.at.Sub(until).Round(time.Millisecond))
		// A clean release frees a permit at once: no delay.
		must(t, sb.Release(ctx))
		if ok, err := sb.TryAcquire(ctx); !ok || err != nil {
			t.Fatalf("after a clean release: %v %v", ok, err)
		}
	})

	t.Run("MultiLockOppositeOrders", func(t *testing.T) {
		const rounds = 25
		a, b := c.Name("acct-a"), c.Name("acct-b")
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, names := range [][]string{{a, b}, {b, a}} {
			cl := c.Client(t)
			watcher := c.Client(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var hs []*client.Handle
				for _, n := range names {
					h, err := cl.Open(ctx, n, client.Read|client.Write|client.Create)
					if err != nil {
						errs <- err
						return
					}
					defer h.Close()
					hs = append(hs, h)
				}
				wa, err := watcher.Open(ctx, a, client.Read)
				if err != nil {
					errs <- err
					return
				}
				wb, err := watcher.Open(ctx, b, client.Read)
				if err != nil {
					errs <- err
					return
				}
				for r := range rounds {
					if err := cl.AcquireAll(ctx, hs...); err != nil {
						errs <- fmt.Errorf("caller %d round %d: %w", i, r, err)
						return
					}
					// Both locks are this caller's, and neither is anyone else's.
					sa, err1 := wa.GetStat(ctx)
					sb, err2 := wb.GetStat(ctx)
					if err := errors.Join(err1, err2); err != nil {
						errs <- err
						return
					}
					if sa.LockHolders != 1 || sb.LockHolders != 1 || sa.Holders[0].Session != cl.Session() || sb.Holders[0].Session != cl.Session() {
						errs <- fmt.Errorf("caller %d round %d holds a part: %+v / %+v", i, r, sa.Holders, sb.Holders)
						return
					}
					if err := cl.ReleaseAll(ctx, hs...); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the two callers deadlocked")
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
