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
	p.appended("a", &raft.AppendEntriesRequest{Term: 3}, ok, time.Now(), time.Millisecond) // heartbeat
	if pp := p.snapshot(3)["a"]; !pp.LastContact.Equal(now) || pp.Match != 0 || pp.LastLog != 7 {
		t.Fatalf("after a heartbeat: %+v", pp)
	}
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 4,
		Entries: []*raft.Log{{Index: 5}, {Index: 6}}}, ok, time.Now(), 3*time.Millisecond)
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 6, Entries: []*raft.Log{{Index: 7}}},
		&raft.AppendEntriesResponse{Term: 3, Success: false, LastLog: 9}, time.Now(), 3*time.Millisecond)
	if pp := p.snapshot(3)["a"]; pp.Match != 6 || pp.LastLog != 9 {
		t.Fatalf("after an append to 6 and a refused one: %+v, want match 6", pp)
	}
	p.appended("a", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 8}, &raft.AppendEntriesResponse{Term: 4, Success: true}, time.Now(), time.Millisecond)
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
	p.appended("a", args, resp, time.Now(), time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { p.appended("a", args, resp, time.Now(), time.Millisecond) }); n != 0 {
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
		p.appended("a", args, resp, time.Now(), time.Millisecond)
	}
}

// heardSince counts a voter only for an answer, in the same term, to a
// request sent at or after the moment asked about; the leader counts
// itself; a member forgotten counts no more.
func TestHeardSinceCountsOnlyLaterRequestsOfTheTerm(t *testing.T) {
	p := newProgress()
	t0 := time.Now()
	voters := []raft.ServerID{"1", "2", "3", "4", "5"}
	answer := func(id raft.ServerID, term, respTerm uint64, sent time.Time) {
		p.appended(id, &raft.AppendEntriesRequest{Term: term}, &raft.AppendEntriesResponse{Term: respTerm, Success: respTerm == term}, sent, time.Millisecond)
	}
	answer("2", 7, 7, t0.Add(-time.Millisecond)) // sent before: does not count
	answer("3", 7, 7, t0)
	if p.heardSince(voters, "1", 7, t0) {
		t.Fatal("a quorum with only the leader and one later answer")
	}
	answer("4", 6, 6, t0.Add(time.Millisecond)) // an older term's answer
	answer("5", 7, 8, t0.Add(time.Millisecond)) // the follower knows a newer term
	if p.heardSince(voters, "1", 7, t0) {
		t.Fatal("answers of another term counted")
	}
	answer("2", 7, 7, t0.Add(2*time.Millisecond))
	if !p.heardSince(voters, "1", 7, t0) {
		t.Fatal("leader + 2 later answers of the term: a quorum of 5, not counted")
	}
	if p.heardSince(voters, "1", 7, t0.Add(3*time.Millisecond)) {
		t.Fatal("answers to requests sent before the moment counted for it")
	}
	p.forget("2")
	if p.heardSince(voters, "1", 7, t0) {
		t.Fatal("a forgotten member's answer still counted")
	}
}
