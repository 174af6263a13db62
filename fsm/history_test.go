package fsm

import (
	"errors"
	"testing"
)

// readHistory reads every change below dir after pos in pages of at most
// limit, as the master does, and returns them with the last position.
func readHistory(t *testing.T, f *FSM, dir string, pos Position, limit int) ([]HistoryChange, Position, error) {
	t.Helper()
	var out []HistoryChange
	for range 10000 {
		var page []HistoryChange
		var next Position
		var err error
		_ = f.Read(func(v View) error {
			page, next, err = v.SubtreeChanges(nil, dir, pos, HistoryAllKinds, 3, limit, nil)
			return nil
		})
		if err != nil {
			return out, pos, err
		}
		out = append(out, page...)
		if next == pos {
			return out, pos, nil
		}
		pos = next
	}
	t.Fatal("the history never ended")
	return nil, pos, nil
}

// The history records every create, write, delete and lock grant below a
// directory at any depth, with strictly increasing positions (a
// transaction's changes share an index and differ in ordinal), and a
// reader paging through it a few changes at a time sees each exactly
// once; changes outside the directory are not reported.
func TestHistoryRecordsSubtreeInOrder(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "d/e", fsmtRWC|FlagDirectory)
	f1 := h.mustOpen(s, "d/e/f", fsmtRWC)
	h.mustOpen(s, "other", fsmtRWC)
	wantOK(t, "set", h.set(s, f1, "x"))
	r, _ := h.acquire(s, f1, LockExclusive, false)
	wantOK(t, "acquire", r)
	wantOK(t, "txn", h.txn(s, nil, txnPath(TxnOpCreate, "d/e/t1", "a"), txnPath(TxnOpCreate, "d/t2", "b")))
	txnIndex := h.idx
	wantOK(t, "delete", h.do(s, Command{Payload: &DeleteArgs{Handle: f1}}))

	got, _, err := readHistory(t, h.f, fsmtPath("d"), Position{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		rel  string
		kind HistoryKind
	}
	want := []seen{{"d/e", HistoryCreated}, {"d/e/f", HistoryCreated}, {"d/e/f", HistoryContents},
		{"d/e/f", HistoryLockAcquired}, {"d/e/t1", HistoryCreated}, {"d/t2", HistoryCreated}, {"d/e/f", HistoryDeleted}}
	if len(got) != len(want) {
		t.Fatalf("got %d changes %+v, want %d", len(got), got, len(want))
	}
	for i, c := range got {
		if c.Path != fsmtPath(want[i].rel) || c.Kind != want[i].kind {
			t.Errorf("change %d: %s kind %d, want %s kind %d", i, c.Path, c.Kind, want[i].rel, want[i].kind)
		}
		if i > 0 && !got[i-1].Pos.Less(c.Pos) {
			t.Errorf("position %s after %s", c.Pos, got[i-1].Pos)
		}
	}
	if got[4].Pos.Index != txnIndex || got[5].Pos.Index != txnIndex || got[4].Pos.Ord >= got[5].Pos.Ord {
		t.Errorf("a transaction's changes at %s and %s, want entry %d in order", got[4].Pos, got[5].Pos, txnIndex)
	}
	if got[2].Generation != h.idx-3 || got[6].Generation != got[1].Generation {
		t.Errorf("generations: write %d (want %d), delete %d of instance %d", got[2].Generation, h.idx-3, got[6].Generation, got[1].Generation)
	}
	// Resuming inside the transaction's entry gets the rest of it.
	rest, _, err := readHistory(t, h.f, fsmtPath("d"), got[4].Pos, 1)
	if err != nil || len(rest) != 2 || rest[0].Path != fsmtPath("d/t2") {
		t.Fatalf("resume after %s: %+v, %v", got[4].Pos, rest, err)
	}
	p, err := ParsePosition(got[4].Pos.String())
	if err != nil || p != got[4].Pos {
		t.Fatalf("ParsePosition(%q) = %v, %v", got[4].Pos.String(), p, err)
	}
	if _, err := ParsePosition("12.x"); err == nil {
		t.Fatal("ParsePosition accepted 12.x")
	}
}

// The history stays within its bounds in changes and bytes; a reader
// whose position fell out of it, or one from a position ahead of the log,
// is told ErrHistoryCompacted, and one at the floor reads every change
// still held. A restore empties it: positions before the snapshot are
// compacted, later entries are recorded again.
func TestHistoryBoundsAndCompaction(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	f1 := h.mustOpen(s, "d/f", fsmtRWC)
	start := Position{Index: h.idx + 1}
	h.f.SetHistoryLimits(10, 1<<20)
	for range 30 {
		wantOK(t, "set", h.set(s, f1, "x"))
	}
	var st HistoryStats
	_ = h.f.Read(func(v View) error { st = v.HistoryStats(); return nil })
	if st.Changes != 10 || st.Bytes <= 0 {
		t.Fatalf("history holds %d changes, %d bytes, want 10", st.Changes, st.Bytes)
	}
	if _, _, err := readHistory(t, h.f, fsmtPath("d"), start, 5); !errors.Is(err, ErrHistoryCompacted) {
		t.Fatalf("read from %s: %v, want ErrHistoryCompacted", start, err)
	}
	got, end, err := readHistory(t, h.f, fsmtPath("d"), st.Floor, 4)
	if err != nil || len(got) != 10 || end != st.Progress {
		t.Fatalf("read from the floor %s: %d changes to %s, %v; want 10 to %s", st.Floor, len(got), end, err, st.Progress)
	}
	if _, _, err := readHistory(t, h.f, fsmtPath("d"), Position{Index: st.Progress.Index + 1}, 5); !errors.Is(err, ErrHistoryCompacted) {
		t.Fatalf("read from ahead of the log: %v, want ErrHistoryCompacted", err)
	}

	// Bytes: a long name's records are fewer.
	h.f.SetHistoryLimits(1000, 3*(historyOverhead+int64(len(fsmtPath("d/f")))+1))
	_ = h.f.Read(func(v View) error { st = v.HistoryStats(); return nil })
	if st.Changes > 3 || st.Bytes > 3*(historyOverhead+int64(len(fsmtPath("d/f")))+1) {
		t.Fatalf("byte bound: %d changes, %d bytes", st.Changes, st.Bytes)
	}

	f2, err := fsmtRestore(t, fsmtCell, fsmtSnapshotBytes(t, h.f))
	if err != nil {
		t.Fatal(err)
	}
	h2 := h.clone(f2)
	if _, _, err := readHistory(t, f2, fsmtPath("d"), st.Floor, 5); !errors.Is(err, ErrHistoryCompacted) {
		t.Fatalf("restored: read from before the snapshot: %v, want ErrHistoryCompacted", err)
	}
	at := Position{Index: h2.idx + 1}
	wantOK(t, "set", h2.set(s, f1, "y"))
	got, _, err = readHistory(t, f2, fsmtPath("d"), at, 5)
	if err != nil || len(got) != 1 || got[0].Kind != HistoryContents {
		t.Fatalf("restored: read after the snapshot: %+v, %v", got, err)
	}
}

// A reader that found nothing waits on HistoryWake: it is closed by the
// next entry that records a change below its directory, at any depth, not
// by one that records none or one elsewhere; once released by every
// reader, a wait is forgotten.
func TestHistoryWake(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	h.mustOpen(s, "d/e", fsmtRWC|FlagDirectory)
	f1 := h.mustOpen(s, "d/e/f", fsmtRWC)
	other := h.mustOpen(s, "other", fsmtRWC)
	var wake, wake2 <-chan struct{}
	var release, release2 func()
	_ = h.f.Read(func(v View) error {
		wake, release = v.HistoryWake(fsmtPath("d"))
		wake2, release2 = v.HistoryWake(fsmtPath("d"))
		return nil
	})
	if wake != wake2 {
		t.Fatal("two readers of one directory wait on two channels")
	}
	h.session()                                  // records nothing
	wantOK(t, "set other", h.set(s, other, "x")) // elsewhere
	select {
	case <-wake:
		t.Fatal("woken by an entry that changed nothing below the directory")
	default:
	}
	wantOK(t, "set", h.set(s, f1, "x"))
	select {
	case <-wake:
	default:
		t.Fatal("not woken by a write two levels below")
	}
	release()
	release2()
	_ = h.f.Read(func(v View) error {
		var r func()
		wake, r = v.HistoryWake(fsmtPath("d/e"))
		r()
		return nil
	})
	h.f.hist.wakeMu.Lock()
	n := len(h.f.hist.waits)
	h.f.hist.wakeMu.Unlock()
	if n != 0 {
		t.Fatalf("%d waits left once every reader released them", n)
	}
}
