package cell_test

import (
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// When the leader's session fails (its connection cut, never released),
// the next candidate leads no sooner than the leader's lock-delay after
// that: Campaign's file outlives the failed session, so the lock-delay
// stays with it. Meanwhile Leader reports no leader, and the lock-delay
// shows in the Stat.
func TestCampaignKeepsLockDelayAfterLeaderFails(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := ctxT(t, 60*time.Second)
	name := c.Name("leader")
	const delay = 3 * time.Second
	cut := fixtures.NewCutter()
	cfgA := c.ClientConfig()
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	if _, err := recipe.Campaign(ctx, a, name, []byte("alpha"), client.WithLockDelay(delay)); err != nil {
		t.Fatalf("alpha campaigns: %v", err)
	}
	b := c.Client(t)
	won := make(chan time.Time, 1)
	go func() {
		if _, err := recipe.Campaign(ctx, b, name, []byte("beta"), client.WithLockDelay(delay)); err != nil {
			if ctx.Err() == nil {
				t.Errorf("beta campaigns: %v", err)
			}
			return
		}
		won <- time.Now()
	}()
	observer := c.Client(t)
	oh := mustOpen(t, ctx, observer, name, client.Read)
	pollUntil(t, 10*time.Second, "beta queued", func() bool { s, _ := oh.GetStat(ctx); return s.LockWaiters == 1 })
	if leader, err := recipe.Leader(ctx, observer, name); err != nil || string(leader) != "alpha" {
		t.Fatalf("leader before the cut: %q, %v", leader, err)
	}

	cutAt := time.Now()
	cut.Cut()
	// alpha's session expires: the lock is free, under lock-delay, and
	// nobody leads.
	var st client.Stat
	pollUntil(t, 20*time.Second, "alpha's lock freed by its expiry", func() bool {
		select {
		case at := <-won:
			t.Fatalf("beta led %v after alpha's session was cut, before alpha's lock-delay of %v", at.Sub(cutAt), delay)
		default:
		}
		var err error
		if st, err = oh.GetStat(ctx); err != nil {
			t.Fatalf("observer's stat after the cut: %v (the election's file died with alpha's session, and its lock-delay with it)", err)
		}
		return st.LockHolders == 0
	})
	if st.LockDelayUntil.Before(cutAt.Add(delay)) {
		t.Fatalf("lock freed by a failed session with lock-delay until %v, want at least %v (cut + delay)", st.LockDelayUntil, cutAt.Add(delay))
	}
	if leader, err := recipe.Leader(ctx, observer, name); !errors.Is(err, recipe.ErrNoLeader) {
		t.Fatalf("Leader during the lock-delay: %q, %v; want ErrNoLeader", leader, err)
	}
	var at time.Time
	select {
	case at = <-won:
	case <-ctx.Done():
		t.Fatal("beta never led")
	}
	if at.Before(st.LockDelayUntil) {
		t.Fatalf("beta led at %v, before the lock-delay ended at %v", at, st.LockDelayUntil)
	}
	if leader, err := recipe.Leader(ctx, observer, name); err != nil || string(leader) != "beta" {
		t.Fatalf("leader after the hand-off: %q, %v", leader, err)
	}
	t.Logf("beta led %v after the cut (lease %v, lock-delay %v)", at.Sub(cutAt), time.Second, delay)
}

// Leader reports a leader only while a candidate holds the lock and has
// written its identity: not for a missing file, not after the leader
// resigned (its identity stays in the file), and not while a new holder
// has yet to write its own.
func TestLeaderNeedsAHolder(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := ctxT(t, 30*time.Second)
	name := c.Name("leader")
	cl, observer := c.Client(t), c.Client(t)
	if _, err := recipe.Leader(ctx, observer, name); !errors.Is(err, recipe.ErrNoLeader) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Leader of a missing election: %v; want ErrNoLeader and ErrNotFound", err)
	}
	h, err := recipe.Campaign(ctx, cl, name, []byte("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if leader, err := recipe.Leader(ctx, observer, name); err != nil || string(leader) != "alpha" {
		t.Fatalf("leader: %q, %v", leader, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leader, err := recipe.Leader(ctx, observer, name); !errors.Is(err, recipe.ErrNoLeader) {
		t.Fatalf("Leader after the leader resigned: %q, %v; want ErrNoLeader", leader, err)
	}
	// A new holder that has not written its identity yet: the contents
	// still name alpha, who no longer leads.
	nh := mustOpen(t, ctx, c.Client(t), name, client.Read|client.Write)
	if ok, err := nh.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("new holder: %v %v", ok, err)
	}
	if leader, err := recipe.Leader(ctx, observer, name); !errors.Is(err, recipe.ErrNoLeader) {
		t.Fatalf("Leader before the new holder wrote its identity: %q, %v; want ErrNoLeader", leader, err)
	}
	if err := nh.SetContents(ctx, []byte("gamma")); err != nil {
		t.Fatal(err)
	}
	if leader, err := recipe.Leader(ctx, observer, name); err != nil || string(leader) != "gamma" {
		t.Fatalf("leader: %q, %v", leader, err)
	}
}
