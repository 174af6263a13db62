package wire

// Membership methods change or list the cell's Raft configuration through
// the master. They are the admin's alone and carry no session: an
// operator replacing a dead machine may have no session to spare, and a
// joining replica has none. A change is not de-duplicated by request id;
// it is idempotent instead (adding a member that is already there with
// the same addresses, or removing one that is gone, succeeds and changes
// nothing).
const (
	// MethodReplicaAdd adds a member as a non-voter; the master promotes
	// it to voter once its log has caught up with the master's.
	MethodReplicaAdd Method = 20
	// MethodReplicaRemove removes a member (voter or not).
	MethodReplicaRemove Method = 21
	// MethodReplicaList lists the members as the master sees them.
	MethodReplicaList Method = 22
)

// Suffrage values of ReplicaStatus.Suffrage.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
)

// ReplicaAddRequest asks the master to add a member: ID is its Raft id,
// ClientAddr where clients reach it, RaftAddr where the other members
// reach its Raft port. The new member must be running already with an
// empty data folder and must not bootstrap a cell of its own.
type ReplicaAddRequest struct {
	ID         string `msgpack:"i"`
	ClientAddr string `msgpack:"c"`
	RaftAddr   string `msgpack:"r"`
	// ReadReplica adds the member as a read replica: a non-voter the
	// master never promotes, which serves follower reads
	// (MethodFollowerRead). A master that predates it adds a voter-to-be:
	// the reply's ReplicaStatus.Role then lacks RoleReadReplica, which the
	// client library reports as an error.
	ReadReplica bool `msgpack:"rr,omitempty"`
}

// RoleReadReplica is ReplicaStatus.Role of a read replica.
const RoleReadReplica = "read-replica"

// ReplicaRemoveRequest asks the master to remove the member ID.
type ReplicaRemoveRequest struct {
	ID string `msgpack:"i"`
}

// ReplicaListRequest asks the master for the members.
type ReplicaListRequest struct{}

// ReplicaListResponse is the membership after a change (or as listed):
// every member of the Raft configuration with its addresses, suffrage and
// health, and the cell's configured size (the voter count the refusal
// rules protect: no change may leave fewer voters than a majority of it).
type ReplicaListResponse struct {
	Replicas       []ReplicaStatus `msgpack:"r"`
	ConfiguredSize int             `msgpack:"n"`
	// Index is the Raft index of the configuration listed.
	Index uint64 `msgpack:"x,omitempty"`
}

// ClientAddrs returns the client addresses of the members listed that
// have one known: what a client adopts as the replicas it tries.
func ClientAddrs(rs []ReplicaStatus) []string {
	var out []string
	for _, s := range rs {
		if s.ClientAddr != "" {
			out = append(out, s.ClientAddr)
		}
	}
	return out
}
