package replica

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// What the leader's answers prove: a heartbeat is contact, not a match; a
// successful append matches through its last entry, a failed one nothing;
// an installed snapshot matches its index; records of another term say
// nothing; a forgotten member starts over.
func TestProgressRecordsWhatAnswersProve(t *testing.T) {
	p := newProgress()
	now := time.Unix(100, 0)
	p.now = func() time.Time { return now }
	ok := &raft.AppendEntriesResponse{Term: 3, Success: true, LastLog: 7}
	p.appended("a", &raft.AppendEntriesRequest{Term: 3}, ok, time.Millisecond) // heartbeat
	if pp := p.snapshot(3)["a"]; !pp.LastContact.Equal(now) || pp.Match != 0 || pp.LastLog != 7 {
		t.Fatalf("after a heartbeat: %+v", pp)
	}
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 4,
		Entries: []*raft.Log{{Index: 5}, {Index: 6}}}, ok, 3*time.Millisecond)
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 6, Entries: []*raft.Log{{Index: 7}}},
		&raft.AppendEntriesResponse{Term: 3, Success: false, LastLog: 9}, 3*time.Millisecond)
	if pp := p.snapshot(3)["a"]; pp.Match != 6 || pp.LastLog != 9 {
		t.Fatalf("after an append to 6 and a refused one: %+v, want match 6", pp)
	}
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 8}, &raft.AppendEntriesResponse{Term: 4, Success: true}, time.Millisecond)
	if pp := p.snapshot(3)["a"]; pp.Match != 6 {
		t.Fatalf("an answer from a newer term counted: %+v", pp)
	}
	p.installed("b", &raft.InstallSnapshotRequest{Term: 3, LastLogIndex: 40}, &raft.InstallSnapshotResponse{Term: 3, Success: true})
	if pp := p.snapshot(3)["b"]; pp.Match != 40 {
		t.Fatalf("after a snapshot install: %+v", pp)
	}
	if got := p.snapshot(4); len(got) != 0 {
		t.Fatalf("term 4 shows records of term 3: %+v", got)
	}
	// Round trips: every answered AppendEntries counts, whatever its
	// term or success, by whether it carried entries.
	rtt := p.rttSnapshot()["a"]
	if rtt.Heartbeat.Count != 2 || rtt.Append.Count != 2 || rtt.Heartbeat.Sum != 2*time.Millisecond || rtt.Append.Sum != 6*time.Millisecond {
		t.Fatalf("round trips: heartbeats %d (%v), appends %d (%v); want 2 (2ms) and 2 (6ms)",
			rtt.Heartbeat.Count, rtt.Heartbeat.Sum, rtt.Append.Count, rtt.Append.Sum)
	}
	p.forget("a")
	if _, ok := p.snapshot(3)["a"]; ok {
		t.Fatal("a forgotten member still has a record")
	}
	if _, ok := p.rttSnapshot()["a"]; ok {
		t.Fatal("a forgotten member still has round trips")
	}
}

// Recording a heartbeat's answer and round trip for a known follower
// allocates nothing: it runs for every heartbeat the leader sends.
func TestProgressHeartbeatAllocatesNothing(t *testing.T) {
	p := newProgress()
	args := &raft.AppendEntriesRequest{Term: 3}
	resp := &raft.AppendEntriesResponse{Term: 3, Success: true, LastLog: 7}
	p.appended("a", args, resp, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { p.appended("a", args, resp, time.Millisecond) }); n != 0 {
		t.Fatalf("%v allocations per heartbeat", n)
	}
}

// BenchmarkProgressHeartbeat is what the leader adds to every heartbeat
// it sends: the record of the answer and its round trip.
func BenchmarkProgressHeartbeat(b *testing.B) {
	p := newProgress()
	args := &raft.AppendEntriesRequest{Term: 3}
	resp := &raft.AppendEntriesResponse{Term: 3, Success: true, LastLog: 7}
	b.ReportAllocs()
	for b.Loop() {
		p.appended("a", args, resp, time.Millisecond)
	}
}
