//go:build bug_nosync

package replica

import (
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// bugNoSync is a seeded bug (docs/testplan.md#seeded-bugs; build tag
// bug_nosync): the badger store is opened without SyncWrites and the
// raft-wal log store's segment files skip their fsync, so nothing is
// synced. fixtures/safety's TestDurability, TestStoreSyncsBeforeReturn
// and TestWALSyncsBeforeReturn must fail with it.
const bugNoSync = true

// walVFS is raft-wal's file system with every segment's Sync skipped.
func walVFS() types.VFS { return noSyncFS{fs.New()} }

type noSyncFS struct{ types.VFS }

func (n noSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := n.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (n noSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := n.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ types.WritableFile }

func (noSyncFile) Sync() error { return nil }
