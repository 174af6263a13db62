package recipe_test

import (
	"fmt"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// hold is how long a test checks that nobody passed a shut barrier: not
// a synchronisation (the waiters are known to be waiting), only the
// window in which a wrong pass would be seen.
const hold = 300 * time.Millisecond

func noneDone(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s: someone passed (%v)", what, err)
	case <-time.After(hold):
	}
}

func allDone(t *testing.T, done <-chan error, n int, what string) {
	t.Helper()
	for i := range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: only %d of %d passed", what, i, n)
		}
	}
}

// Waiters on a set barrier, each on its own client, stay blocked until it
// is removed, and then all pass; a Wait on a removed barrier passes at
// once.
func TestBarrierHoldsUntilRemoved(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("deploy/gate")
	owner := recipe.NewBarrier(c.Client(t), name)
	if err := owner.Set(ctx); err != nil {
		t.Fatalf("set: %v", err)
	}
	const waiters = 3
	done := make(chan error, waiters)
	for range waiters {
		b := recipe.NewBarrier(c.Client(t), name)
		go func() { done <- b.Wait(ctx) }()
	}
	noneDone(t, done, "while set")
	if err := owner.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	allDone(t, done, waiters, "after remove")
	if err := owner.Wait(ctx); err != nil {
		t.Fatalf("wait on a removed barrier: %v", err)
	}
	if err := owner.Remove(ctx); err != nil {
		t.Fatalf("remove again: %v", err)
	}
}

// A double barrier for three: two members that entered stay blocked (their
// files are there) until the third enters, then all three pass; two that
// leave stay blocked until the third leaves, then all pass, and the
// barrier's directory is empty again for another round.
func TestDoubleBarrierEnterAndLeaveTogether(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	dir := c.Name("jobs/round")
	const n = 3
	var bs []*recipe.DoubleBarrier
	for i := range n {
		bs = append(bs, recipe.NewDoubleBarrier(c.Client(t), dir, fmt.Sprint("w", i), n))
	}
	watcher := c.Client(t)
	entries := func() int {
		h, err := watcher.Open(ctx, dir, client.Read|client.Directory, client.WithoutCache())
		if err != nil {
			return -1
		}
		defer h.Close()
		es, err := h.ReadDir(ctx)
		if err != nil {
			return -1
		}
		return len(es)
	}

	entered := make(chan error, n)
	for _, b := range bs[:n-1] {
		go func() { entered <- b.Enter(ctx) }()
	}
	waitUntil(t, 10*time.Second, "two members' files", func() bool { return entries() == n-1 })
	noneDone(t, entered, "Enter with two of three")
	go func() { entered <- bs[n-1].Enter(ctx) }()
	allDone(t, entered, n, "Enter with three of three")

	left := make(chan error, n)
	for _, b := range bs[:n-1] {
		go func() { left <- b.Leave(ctx) }()
	}
	waitUntil(t, 10*time.Second, "two members gone", func() bool { return entries() == 2 }) // the third and ready
	noneDone(t, left, "Leave with one still in")
	go func() { left <- bs[n-1].Leave(ctx) }()
	allDone(t, left, n, "Leave with all out")
	waitUntil(t, 10*time.Second, "the directory empty", func() bool { return entries() == 0 })
}

// A double-barrier member that dies between Enter and Leave counts as
// left once its session expires: the others' Leave waits for it until
// then, and not forever.
func TestDoubleBarrierDeadMemberCountsAsLeft(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 60*time.Second)
	dir := c.Name("jobs/fragile")
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	bs := []*recipe.DoubleBarrier{
		recipe.NewDoubleBarrier(c.Client(t), dir, "a", 3),
		recipe.NewDoubleBarrier(c.Client(t), dir, "b", 3),
		recipe.NewDoubleBarrier(c.ClientWith(t, cfg), dir, "doomed", 3),
	}
	entered := make(chan error, 3)
	for _, b := range bs {
		go func() { entered <- b.Enter(ctx) }()
	}
	allDone(t, entered, 3, "Enter")
	left := make(chan error, 2)
	for _, b := range bs[:2] {
		go func() { left <- b.Leave(ctx) }()
	}
	noneDone(t, left, "Leave while the doomed member is in")
	cut.Cut()
	allDone(t, left, 2, "Leave after the doomed member's session expired")
}
