package selfcheck_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/selfcheck"
)

// Run in this process (under the race detector) against a real one-replica
// cell: linearizable, both sessions and every kind of call in the history,
// progress reported, the run's folder gone. An interrupted run still
// checks what it recorded and deletes its files.
func TestRunAgainstACell(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	var progress []selfcheck.Progress
	res, err := selfcheck.Run(context.Background(), selfcheck.Config{Client: c.ClientConfig(), Duration: 2 * time.Second,
		Progress: func(p selfcheck.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != selfcheck.Linearizable || res.Unknown != 0 || res.Incomplete != "" || res.CleanupError != "" {
		t.Fatalf("%+v", res)
	}
	kinds := map[selfcheck.Kind]bool{}
	sessions := map[int]bool{}
	for _, o := range res.History {
		kinds[o.Kind] = true
		sessions[o.Session] = true
	}
	if len(kinds) != 6 || len(sessions) != 2 || res.CacheHits == 0 {
		t.Fatalf("kinds %v, sessions %v, %d cache hits", kinds, sessions, res.CacheHits)
	}
	if len(progress) == 0 || progress[len(progress)-1].Ops != len(res.History) {
		t.Fatalf("progress %+v, %d operations", progress, len(res.History))
	}
	gone := func(prefix string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Client(t).Open(ctx, prefix, client.Read); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s after the run: %v, want not found", prefix, err)
		}
	}
	gone(res.Prefix)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err = selfcheck.Run(ctx, selfcheck.Config{Client: c.ClientConfig(), Duration: time.Minute,
		Progress: func(p selfcheck.Progress) {
			if p.Ops > 20 {
				cancel()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Incomplete == "" || res.Verdict != selfcheck.Linearizable || res.Duration > 30*time.Second {
		t.Fatalf("interrupted run: %+v", res)
	}
	gone(res.Prefix)
}
