//go:build !bug_nosync

package replica

import (
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// bugNoSync is off: see bug_nosync_on.go.
const bugNoSync = false

// walVFS is the file system raft-wal's segments live on: the real one,
// which fsyncs each segment write before StoreLogs returns.
func walVFS() types.VFS { return fs.New() }
