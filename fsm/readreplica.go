package fsm

import (
	"fmt"
	"slices"
)

// Read replicas (docs/operations.md, "Read replicas"): members that receive
// the log as Raft non-voters and serve follower reads, which the master
// never promotes, so they never count for a quorum nor become master.
// Their role is replicated, in the member table, so that every master
// (a fail-over's new one included) knows not to promote them.

// CmdReadReplicaPut records members as read replicas: their addresses, as
// MemberPut does, and their role. A command of its own, so a replica of a
// version without read replicas stops at it rather than record a member
// its master would then promote.
const CmdReadReplicaPut CmdType = 30

// ReadReplicaPutArgs: members' addresses are recorded (added or
// replaced), each with the read-replica role. MemberRemove ends the role
// with the membership.
type ReadReplicaPutArgs struct {
	Members []MemberAddrs `msgpack:"mb,omitempty"`
}

// CmdType returns CmdReadReplicaPut.
func (*ReadReplicaPutArgs) CmdType() CmdType { return CmdReadReplicaPut }

func (*ReadReplicaPutArgs) payload() {}

// putReadReplicas applies ReadReplicaPutArgs.
func (t *memberTable) putReadReplicas(p *ReadReplicaPutArgs) {
	for _, m := range p.Members {
		if m.ID == "" {
			continue
		}
		t.put(m)
		if t.readers == nil {
			t.readers = map[string]bool{}
		}
		t.readers[m.ID] = true
	}
}

// readerIDs returns the read replicas' ids in order (nil when none).
func (t *memberTable) readerIDs() []string {
	if len(t.readers) == 0 {
		return nil
	}
	out := make([]string, 0, len(t.readers))
	for id := range t.readers {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// restoreReaders fills the roles from a snapshot image: each a member of
// the table, none twice.
func (t *memberTable) restoreReaders(ids []string) error {
	for _, id := range ids {
		switch {
		case !t.has(id):
			return fmt.Errorf("%w: read replica %q is not in the member table", ErrMalformedSnapshot, id)
		case t.readers[id]:
			return fmt.Errorf("%w: read replica %q appears twice", ErrMalformedSnapshot, id)
		}
		if t.readers == nil {
			t.readers = map[string]bool{}
		}
		t.readers[id] = true
	}
	return nil
}

// ReadReplicas returns the ids of the members with the read-replica role
// (nil when none).
func (v View) ReadReplicas() []string { return v.f.members.readerIDs() }

// IsReadReplica reports whether member id has the read-replica role.
func (v View) IsReadReplica(id string) bool { return v.f.members.readers[id] }
