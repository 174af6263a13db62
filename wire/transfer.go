package wire

// MethodReplicaTransferLeadership asks the master to hand its leadership
// to another voter: the admin's alone, session-less like the other
// membership methods. The master answers once it has stepped down and
// heard of its successor; the caller then finds the new master as after
// any fail-over (the answer names it).
const MethodReplicaTransferLeadership Method = 26

func init() {
	// Here rather than in messages.go's table, so that this method's
	// wiring lives in one file.
	methodNames[MethodReplicaTransferLeadership] = "ReplicaTransferLeadership"
}

// ReplicaTransferLeadershipRequest names the voter to hand leadership to;
// an empty ID lets the master pick the most up-to-date other voter.
//
// From, when set, names the master the caller means to move leadership
// away from, and makes the call safe to retry: a master other than From,
// asked to hand over to itself or to anyone, answers at once that the
// hand-over is done and changes nothing. (The old master's connection
// may close under the call as it steps down; the client's retry then
// lands on the new master.)
type ReplicaTransferLeadershipRequest struct {
	ID   string `msgpack:"i,omitempty"`
	From string `msgpack:"f,omitempty"`
}

// ReplicaTransferLeadershipResponse says who led (From) and who leads
// now (To), with To's client address when the member table knows it.
type ReplicaTransferLeadershipResponse struct {
	From         string `msgpack:"f"`
	To           string `msgpack:"t"`
	ToClientAddr string `msgpack:"c,omitempty"`
}
