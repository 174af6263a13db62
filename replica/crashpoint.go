package replica

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Crash points (docs/testplan.md#no-acknowledged-write-lost): a test arms one
// named place in the replica through the environment, and the process kills
// itself with SIGKILL the n-th time it gets there, so the crash lands exactly
// inside the durable step under test rather than wherever an outside kill -9
// happens to fall.
//
//	LOCKCELL_CRASHPOINT=<name>[:<n>]   (n >= 1, default 1)
//
// The variable is read once, when the package initialises. Unset (the
// production case), every hook is one load of a nil pointer and a branch.
// SIGKILL, not os.Exit: no deferred call, no badger Close, no buffered
// writer flush runs, as after a real kill -9. Before the signal the hook
// writes one marker line to stderr (CrashPointMarker), which the test
// reads to know the process died at that point and not for another
// reason.

// CrashPointEnv is the environment variable that arms a crash point.
const CrashPointEnv = "LOCKCELL_CRASHPOINT"

// CrashPointMarker starts the line a crash point writes to stderr right
// before it kills the process: "<marker> <name> hit <n> pid <pid>".
const CrashPointMarker = "LOCKCELL-CRASHPOINT"

// CrashPoint names a place where an armed replica kills itself.
type CrashPoint string

// The crash points.
const (
	// CrashLogStore: in Store.StoreLogs after the batch is committed and
	// fsync'd, before StoreLogs returns, so raft never learns the entries
	// are stored (a follower never acks them, a leader never counts its
	// own vote for them).
	CrashLogStore CrashPoint = "log-store"
	// CrashSnapshotPersist: in the FSM snapshot's Persist after half the
	// snapshot bytes are written to the sink, before the sink is closed,
	// so a partial snapshot is left in the snapshot store's temp folder.
	CrashSnapshotPersist CrashPoint = "snapshot-persist"
	// CrashSnapshotInstall: in FSM.Restore of a running replica (a
	// follower installing the leader's snapshot; the restore at start-up
	// does not count), after the snapshot is read and validated and
	// before the state is replaced. Raft has already stored the snapshot
	// but not yet compacted the log.
	CrashSnapshotInstall CrashPoint = "snapshot-install"
	// CrashLogTruncate: in Store.DeleteRange (log compaction after a
	// snapshot, or a follower's conflict truncation) after a chunk of the
	// deletion is committed and fsync'd, before DeleteRange returns.
	CrashLogTruncate CrashPoint = "log-truncate"
)

// CrashPoints lists every crash point.
var CrashPoints = []CrashPoint{CrashLogStore, CrashSnapshotPersist, CrashSnapshotInstall, CrashLogTruncate}

// ErrBadCrashPoint is returned by Open when CrashPointEnv holds a value
// that names no crash point or has a bad count: a typo must not leave a
// test waiting for a crash that can never come.
var ErrBadCrashPoint = errors.New("replica: bad " + CrashPointEnv)

// armedPoint is the armed crash point, nil when none is.
type armedPoint struct {
	name CrashPoint
	nth  int64
	hits atomic.Int64
}

var (
	armed    *armedPoint // set once by init, read-only afterwards
	armedErr error
)

func init() { armed, armedErr = parseCrashPoint(os.Getenv(CrashPointEnv)) }

// parseCrashPoint parses "<name>[:<n>]"; the empty string arms nothing.
func parseCrashPoint(v string) (*armedPoint, error) {
	if v == "" {
		return nil, nil
	}
	name, count, hasCount := strings.Cut(v, ":")
	a := &armedPoint{name: CrashPoint(name), nth: 1}
	if hasCount {
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %q: the count must be an integer >= 1", ErrBadCrashPoint, v)
		}
		a.nth = n
	}
	for _, p := range CrashPoints {
		if p == a.name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%w: %q: no crash point %q (known: %v)", ErrBadCrashPoint, v, name, CrashPoints)
}

// ArmedCrashPoint reports the crash point this process was started with
// and the hit that fires it; ok is false when none is armed.
func ArmedCrashPoint() (p CrashPoint, nth int64, ok bool) {
	if armed == nil {
		return "", 0, false
	}
	return armed.name, armed.nth, true
}

// crashPoint kills the process with SIGKILL if p is the armed point and
// this is its n-th hit. It never returns after the signal.
func crashPoint(p CrashPoint) {
	a := armed
	if a == nil || a.name != p {
		return
	}
	n := a.hits.Add(1)
	if n != a.nth {
		return
	}
	// One write(2) to an unbuffered fd: the line is in the kernel (the
	// test's log file) before the signal, nothing to flush.
	fmt.Fprintf(os.Stderr, "%s %s hit %d pid %d\n", CrashPointMarker, p, n, os.Getpid())
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is delivered before this goroutine runs again
}
