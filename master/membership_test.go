package master

import (
	"context"
	"sync"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// progressOps is the membership operations of a master whose follower
// late answers from the answerAt-th look at the progress on (never when
// 0), as a master's followers do only once it has taken over and sent
// them a heartbeat.
type progressOps struct {
	membershipOps // only the methods below are used
	mu            sync.Mutex
	heard         map[string]time.Time
	late          string
	answerAt      int
	asked         int
}

func (o *progressOps) ID() string                      { return "1" }
func (o *progressOps) HeartbeatTimeout() time.Duration { return 100 * time.Millisecond }
func (o *progressOps) Progress() map[string]fsm.PeerProgress {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.asked++
	if o.answerAt != 0 && o.asked >= o.answerAt {
		o.heard[o.late] = time.Now()
	}
	out := map[string]fsm.PeerProgress{}
	for id, at := range o.heard {
		out[id] = fsm.PeerProgress{LastContact: at}
	}
	return out
}

func threeVoters() fsm.Configuration {
	return fsm.Configuration{Servers: []fsm.Server{{ID: "1", Voter: true}, {ID: "2", Voter: true}, {ID: "3", Voter: true}}}
}

// A master that has just taken over has not heard from every member yet:
// a removal waits up to a health window for them instead of refusing at
// once (removing the old master hands leadership over and asks the new
// one straight away); a member that stays silent is still refused.
func TestRemovalWaitsAHealthWindowForMembersNotYetHeard(t *testing.T) {
	m := newTestMaster(t)
	// Removing 3 leaves 1 and 2; 2 answers only from the third look.
	ops := &progressOps{heard: map[string]time.Time{}, late: "2", answerAt: 3}
	ctx := context.Background()
	if err := m.parts.mp.checkVotersPatiently(ctx, ops, threeVoters(), "3"); err != nil {
		t.Fatalf("removal with a member heard from within the health window: %v", err)
	}
	// Silent for good: refused with the typed error, after the window.
	ops = &progressOps{heard: map[string]time.Time{}}
	start := time.Now()
	err := m.parts.mp.checkVotersPatiently(ctx, ops, threeVoters(), "3")
	if codeOf(err) != wire.CodeBadRequest {
		t.Fatalf("removal leaving a silent member a quorum's half: %v; want a bad-request refusal", err)
	}
	if waited := time.Since(start); waited < healthyWithin(ops) {
		t.Fatalf("refused after %v, before the health window %v ended", waited, healthyWithin(ops))
	}
	// The promoter does not wait: it looks again on its next round.
	if err := m.parts.mp.checkVoters(ops, threeVoters(), "3", false); codeOf(err) != wire.CodeBadRequest {
		t.Fatalf("checkVoters: %v; want a refusal at once", err)
	}
}
