package recipe_test

import (
	"slices"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

func memberNames(ms []recipe.Member) []string {
	var names []string
	for _, m := range ms {
		names = append(names, m.Name+"="+string(m.Data))
	}
	return names
}

// waitGroup reads a WatchGroup stream until it reports want.
func waitGroup(t *testing.T, ch <-chan recipe.GroupChange, want []string, what string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	var got []string
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("%s: WatchGroup ended", what)
			}
			if v.Err != nil {
				t.Fatalf("%s: %v", what, v.Err)
			}
			if got = memberNames(v.Members); slices.Equal(got, want) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: watcher saw %v, not %v", what, got, want)
		}
	}
}

// Members and WatchGroup follow a group: joins appear with their data, a
// member that leaves (Close) and a member whose client is closed both
// disappear, from the listing and for the watcher, which started before
// anyone joined. A second Join under a taken name fails with ErrExists.
func TestGroupMembersComeAndGo(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	dir := c.Name("svc/web/members")
	watcher := c.Client(t)
	changes := recipe.WatchGroup(ctx, watcher, dir)
	waitGroup(t, changes, nil, "before anyone joined")

	a, b := c.Client(t), c.Client(t)
	ma, err := recipe.Join(ctx, a, dir, "a", []byte("10.0.0.1:80"))
	if err != nil {
		t.Fatalf("a joins: %v", err)
	}
	if _, err := recipe.Join(ctx, b, dir, "b", []byte("10.0.0.2:80")); err != nil {
		t.Fatalf("b joins: %v", err)
	}
	waitGroup(t, changes, []string{"a=10.0.0.1:80", "b=10.0.0.2:80"}, "both joined")
	if ms, err := recipe.Members(ctx, watcher, dir); err != nil || !slices.Equal(memberNames(ms), []string{"a=10.0.0.1:80", "b=10.0.0.2:80"}) {
		t.Fatalf("Members = %v, %v", memberNames(ms), err)
	}
	if _, err := recipe.Join(ctx, b, dir, "a", nil); !errorsIs(err, client.ErrExists) {
		t.Fatalf("joining as a taken name: %v, want ErrExists", err)
	}

	if err := b.Close(); err != nil { // b's process goes away
		t.Fatalf("close b: %v", err)
	}
	waitGroup(t, changes, []string{"a=10.0.0.1:80"}, "b's client closed")
	if err := ma.Close(); err != nil {
		t.Fatalf("a leaves: %v", err)
	}
	waitGroup(t, changes, nil, "a left")
	waitUntil(t, 10*time.Second, "Members empty", func() bool {
		ms, err := recipe.Members(ctx, watcher, dir)
		return err == nil && len(ms) == 0
	})
}

// A member whose process stops answering (its connections cut: a crash
// or a partition) leaves the group when its session expires, without
// anyone closing anything, and the watcher sees it go.
func TestGroupDeadMemberLeavesWhenItsSessionExpires(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 60*time.Second)
	dir := c.Name("svc/db/members")
	changes := recipe.WatchGroup(ctx, c.Client(t), dir)
	waitGroup(t, changes, nil, "before anyone joined")

	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout = cut.Dial, 2*time.Second, 2*time.Second
	doomed := c.ClientWith(t, cfg)
	if _, err := recipe.Join(ctx, doomed, dir, "replica-2", []byte("up")); err != nil {
		t.Fatalf("join: %v", err)
	}
	waitGroup(t, changes, []string{"replica-2=up"}, "joined")
	cut.Cut()
	waitGroup(t, changes, nil, "the cut member's session expired")
}
