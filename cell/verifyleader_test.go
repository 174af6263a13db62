package cell_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lockcell/fixtures"
)

// A master proves it leads only by a round of contact that began after it
// asked: with every follower's answers held back by a round trip, no
// VerifyLeader returns sooner than that round trip after it was called.
// An answer to a request sent before the call (always in flight here) must
// not vouch for the master: a leader frozen or cut off since that request
// may have been deposed meanwhile, and its reads would be stale.
func TestVerifyLeaderNeedsContactAfterTheCall(t *testing.T) {
	// Raft timings long beside the held answers, so that a loaded machine
	// does not also depose the master while the answers are slow.
	tm := fixtures.TestTimings()
	tm.HeartbeatTimeout, tm.ElectionTimeout, tm.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	c, link := fixtures.NewLinkedCell(t, 3, fixtures.Options{Timings: tm})
	m := c.WaitForMaster(30 * time.Second)
	const delay = 100 * time.Millisecond
	for i := range 3 {
		if i != m {
			link(fmt.Sprint(i + 1)).SetReplyDelay(delay)
		}
	}
	rep := c.Server(m).Replica()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Let the held answers fill the pipe: every follower has a request in
	// flight whose answer is late, as a check begun now would find.
	if err := rep.VerifyLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		start := time.Now()
		if err := rep.VerifyLeader(ctx); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if took := time.Since(start); took < delay {
			t.Fatalf("check %d returned after %v, less than the %v round trip the followers' answers take: an answer to a request sent before the check vouched for the master", i, took, delay)
		}
	}
}
