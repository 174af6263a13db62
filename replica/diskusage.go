package replica

import (
	"io/fs"
	"path/filepath"
	"time"
)

// DiskUsage is what a replica keeps on disk, in bytes: the whole data
// folder, the Raft log store within it (badger's tables and value log,
// and raft-wal's segments with LogStoreWAL),
// and the snapshots it retains (the newest and the one before it), with
// the newest one's size and index on its own.
type DiskUsage struct {
	DataBytes       int64
	LogStoreBytes   int64
	SnapshotsBytes  int64
	LastSnapshot    int64  // bytes of the newest snapshot's state
	LastSnapshotIdx uint64 // the log index the newest snapshot covers; 0 when there is none
	Measured        time.Time
}

// diskUsageEvery bounds how often DiskUsage walks the data folder: a
// health probe or a scrape every second must not turn into a directory
// walk every second on a replica with thousands of badger files.
const diskUsageEvery = 5 * time.Second

// DiskUsage measures the data folder, at most once per diskUsageEvery;
// callers in between get the last figures. It never fails: a file that
// vanishes during the walk (a compaction, a snapshot being replaced) is
// left out of that measure.
func (r *Replica) DiskUsage() DiskUsage {
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	now := time.Now()
	if !r.disk.Measured.IsZero() && now.Sub(r.disk.Measured) < diskUsageEvery {
		return r.disk
	}
	u := DiskUsage{Measured: now,
		DataBytes:      dirBytes(r.cfg.Dir),
		LogStoreBytes:  dirBytes(filepath.Join(r.cfg.Dir, "raft")) + dirBytes(walDir(r.cfg.Dir)), // raft-wal's segments, when that store holds the log
		SnapshotsBytes: dirBytes(filepath.Join(r.cfg.Dir, "snapshots"))}
	if metas, err := r.snaps.List(); err == nil && len(metas) > 0 {
		u.LastSnapshot, u.LastSnapshotIdx = metas[0].Size, metas[0].Index
	}
	r.disk = u
	return u
}

// dirBytes sums what the regular files under dir take on disk: blocks
// allocated where the system says (badger preallocates its value log and
// memtables as sparse files of hundreds of MiB, which a new replica's
// apparent sizes would count), the apparent size elsewhere.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: left out
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += onDisk(info)
			}
		}
		return nil
	})
	return n
}
