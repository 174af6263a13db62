package replica

import "github.com/hashicorp/raft"

// unpipelined is raft's network transport with pipelined replication
// turned off: the leader sends each follower one AppendEntries at a time
// (raft still batches up to MaxAppendEntries entries in each).
//
// Why. hashicorp/raft's pipeline (net_transport.go, v1.8.0) can deadlock
// once a follower answers an append with Success=false, which it does
// whenever its log does not match (after a restart, a partition, a fresh
// leader). The transport sizes the pipeline's two channels at
// MaxRPCsInFlight-2, unbuffered at the default: the decoding goroutine
// returns on the failure and stops reading doneCh, while the send loop may
// still pick a pending trigger and park sending on inprogressCh, which
// only the now-parked response reader drains. The replication goroutine
// for that follower then never returns: the follower keeps receiving
// heartbeats, so it never calls an election, yet never receives another
// log entry; and raft's Shutdown waits on that goroutine forever (seen
// here as a replica whose Close hung for ten minutes). Sending one request
// at a time has no such state. The cost is the overlap of a follower's
// round trip with the next send, small on the cell's links next to fsync.
type unpipelined struct {
	*raft.NetworkTransport
}

// AppendEntriesPipeline tells raft to replicate without a pipeline.
func (unpipelined) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}
