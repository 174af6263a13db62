package recipe_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// nextLeader waits for the next value of an Observe stream.
func nextLeader(t *testing.T, ch <-chan recipe.LeaderChange, within time.Duration, what string) recipe.LeaderChange {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: Observe ended", what)
		}
		return v
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
	}
	return recipe.LeaderChange{}
}

func describe(v recipe.LeaderChange) string {
	if v.NoLeader {
		return fmt.Sprintf("no leader (lock gen %d, err %v)", v.Generation, v.Err)
	}
	return fmt.Sprintf("%q (lock gen %d)", v.Leader, v.Generation)
}

// Observe follows an election: no leader before anyone campaigns, alpha,
// then no leader while alpha's failed session's lock-delay runs, then
// beta once it has taken the lock and written its identity (with a larger
// lock generation), no leader again when beta resigns; and it ends with
// its context, and with its Client.
func TestObserveFollowsTheElection(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("observed")
	const delay = 3 * time.Second
	observer := c.Client(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := recipe.Observe(octx, observer, name)
	if v := nextLeader(t, changes, 10*time.Second, "before the election"); !v.NoLeader || v.Err != nil {
		t.Fatalf("before anyone campaigned: %s", describe(v))
	}

	cut := fixtures.NewCutter()
	cfgA := c.ClientConfig()
	cfgA.Dialer, cfgA.GracePeriod, cfgA.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	a := c.ClientWith(t, cfgA)
	if _, err := recipe.Campaign(ctx, a, name, []byte("alpha"), client.WithLockDelay(delay)); err != nil {
		t.Fatalf("alpha campaigns: %v", err)
	}
	var alpha recipe.LeaderChange
	for alpha.NoLeader || alpha.Leader == nil {
		// The file's creation and alpha's lock may show first as no leader.
		if alpha = nextLeader(t, changes, 10*time.Second, "alpha leads"); !alpha.NoLeader && string(alpha.Leader) != "alpha" {
			t.Fatalf("while alpha leads: %s", describe(alpha))
		}
	}

	b := c.Client(t)
	won := make(chan *client.Handle, 1)
	go func() {
		h, err := recipe.Campaign(ctx, b, name, []byte("beta"), client.WithLockDelay(delay))
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("beta campaigns: %v", err)
			}
			return
		}
		won <- h
	}()
	cutAt := time.Now()
	cut.Cut()
	gap := nextLeader(t, changes, 20*time.Second, "alpha's session expired")
	if !gap.NoLeader || gap.Err != nil || gap.Generation != alpha.Generation {
		t.Fatalf("after alpha was cut off: %s, want no leader at alpha's lock gen %d", describe(gap), alpha.Generation)
	}
	select {
	case <-won:
		t.Fatal("beta led before Observe reported that nobody leads during alpha's lock-delay")
	default:
	}
	var beta recipe.LeaderChange
	for beta.NoLeader || beta.Leader == nil {
		if beta = nextLeader(t, changes, 20*time.Second, "beta leads"); !beta.NoLeader && string(beta.Leader) != "beta" {
			t.Fatalf("after alpha: %s", describe(beta))
		}
	}
	if beta.Generation <= alpha.Generation {
		t.Fatalf("beta's lock gen %d is not past alpha's %d", beta.Generation, alpha.Generation)
	}
	if since := beta.Time.Sub(cutAt); since < delay {
		t.Fatalf("Observe saw beta lead %v after alpha was cut, inside alpha's lock-delay of %v", since, delay)
	}
	bh := <-won
	resigned := time.Now()
	if err := bh.Close(); err != nil { // beta resigns
		t.Fatal(err)
	}
	if v := nextLeader(t, changes, 10*time.Second, "beta resigned"); !v.NoLeader || v.Err != nil {
		t.Fatalf("after beta resigned: %s", describe(v))
	}
	t.Logf("Observe saw beta's resignation %v after its Close began", time.Since(resigned).Round(time.Millisecond))

	stop()
	waitUntil(t, 10*time.Second, "Observe ended with its context", func() bool {
		select {
		case _, ok := <-changes:
			return !ok
		default:
			return false
		}
	})

	// It ends with its Client too, with no value: the Client's Close
	// closes the watches Observe waits on.
	other := c.Client(t)
	closing := recipe.Observe(ctx, other, name)
	nextLeader(t, closing, 10*time.Second, "a second Observe")
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case v, ok := <-closing:
		if ok {
			t.Fatalf("after the Client closed: %s, want the channel closed", describe(v))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not end when its Client was closed")
	}
}
