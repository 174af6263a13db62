package fsm

import (
	"errors"
	"time"
)

// What the node reports of its consensus: its Raft configuration, what
// the leader knows of its followers, its Raft state, and the sentinel
// errors of proposing and changing membership. The node (package replica)
// produces them; they are defined here, in the package both the node and
// the master import, so the master can name them without reaching the node.

// ErrConfigurationChanged means a membership change named a configuration
// index that is no longer the latest: another change committed first.
// Nothing changed; read the configuration again and decide again.
var ErrConfigurationChanged = errors.New("replica: the Raft configuration changed since it was read")

// Server is one member of a Raft configuration.
type Server struct {
	ID       string
	RaftAddr string
	// Voter is false for a non-voter: it receives the log but neither
	// votes nor counts towards a quorum.
	Voter bool
}

// Configuration is the latest Raft configuration this replica knows (it
// may not be committed yet), with the log index it was written at.
type Configuration struct {
	Servers []Server // in id order
	Index   uint64
}

// Voters counts the voting members.
func (c Configuration) Voters() int {
	n := 0
	for _, s := range c.Servers {
		if s.Voter {
			n++
		}
	}
	return n
}

// Find returns the member id, if present.
func (c Configuration) Find(id string) (Server, bool) {
	for _, s := range c.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return Server{}, false
}

// PeerProgress is what the leader last learnt of one follower.
type PeerProgress struct {
	// Term is the leader term the answers were received in; older
	// records say nothing about the current leader's followers.
	Term uint64
	// LastContact is when the follower last answered an AppendEntries or
	// InstallSnapshot successfully (a heartbeat counts).
	LastContact time.Time
	// Match is the highest log index known to be in the follower's log
	// and equal to the leader's: the end of the last successful append,
	// or the index of an installed snapshot.
	Match uint64
	// LastLog is the last log index the follower reported, matching or
	// not.
	LastLog uint64
}

// Status is a point-in-time view of the Raft node.
type Status struct {
	State        string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
}
