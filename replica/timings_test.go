package replica

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Timings with only a heartbeat timeout get an election timeout and a
// leader lease raft accepts with it (election >= heartbeat >= lease), and
// the defaults themselves pass raft's checks.
func TestTimingsDefaultsFitTheHeartbeat(t *testing.T) {
	for _, hb := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		got := Timings{HeartbeatTimeout: hb}.withDefaults()
		rc := raft.DefaultConfig()
		rc.LocalID = "1"
		rc.HeartbeatTimeout, rc.ElectionTimeout = got.HeartbeatTimeout, got.ElectionTimeout
		rc.LeaderLeaseTimeout, rc.CommitTimeout = got.LeaderLeaseTimeout, got.CommitTimeout
		if err := raft.ValidateConfig(rc); err != nil {
			t.Errorf("heartbeat %v: timings %+v: %v", hb, got, err)
		}
	}
	if d := DefaultTimings(); d.LeaderLeaseTimeout > d.HeartbeatTimeout || d.ElectionTimeout < d.HeartbeatTimeout {
		t.Errorf("default timings %+v: want election >= heartbeat >= leader lease", d)
	}
}
