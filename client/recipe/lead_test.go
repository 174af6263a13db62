package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// term is one call of a candidate's leader function.
type term struct {
	id    string
	gen   uint64 // the sequencer's lock generation
	ctx   context.Context
	start time.Time
}

// candidate runs Lead in the background with a leader function the test
// steers: each call reports itself on terms and then waits for the test to
// tell it what to return (quit), or for its leader context to end (it then
// returns the context's cause, as a leader that stops at once does).
type candidate struct {
	id     string
	terms  chan term
	quit   chan error
	done   chan error // what Lead returned
	cancel context.CancelFunc
}

// leading counts the leader functions running at once across every
// candidate of a test: more than one is two leaders.
func runCandidate(t *testing.T, ctx context.Context, c *client.Client, name, id string, leading *atomic.Int32, opts ...recipe.LeadOption) *candidate {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	k := &candidate{id: id, terms: make(chan term, 16), quit: make(chan error, 1), done: make(chan error, 1), cancel: cancel}
	t.Cleanup(func() {
		cancel()
		<-k.done
	})
	go func() {
		k.done <- recipe.Lead(cctx, c, name, []byte(id), func(lctx context.Context) error {
			if n := leading.Add(1); n != 1 {
				t.Errorf("%s's leader function runs while %d other leader functions run", id, n-1)
			}
			defer leading.Add(-1)
			seq, ok := recipe.SequencerFrom(lctx)
			if !ok || seq.Generation() == 0 {
				t.Errorf("%s: no sequencer in the leader context (%v)", id, seq)
			}
			k.terms <- term{id: id, gen: seq.Generation(), ctx: lctx, start: time.Now()}
			select {
			case err := <-k.quit:
				return err
			case <-lctx.Done():
				return context.Cause(lctx)
			}
		}, opts...)
	}()
	return k
}

// nextTerm waits for the next call of any of the candidates' functions.
func nextTerm(t *testing.T, within time.Duration, what string, ks ...*candidate) term {
	t.Helper()
	timeout := time.After(within)
	for {
		for _, k := range ks {
			select {
			case tm := <-k.terms:
				return tm
			default:
			}
		}
		select {
		case <-timeout:
			t.Fatalf("%s: no candidate led within %v", what, within)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// noTerm fails if k's function was called.
func noTerm(t *testing.T, k *candidate, what string) {
	t.Helper()
	select {
	case tm := <-k.terms:
		t.Fatalf("%s: %s led (generation %d)", what, k.id, tm.gen)
	default:
	}
}

// leadResult waits for k's Lead to return.
func leadResult(t *testing.T, k *candidate, within time.Duration) error {
	t.Helper()
	select {
	case err := <-k.done:
		k.done <- err // for the clean-up
		return err
	case <-time.After(within):
		t.Fatalf("%s's Lead did not return within %v", k.id, within)
	}
	return nil
}

func pick(tm term, a, b *candidate) (leader, other *candidate) {
	if tm.id == a.id {
		return a, b
	}
	return b, a
}

// Lead hands leadership on as etcd and Curator users expect: one of two
// candidates leads; when its function returns nil Lead resigns and returns
// nil, and the other leads at once with a later generation; when its
// context is cancelled it resigns promptly and returns ctx's error; an
// error of the function is returned after resigning; with Requeue a
// leader whose function returned nil campaigns again and leads after the
// other. Relative names work as on every client call.
func TestLeadHandsOver(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 2 * time.Second})
	ctx := testCtx(t, 90*time.Second)
	observer := c.Client(t)
	leaderIs := func(name, want string) {
		t.Helper()
		if who, err := recipe.Leader(ctx, observer, name); err != nil || string(who) != want {
			t.Fatalf("Leader(%s) = %q, %v; want %q", name, who, err, want)
		}
	}
	noLeader := func(name string) {
		t.Helper()
		if who, err := recipe.Leader(ctx, observer, name); !errors.Is(err, recipe.ErrNoLeader) {
			t.Fatalf("Leader(%s) = %q, %v; want ErrNoLeader at once after a resignation", name, who, err)
		}
	}

	t.Run("ReturnAndCancel", func(t *testing.T) {
		var leading atomic.Int32
		a := runCandidate(t, ctx, c.Client(t), "rc", "alpha", &leading) // relative: /ls/<cell>/rc
		b := runCandidate(t, ctx, c.Client(t), c.Name("rc"), "beta", &leading)
		first := nextTerm(t, 20*time.Second, "first leader", a, b)
		l, o := pick(first, a, b)
		leaderIs(c.Name("rc"), l.id)
		leaderIs("rc", l.id)
		noTerm(t, o, "while "+l.id+" leads")

		l.quit <- nil // the function gives up leadership
		if err := leadResult(t, l, 10*time.Second); err != nil {
			t.Fatalf("%s's Lead after its function returned nil: %v, want nil", l.id, err)
		}
		second := nextTerm(t, 10*time.Second, "the other takes over", o)
		if second.gen <= first.gen {
			t.Fatalf("%s leads at generation %d, not past %s's %d", o.id, second.gen, l.id, first.gen)
		}
		t.Logf("%s took over %v after %s's function returned", o.id, time.Since(first.start).Round(time.Millisecond), l.id)
		leaderIs("rc", o.id)

		o.cancel()
		if err := leadResult(t, o, 10*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s's Lead after its context was cancelled: %v, want context.Canceled", o.id, err)
		}
		if cause := context.Cause(second.ctx); !errors.Is(cause, context.Canceled) {
			t.Fatalf("leader context's cause after cancel: %v", cause)
		}
		noLeader("rc")
	})

	t.Run("FunctionError", func(t *testing.T) {
		var leading atomic.Int32
		a := runCandidate(t, ctx, c.Client(t), "fe", "alpha", &leading)
		nextTerm(t, 20*time.Second, "alpha leads", a)
		boom := errors.New("boom")
		a.quit <- fmt.Errorf("the job failed: %w", boom)
		if err := leadResult(t, a, 10*time.Second); !errors.Is(err, boom) {
			t.Fatalf("Lead after its function failed: %v, want the function's error", err)
		}
		noLeader("fe")
	})

	t.Run("Requeue", func(t *testing.T) {
		var leading atomic.Int32
		a := runCandidate(t, ctx, c.Client(t), "rq", "alpha", &leading, recipe.Requeue())
		b := runCandidate(t, ctx, c.Client(t), "rq", "beta", &leading, recipe.Requeue())
		first := nextTerm(t, 20*time.Second, "first leader", a, b)
		l, o := pick(first, a, b)
		// Wait until the other queues behind, so that the turn is its.
		waitUntil(t, 10*time.Second, "the other queued", func() bool {
			h, err := observer.Open(ctx, "rq", client.Read)
			if err != nil {
				return false
			}
			defer h.Close()
			st, err := h.GetStat(ctx)
			return err == nil && st.LockWaiters == 1
		})
		l.quit <- nil
		second := nextTerm(t, 10*time.Second, "the other's turn", l, o)
		if second.id != o.id {
			t.Fatalf("%s led again before %s, which was queued", second.id, o.id)
		}
		o.quit <- nil
		third := nextTerm(t, 10*time.Second, "the first's turn again", l, o)
		if third.id != l.id || third.gen <= second.gen {
			t.Fatalf("third leadership: %s at generation %d; want %s after generation %d", third.id, third.gen, l.id, second.gen)
		}
		select {
		case err := <-l.done:
			t.Fatalf("%s's Lead returned with Requeue: %v", l.id, err)
		default:
		}
	})
}

// A jeopardy that the session survives does not cost the leader its
// place: the leader's client is cut off from the cell until its lease runs
// out (its leader context ends with ErrJeopardy), then healed; Lead finds
// the lock still held at the same generation and calls the function again,
// and the other candidate, queued all along, never leads meanwhile. But a
// lock lost during the blip (the admin broke it while the leader was cut
// off) is not taken for the same leadership: with a candidate queued, the
// candidate leads and the deposed leader queues behind it; with none, the
// lock is free when the leader comes back, and it leads again only as a
// new leadership, at a new generation, with its identity written anew.
func TestLeadThroughAJeopardyBlip(t *testing.T) {
	const lease = 3 * time.Second // the master's slack after a lease is min(lease/4, 1 s): the heal's margin
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := testCtx(t, 120*time.Second)
	observer := c.Client(t) // and the admin: a plain cell lets anyone in as the admin
	waiters := func(name string, n int) {
		t.Helper()
		waitUntil(t, 10*time.Second, fmt.Sprintf("%d candidates queued", n), func() bool {
			h, err := observer.Open(ctx, name, client.Read)
			if err != nil {
				return false
			}
			defer h.Close()
			st, err := h.GetStat(ctx)
			return err == nil && st.LockWaiters == n
		})
	}
	// blip cuts the leader off until its leader context ends in
	// jeopardy, runs during (the leader still cut off), then heals.
	blip := func(cut *fixtures.Cutter, leader term, during func()) time.Time {
		t.Helper()
		cutAt := time.Now()
		cut.Cut()
		defer cut.Heal()
		select {
		case <-leader.ctx.Done():
		case <-time.After(lease + 5*time.Second):
			t.Fatalf("the leader context still lives %v after the cut", time.Since(cutAt))
		}
		if cause := context.Cause(leader.ctx); !errors.Is(cause, client.ErrJeopardy) {
			t.Fatalf("the leader context ended with %v, want ErrJeopardy", cause)
		}
		t.Logf("the leader context ended %v after the cut", time.Since(cutAt).Round(time.Millisecond))
		if during != nil {
			during()
		}
		cut.Heal()
		return time.Now()
	}
	leaderIs := func(name, want string) {
		t.Helper()
		if who, err := recipe.Leader(ctx, observer, name); err != nil || string(who) != want {
			t.Fatalf("Leader: %q, %v; want %s", who, err, want)
		}
	}

	t.Run("Survives", func(t *testing.T) {
		name := c.Name("blip")
		var leading atomic.Int32
		cut := fixtures.NewCutter()
		cfg := c.ClientConfig()
		cfg.Dialer = cut.Dial
		a := runCandidate(t, ctx, c.ClientWith(t, cfg), name, "alpha", &leading, recipe.WithOpenOptions(client.WithLockDelay(10*time.Second)))
		first := nextTerm(t, 20*time.Second, "alpha leads", a)
		b := runCandidate(t, ctx, c.Client(t), name, "beta", &leading)
		waiters(name, 1)

		healedAt := blip(cut, first, nil)
		again := nextTerm(t, 20*time.Second, "alpha leads again after the heal", a, b)
		if again.id != "alpha" || again.gen != first.gen {
			t.Fatalf("after the blip %s leads at generation %d; want alpha still, at generation %d", again.id, again.gen, first.gen)
		}
		t.Logf("alpha leads again %v after the heal, at the same generation", again.start.Sub(healedAt).Round(time.Millisecond))
		noTerm(t, b, "during the blip")
		leaderIs(name, "alpha")

		a.cancel() // alpha resigns: beta's turn, with no lock-delay
		if err := leadResult(t, a, 10*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("alpha's Lead: %v", err)
		}
		if tm := nextTerm(t, 10*time.Second, "beta after alpha resigned", b); tm.gen <= first.gen {
			t.Fatalf("beta leads at generation %d, not past alpha's %d", tm.gen, first.gen)
		}
	})

	t.Run("LostMeanwhile", func(t *testing.T) {
		for _, queued := range []bool{true, false} {
			name := c.Name(fmt.Sprintf("lost-%v", queued))
			var leading atomic.Int32
			cut := fixtures.NewCutter()
			cfg := c.ClientConfig()
			cfg.Dialer = cut.Dial
			a := runCandidate(t, ctx, c.ClientWith(t, cfg), name, "alpha", &leading)
			first := nextTerm(t, 20*time.Second, "alpha leads", a)
			var b *candidate
			if queued {
				b = runCandidate(t, ctx, c.Client(t), name, "beta", &leading)
				waiters(name, 1)
			}
			blip(cut, first, func() {
				if _, err := lcadmin.New(observer).BreakLock(ctx, name, "test: depose alpha while it is cut off"); err != nil {
					t.Fatal(err)
				}
			})
			if !queued {
				again := nextTerm(t, 20*time.Second, "alpha leads anew", a)
				if again.gen <= first.gen {
					t.Fatalf("alpha leads again at generation %d after its lock was broken; want a new leadership past %d", again.gen, first.gen)
				}
				leaderIs(name, "alpha") // its identity written after the new grant
				continue
			}
			next := nextTerm(t, 20*time.Second, "beta after the break", a, b)
			if next.id != "beta" || next.gen <= first.gen {
				t.Fatalf("after the break %s leads at generation %d; want beta past %d", next.id, next.gen, first.gen)
			}
			waiters(name, 1) // alpha queued again behind beta
			noTerm(t, a, "while beta leads")
			b.quit <- nil
			if tm := nextTerm(t, 10*time.Second, "alpha after beta resigned", a); tm.gen <= next.gen {
				t.Fatalf("alpha leads at generation %d, not past beta's %d", tm.gen, next.gen)
			}
		}
	})
}

// A lock that is lost while the session lives ends the leader context and
// Lead campaigns again: the admin breaks the leader's lock, the queued
// candidate leads, and the deposed one leads again after it. A session
// that expires ends Lead with the session's error: the Client (which does
// not renew its session) is of no further use, and the other candidate
// leads no sooner than the lock-delay after the leader's context ended.
func TestLeadAfterALostLock(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 90*time.Second)
	breaker := lcadmin.New(c.Client(t)) // a plain cell lets anyone in as the admin

	t.Run("Broken", func(t *testing.T) {
		var leading atomic.Int32
		name := c.Name("broken")
		a := runCandidate(t, ctx, c.Client(t), name, "alpha", &leading)
		first := nextTerm(t, 20*time.Second, "alpha leads", a)
		b := runCandidate(t, ctx, c.Client(t), name, "beta", &leading)
		if _, err := breaker.BreakLock(ctx, name, "test: depose alpha"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-first.ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("alpha's leader context lives on after its lock was broken")
		}
		if cause := context.Cause(first.ctx); !errors.Is(cause, client.ErrLockBroken) {
			t.Fatalf("alpha's leader context ended with %v, want ErrLockBroken", cause)
		}
		// beta may have been queued or not when the break came: either
		// way the next leader has a later generation.
		next := nextTerm(t, 10*time.Second, "a leader after the break", a, b)
		if next.gen <= first.gen {
			t.Fatalf("%s leads at generation %d after the break, not past %d", next.id, next.gen, first.gen)
		}
		l, o := pick(next, a, b)
		l.quit <- nil
		if tm := nextTerm(t, 10*time.Second, "the other after "+l.id+" resigned", o); tm.gen <= next.gen {
			t.Fatalf("%s leads at generation %d, not past %d", o.id, tm.gen, next.gen)
		}
		if o == a {
			t.Log("alpha campaigned again after its lock was broken and led after beta")
		}
	})

	t.Run("SessionExpired", func(t *testing.T) {
		var leading atomic.Int32
		name := c.Name("expired")
		const delay = 2 * time.Second
		cut := fixtures.NewCutter()
		cfg := c.ClientConfig()
		cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, time.Second, time.Second
		a := runCandidate(t, ctx, c.ClientWith(t, cfg), name, "alpha", &leading, recipe.WithOpenOptions(client.WithLockDelay(delay)))
		first := nextTerm(t, 20*time.Second, "alpha leads", a)
		b := runCandidate(t, ctx, c.Client(t), name, "beta", &leading)
		lostAt := make(chan time.Time, 1)
		context.AfterFunc(first.ctx, func() { lostAt <- time.Now() })
		cut.Cut()
		defer cut.Heal()
		err := leadResult(t, a, 20*time.Second)
		if !errors.Is(err, client.ErrSessionExpired) {
			t.Fatalf("alpha's Lead after its session expired: %v, want ErrSessionExpired", err)
		}
		var lost time.Time
		select {
		case lost = <-lostAt:
		default:
			t.Fatal("Lead returned while alpha's leader context lives")
		}
		tm := nextTerm(t, 20*time.Second, "beta after alpha's session expired", b)
		if tm.gen <= first.gen {
			t.Fatalf("beta leads at generation %d, not past alpha's %d", tm.gen, first.gen)
		}
		// alpha's leader context ended before the master could expire
		// its session, and the lock-delay runs from the expiry.
		if gap := tm.start.Sub(lost); gap < delay {
			t.Fatalf("beta led %v after alpha's leader context ended, inside the lock-delay of %v", gap, delay)
		}
		t.Logf("beta led %v after alpha's leader context ended (lock-delay %v)", tm.start.Sub(lost).Round(time.Millisecond), delay)
	})
}
