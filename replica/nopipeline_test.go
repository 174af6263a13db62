package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The transport a replica builds for itself refuses raft's pipeline (whose
// channels can deadlock a follower's replication, see unpipelined), yet
// keeps the optional interfaces raft looks for: pre-vote and Close.
func TestReplicaTransportReplicatesWithoutPipeline(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	r, err := Open(Config{ID: "1", Cell: "test", Dir: t.TempDir(), RaftAddr: addr,
		Peers: []Peer{{ID: "1", RaftAddr: addr}}, Timings: testTimings(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.transport.AppendEntriesPipeline("2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
	if _, ok := r.transport.(raft.WithPreVote); !ok {
		t.Error("the transport lost pre-vote")
	}
	if _, ok := r.transport.(raft.WithClose); !ok {
		t.Error("the transport lost Close")
	}
	// It still replicates: a one-replica cell elects itself and applies.
	waitApply(t, []*Replica{r}, 20*time.Second)
}
