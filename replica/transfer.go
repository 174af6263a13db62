package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/fsm"
)

// ErrNotLeading is returned by TransferLeadership when this replica is
// not the Raft leader, so there is nothing to hand over.
var ErrNotLeading = errors.New("replica: not the leader")

// TransferLeadership hands Raft leadership to the most up-to-date other
// voter (raft's LeadershipTransfer: it catches that voter up and tells it
// to start an election at once) and returns the id of the new leader once
// this replica has heard from it. A replica about to shut down calls it
// so that the cell elects a new leader in a round trip instead of after a
// follower's heartbeat timeout. While the transfer runs this replica
// refuses new proposals (Apply answers ErrUnknownOutcome, which clients
// retry). It fails with ErrNotLeading when this replica does not lead,
// and with the transfer's error or ctx's when no new leader was heard of
// in time; the new leader may then still emerge.
func (r *Replica) TransferLeadership(ctx context.Context) (string, error) {
	if !r.IsLeader() {
		return "", ErrNotLeading
	}
	f := r.raft.LeadershipTransfer()
	// raft answers the future within two election timeouts (or when it
	// shuts down); the channel is buffered so this goroutine ends then
	// even if ctx has ended first.
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		if err != nil {
			return "", fmt.Errorf("replica %s: leadership transfer: %w", r.cfg.ID, err)
		}
	case <-ctx.Done():
		return "", fmt.Errorf("replica %s: leadership transfer: %w", r.cfg.ID, ctx.Err())
	case <-r.done:
		return "", fsm.ErrClosed
	}
	// This replica has stepped down; it learns the new leader from the
	// new leader's first heartbeat. A target that cannot win (too few
	// voters left) is not waited for beyond two election timeouts.
	wait := time.NewTimer(2 * r.cfg.Timings.withDefaults().ElectionTimeout)
	defer wait.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if id, _ := r.Leader(); id != "" && id != r.cfg.ID {
			return id, nil
		}
		select {
		case <-tick.C:
		case <-wait.C:
			return "", fmt.Errorf("replica %s: stepped down, but no new leader was heard of within two election timeouts", r.cfg.ID)
		case <-ctx.Done():
			return "", fmt.Errorf("replica %s: stepped down, but no new leader heard of: %w", r.cfg.ID, ctx.Err())
		case <-r.done:
			return "", fsm.ErrClosed
		}
	}
}
