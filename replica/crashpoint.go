package replica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// Crash points (docs/testplan.md#no-acknowledged-write-lost): a test arms one
// named place in the replica through the environment, and the process kills
// itself with SIGKILL the n-th time it gets there, so the crash lands exactly
// inside the durable step under test rather than wherever an outside kill -9
// happens to fall.
//
//	LOCKCELL_CRASHPOINT=<name>[:<n>]   (n >= 1, default 1)
//
// Crash points, like the disk-stall fault, exist only in builds with the
// faultpoints build tag (faultpoints_on.go), which make test and the test
// fixtures use; a release build compiles every hook to nothing and refuses
// to open a replica when the environment tries to arm one
// (faultpoints_off.go). With the tag, the variable is read once, when the
// package initialises; unset, every hook is one load of a nil pointer and
// a branch.
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

// ErrNoFaultPoints is returned by Open when the environment arms a fault
// (CrashPointEnv, DiskStallEnv, StartGateEnv) in a build without the faultpoints tag: a
// release binary has no fault points, and a test must not wait for a
// fault that cannot come.
var ErrNoFaultPoints = errors.New("replica: this build has no fault points (build with -tags faultpoints)")

// DiskStallEnv is the environment variable that arms the disk-stall fault
// (faultpoints_on.go).
const DiskStallEnv = "LOCKCELL_DISKSTALL"

// StartGateEnv names a file whose absence holds a replica's start
// (faultpoints_on.go): Open writes StartGateMarker and the path to stderr,
// then waits before opening its store until the file exists, so a test
// can act on a process that is provably still starting.
const StartGateEnv = "LOCKCELL_START_GATE"

// StartGateMarker opens the line a replica writes when it reaches the
// start gate.
const StartGateMarker = "LOCKCELL-START-GATE"

// DiskStallArmed reports whether this process arms the disk-stall fault.
func DiskStallArmed() bool { return diskStall != nil }

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
