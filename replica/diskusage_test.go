package replica

import (
	"testing"
	"time"
)

// DiskUsage counts the log store and, once one is taken, the newest
// snapshot with its index.
func TestDiskUsageCountsLogAndSnapshots(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	r, err := Open(Config{ID: "1", Cell: "test", Dir: t.TempDir(), RaftAddr: addr,
		Peers: []Peer{{ID: "1", RaftAddr: addr}}, Timings: testTimings(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitApply(t, []*Replica{r}, 20*time.Second)
	before := r.DiskUsage()
	if before.LogStoreBytes <= 0 || before.DataBytes < before.LogStoreBytes || before.LastSnapshotIdx != 0 {
		t.Fatalf("usage before a snapshot %+v: want a log store inside the data folder and no snapshot", before)
	}
	if err := r.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if again := r.DiskUsage(); again != before {
		t.Fatalf("measured again within %v: %+v, then %+v", diskUsageEvery, before, again)
	}
	r.diskMu.Lock()
	r.disk = DiskUsage{} // measure now, not diskUsageEvery later
	r.diskMu.Unlock()
	after := r.DiskUsage()
	if after.LastSnapshot <= 0 || after.LastSnapshotIdx == 0 || after.SnapshotsBytes < after.LastSnapshot {
		t.Fatalf("usage after a snapshot %+v: want the snapshot counted with its index", after)
	}
}
