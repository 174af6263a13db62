package cell

import (
	"context"
	"time"
)

// HandOverTimeout bounds the leadership transfer a master makes when it
// shuts down cleanly (Close): past it the replica shuts down anyway, and
// the cell elects a new master after its election timeout as after a
// crash.
const HandOverTimeout = 5 * time.Second

// handOver transfers Raft leadership to another replica before a clean
// shutdown, when this replica leads and has anyone to hand over to, so
// that a planned restart of the master costs clients a round trip of
// elections instead of a follower's heartbeat timeout. It logs the new
// leader, or why there is none.
func (s *Server) handOver() {
	if len(s.cfg.Peers) < 2 || !s.rep.IsLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), HandOverTimeout)
	defer cancel()
	start := time.Now()
	id, err := s.rep.TransferLeadership(ctx)
	if err != nil {
		s.log.Warn("shutting down: leadership transfer failed; the cell elects a new master after its election timeout",
			"err", err)
		return
	}
	s.log.Info("shutting down: leadership handed over", "new_leader", id, "took", time.Since(start).Round(time.Millisecond))
}
