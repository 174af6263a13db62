package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"lockcell/fsm"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// Log store names for Config.LogStore.
const (
	// LogStoreAuto (also "") keeps the log where the data folder already
	// has it, and puts a new folder's log in badger, the store the
	// product's specification fixes: the default.
	LogStoreAuto = "auto"
	// LogStoreBadger keeps the Raft log in the badger database beside the
	// stable state (Dir/raft). badger syncs two files per batch (its
	// value log, although Raft entries never reach it, and its memtable's
	// write-ahead log), so each entry costs two syncs.
	LogStoreBadger = "badger"
	// LogStoreWAL keeps the Raft log in hashicorp/raft-wal segment files
	// (Dir/wal): one write and one fsync per batch. The stable state
	// (term, vote) stays in badger, which writes it only on a new term or
	// vote. Opt-in: it departs from the specified store.
	LogStoreWAL = "wal"
)

// ErrLogStoreMismatch means a data folder holds a Raft log in one store
// and the replica was opened with the other: opening it would start from
// an empty log beside a term and vote that assume the other's entries.
var ErrLogStoreMismatch = errors.New("replica: data folder holds its Raft log in the other log store")

// walDir is where LogStoreWAL keeps its segment files and meta database.
func walDir(dir string) string { return filepath.Join(dir, "wal") }

// openLogStore returns the log store raft appends to for name, counting
// each StoreLogs's time in h. A folder that already holds a log in the
// other store is refused (ErrLogStoreMismatch), never silently emptied.
// The returned closer is nil for badger, whose Store the caller closes.
func openLogStore(name, dir string, store *Store, h *fsm.Histogram, hlog hclog.Logger) (raft.LogStore, func() error, error) {
	walExists := false
	if ents, err := os.ReadDir(walDir(dir)); err == nil && len(ents) > 0 {
		walExists = true
	}
	if name == "" || name == LogStoreAuto {
		name = LogStoreBadger
		if walExists {
			name = LogStoreWAL
		}
	}
	switch name {
	case LogStoreBadger:
		if walExists {
			return nil, nil, fmt.Errorf("%w: %s holds a raft-wal log; open it with log store %q", ErrLogStoreMismatch, walDir(dir), LogStoreWAL)
		}
		return timedLogStore{store, h}, nil, nil
	case LogStoreWAL:
		if last, err := store.LastIndex(); err != nil {
			return nil, nil, err
		} else if last > 0 {
			return nil, nil, fmt.Errorf("%w: the badger store holds entries up to %d; open it with log store %q", ErrLogStoreMismatch, last, LogStoreBadger)
		}
		if err := os.MkdirAll(walDir(dir), 0o755); err != nil {
			return nil, nil, err
		}
		// raft-wal v0.4.0's Close leaves its bolt meta database open, and
		// with it bolt's flock on wal-meta.db, so a second Open in the
		// same process (a replica reopened, a test's restart) would wait
		// for that lock forever. Owning the meta store lets Close free it.
		meta := &metadb.BoltMetaDB{}
		w, err := wal.Open(walDir(dir), wal.WithLogger(hlog.Named("wal")), wal.WithMetaStore(meta),
			wal.WithSegmentFiler(segment.NewFiler(walDir(dir), walVFS())))
		if err != nil {
			meta.Close()
			return nil, nil, fmt.Errorf("open raft-wal in %s: %w", walDir(dir), err)
		}
		closeWAL := func() error {
			return errors.Join(w.Close(), meta.Close())
		}
		return timedWAL{w, h}, closeWAL, nil
	default:
		return nil, nil, fmt.Errorf("replica: unknown log store %q (want %q, %q or %q)", name, LogStoreAuto, LogStoreBadger, LogStoreWAL)
	}
}

// timedWAL is timedLogStore for raft-wal. It embeds the *WAL itself, not
// the raft.LogStore interface, so raft still sees IsMonotonic: raft-wal
// cannot hold a gap, and raft must then drop the whole log when it
// installs a snapshot past its end rather than keep a tail behind a hole.
type timedWAL struct {
	*wal.WAL
	h *fsm.Histogram
}

// StoreLogs stores the entries (raft-wal fsyncs the segment before it
// returns) and counts the time.
func (s timedWAL) StoreLogs(logs []*raft.Log) error {
	diskStall.wait() // the disk-stall fault, when built and armed (faultpoints_on.go)
	start := time.Now()
	err := s.WAL.StoreLogs(logs)
	s.h.Observe(time.Since(start))
	if err == nil {
		crashPoint(CrashLogStore) // stored and synced, not yet acknowledged
	}
	return err
}

// DeleteRange truncates the log (raft-wal: its head or its tail only),
// with the crash point the badger store has there.
func (s timedWAL) DeleteRange(min, max uint64) error {
	if err := s.WAL.DeleteRange(min, max); err != nil {
		return err
	}
	crashPoint(CrashLogTruncate) // deleted and synced, raft not told
	return nil
}

// GetLog reads the entry at index, and reports an index below the log's
// first as absent. raft-wal truncates its head lazily: an entry in the
// open segment stays readable after DeleteRange dropped it, and raft would
// then send a lagging follower entries the log no longer claims to hold
// instead of the snapshot that replaced them, so FirstIndex and GetLog
// would disagree about where the log starts.
func (s timedWAL) GetLog(index uint64, l *raft.Log) error {
	first, err := s.WAL.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return s.WAL.GetLog(index, l)
}

// StoreLog stores one entry through StoreLogs, so it is counted too.
func (s timedWAL) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

var _ raft.MonotonicLogStore = timedWAL{}

// OpenLog opens the Raft log of a stopped replica's data folder in the
// named store (LogStoreAuto: whichever holds it, raft-wal when Dir/wal
// holds segments, else badger), for tools that read a log after the fact
// (log checkers) and for tests of a store. The returned function closes
// everything it opened.
func OpenLog(dir, storeName string) (raft.LogStore, func() error, error) {
	store, err := OpenStore(filepath.Join(dir, "raft"), nil)
	if err != nil {
		return nil, nil, err
	}
	logs, closeLogs, err := openLogStore(storeName, dir, store, &fsm.Histogram{}, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return logs, func() error {
		var err error
		if closeLogs != nil {
			err = closeLogs()
		}
		return errors.Join(err, store.Close())
	}, nil
}
