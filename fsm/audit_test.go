package fsm

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"lockcell/audit"
)

// recordingAuditor keeps the records it is handed.
type recordingAuditor struct {
	recs  []audit.Record
	gaps  []uint64
	syncs int
}

func (a *recordingAuditor) Append(r *audit.Record) { a.recs = append(a.recs, *r) }
func (a *recordingAuditor) Gap(through uint64)     { a.gaps = append(a.gaps, through) }
func (a *recordingAuditor) Sync() error            { a.syncs++; return nil }

func (a *recordingAuditor) ops() string {
	var b strings.Builder
	for _, r := range a.recs {
		fmt.Fprintf(&b, "%s:%s:%s ", r.Op, strings.TrimPrefix(r.Name, fsmtRoot), r.Result)
	}
	return strings.TrimSpace(b.String())
}

// The state machine records each mutation once, with its command index,
// time, caller and identity: a retry answered from its first result and
// a stale duplicate are not recorded again, reads of handles and closes
// are not mutations, a refusal is recorded with its kind, a refused
// session's identity is left out, a Note is the admin's alone; a
// snapshot is synced first and a restore reports the gap it covers.
func TestAuditRecordsEachMutationOnce(t *testing.T) {
	h := newFSMT(t)
	a := &recordingAuditor{}
	h.f.SetAuditor(a)
	s := h.raw(Command{Client: "worker", Principal: "ops", Admin: true, Payload: &CreateSessionArgs{Host: "h1", PID: 7, Program: "prog"}}).Session
	hd := h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC}}).Handle
	write := Command{Session: s, Seq: h.seq[s] + 1, Ack: h.seq[s], Principal: "ops", Admin: true,
		Payload: &SetContentsArgs{Handle: hd, Contents: []byte("abc")}}
	h.seq[s]++
	first := h.raw(write)
	if again := h.raw(write); again.Stat.ContentGen != first.Stat.ContentGen { // the client's retry
		t.Fatalf("retry answered %+v, first %+v", again, first)
	}
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &CloseArgs{Handle: hd}})
	h.do(s, Command{Principal: "ops", Admin: true, Payload: &OpenArgs{Path: fsmtPath("nodir/x"), Flags: fsmtRWC}}) // refused: no parent
	h.raw(Command{Principal: "alice", Payload: &NoteArgs{Op: "backup"}})                                           // not the admin
	h.raw(Command{Principal: "root", Admin: true, Payload: &NoteArgs{Op: "gap"}})                                  // a gap is the trail's own
	h.raw(Command{Principal: "root", Admin: true, Payload: &NoteArgs{Op: "backup", Detail: "state at index 9"}})
	h.raw(Command{Client: "c", Principal: "bob", Payload: &CreateSessionArgs{Host: strings.Repeat("h", 300)}}) // refused

	if got, want := a.ops(), "create_session::ok create:/f:ok write:/f:ok create:/nodir/x:not_found backup::permission note::bad_request backup::ok create_session::bad_request"; got != want {
		t.Fatalf("records\n%s\nwant\n%s", got, want)
	}
	cs, w, refused := a.recs[0], a.recs[2], a.recs[7]
	if cs.Session != s || cs.Principal != "ops" || cs.Client != "worker" || cs.Host != "h1" || cs.PID != 7 || cs.Program != "prog" {
		t.Fatalf("session record %+v", cs)
	}
	if w.Index != first.Stat.ContentGen || w.Session != s || w.Host != "h1" || w.Time != audit.TimeOf(h.now) ||
		w.Detail != fmt.Sprintf("3 bytes, generation %d", first.Stat.ContentGen) {
		t.Fatalf("write record %+v", w)
	}
	if refused.Host != "" || refused.Error == "" {
		t.Fatalf("a refused session's record carries %q (error %q): want no identity, the reason", refused.Host, refused.Error)
	}
	for i := 1; i < len(a.recs); i++ {
		if a.recs[i].Index <= a.recs[i-1].Index {
			t.Fatalf("record %d at index %d after %d", i, a.recs[i].Index, a.recs[i-1].Index)
		}
	}

	snap := fsmtSnapshotBytes(t, h.f)
	if a.syncs != 1 {
		t.Fatalf("%d syncs before the snapshot, want 1", a.syncs)
	}
	other := NewFSM(fsmtCell, fsmtLogger())
	b := &recordingAuditor{}
	other.SetAuditor(b)
	if err := other.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if len(b.gaps) != 1 || b.gaps[0] != h.idx {
		t.Fatalf("restore reported gaps %v, want through %d", b.gaps, h.idx)
	}
}
