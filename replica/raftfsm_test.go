package replica

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// memSink is an in-memory raft.SnapshotSink, or a failing one.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
	failWrite        bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.canceled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrite {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}

// TestRaftSnapshotPersist: raft's snapshot of the state machine persists
// the fsm's snapshot bytes exactly and closes the sink; a failing sink is
// cancelled, never closed; and Restore through the adapter reads the bytes
// back to the same state.
func TestRaftSnapshotPersist(t *testing.T) {
	f := fsm.NewFSM("c", quietLogger())
	c := fsm.Command{Time: 1, Client: "t", Principal: "p", Payload: &fsm.CreateSessionArgs{}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	a := &raftFSM{f: f, h: &fsm.Histogram{}}
	if r, ok := a.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: b}).(*fsm.Result); !ok || r.Err != nil {
		t.Fatalf("apply: %+v", r)
	}
	if a.h.Snapshot().Count != 1 {
		t.Fatal("the apply was not timed")
	}
	want, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var direct bytes.Buffer
	if err := want.WriteRange(&direct, 0, want.Len()); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed || sink.canceled {
		t.Fatalf("persist: %v closed=%v canceled=%v", err, sink.closed, sink.canceled)
	}
	if !bytes.Equal(sink.Bytes(), direct.Bytes()) {
		t.Fatal("the persisted snapshot differs from the fsm's bytes")
	}
	failing := &memSink{failWrite: true}
	if err := snap.Persist(failing); err == nil || !failing.canceled || failing.closed {
		t.Fatalf("persist into a failing sink: %v canceled=%v closed=%v", err, failing.canceled, failing.closed)
	}
	snap.Release()
	g := &raftFSM{f: fsm.NewFSM("c", quietLogger()), h: &fsm.Histogram{}}
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	_, h1, _ := f.StateHash()
	_, h2, _ := g.f.StateHash()
	if h1 != h2 {
		t.Fatal("restored through the adapter to another state")
	}
}
