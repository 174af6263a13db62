package replica

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockcell/fsm"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// openWALReplica opens a one-member cell on dir with the given log store.
func openWALReplica(t *testing.T, dir, addr, store string, tm Timings) (*Replica, error) {
	t.Helper()
	return Open(Config{ID: "1", Cell: "test", Dir: dir, RaftAddr: addr, Peers: []Peer{{ID: "1", RaftAddr: addr}},
		Timings: tm, Logger: quietLogger(), LogStore: store})
}

// TestLogStoreWALKeepsEntries: with LogStore "wal" the Raft log lives in
// raft-wal's segment files, not in badger, and what a replica applied
// before Close is there again after it reopens (with "auto", which finds
// the folder's store), across a snapshot that truncated the log's head. A
// folder keeps its store: reopening it with the badger log store is
// refused with ErrLogStoreMismatch instead of starting from an empty log,
// and an unknown store name is refused.
func TestLogStoreWALKeepsEntries(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddrs(t, 1)[0]
	tm := testTimings()
	tm.SnapshotThreshold, tm.TrailingLogs = 8, 4 // a snapshot compacts the head of the log
	r, err := openWALReplica(t, dir, addr, LogStoreWAL, tm)
	if err != nil {
		t.Fatal(err)
	}
	waitApply(t, []*Replica{r}, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []uint64
	apply := func(r *Replica) {
		t.Helper()
		res, err := r.Apply(ctx, &fsm.Command{Client: "t", Time: time.Now().UnixNano(), Payload: &fsm.CreateSessionArgs{}})
		if err != nil || res.Err != nil {
			t.Fatalf("create session: %+v %v", res, err)
		}
		ids = append(ids, res.Session)
	}
	for range 20 {
		apply(r)
	}
	if err := r.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		apply(r) // after the snapshot: only the log holds these
	}
	if last, err := r.Store().LastIndex(); err != nil || last != 0 {
		t.Fatalf("badger holds log entries up to %d (%v) with the wal log store", last, err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no raft-wal segment in the data folder")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := openWALReplica(t, dir, addr, LogStoreBadger, tm); !errors.Is(err, ErrLogStoreMismatch) {
		t.Fatalf("reopened with the badger log store: %v, want ErrLogStoreMismatch", err)
	}
	if _, err := openWALReplica(t, t.TempDir(), addr, "bolt", tm); err == nil {
		t.Fatal("an unknown log store was accepted")
	}

	r, err = openWALReplica(t, dir, addr, LogStoreAuto, tm) // auto finds the folder's store
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitApply(t, []*Replica{r}, 20*time.Second) // commits, so the log replays
	have := map[uint64]bool{}
	for _, s := range r.FSM().Sessions() {
		have[s.ID] = true
	}
	for _, id := range ids {
		if !have[id] {
			t.Fatalf("session %d applied before the restart is gone after it (have %d sessions)", id, len(have))
		}
	}
}

// TestLogStoreBadgerRefusesWALFolder: a new folder with the default log
// store keeps its log in badger, and a folder whose log is in badger is
// not opened with the wal store, which would begin an empty log beside a
// term and vote that belong to badger's entries.
func TestLogStoreBadgerRefusesWALFolder(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddrs(t, 1)[0]
	r, err := openWALReplica(t, dir, addr, "", testTimings())
	if err != nil {
		t.Fatal(err)
	}
	waitApply(t, []*Replica{r}, 20*time.Second)
	if last, err := r.Store().LastIndex(); err != nil || last == 0 {
		t.Fatalf("a new folder with the default log store: badger holds entries up to %d (%v), want its log there", last, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := openWALReplica(t, dir, addr, LogStoreWAL, testTimings()); !errors.Is(err, ErrLogStoreMismatch) {
		t.Fatalf("a badger folder opened with the wal log store: %v, want ErrLogStoreMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused open left %s behind: %v", filepath.Join(dir, "wal"), err)
	}
}

// BenchmarkLogStoreAB is BenchmarkStoreLogs (fsync'd batches of 16 x
// 128-byte entries) for each log store, side by side in one run.
func BenchmarkLogStoreAB(b *testing.B) {
	for _, name := range []string{LogStoreBadger, LogStoreWAL} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			store, err := OpenStore(filepath.Join(dir, "raft"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			hlog, _ := newRaftLogger(quietLogger())
			logs, closeLogs, err := openLogStore(name, dir, store, &fsm.Histogram{}, hlog)
			if err != nil {
				b.Fatal(err)
			}
			if closeLogs != nil {
				defer closeLogs()
			}
			data := make([]byte, 128)
			batch := make([]*raft.Log, 16)
			idx := uint64(0)
			for b.Loop() {
				for i := range batch {
					idx++
					batch[i] = &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}
				}
				if err := logs.StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
		})
	}
}

// TestLogStoreWALHeadTruncationHidesEntries: after DeleteRange drops the
// head of the log, the dropped entries are gone for GetLog too, although
// raft-wal still holds them in its open segment: raft must install a
// snapshot on a follower that needs them, never send entries the log no
// longer claims (FirstIndex and GetLog agree on where the log starts).
func TestLogStoreWALHeadTruncationHidesEntries(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenStore(filepath.Join(dir, "raft"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	logs, closeLogs, err := openLogStore(LogStoreWAL, dir, store, &fsm.Histogram{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer closeLogs()
	var batch []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := logs.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	if err := logs.DeleteRange(1, 6); err != nil {
		t.Fatal(err)
	}
	if first, err := logs.FirstIndex(); err != nil || first != 7 {
		t.Fatalf("FirstIndex after deleting 1..6 = %d, %v; want 7", first, err)
	}
	var l raft.Log
	for i := uint64(1); i <= 6; i++ {
		if err := logs.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) after its deletion: %v (entry %d), want ErrLogNotFound", i, err, l.Index)
		}
	}
	for i := uint64(7); i <= 10; i++ {
		if err := logs.GetLog(i, &l); err != nil || l.Index != i || l.Data[0] != byte(i) {
			t.Fatalf("GetLog(%d) = %+v, %v", i, l, err)
		}
	}
}
