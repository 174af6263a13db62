//go:build faultpoints

package replica

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// The disk-stall fault (docs/testplan.md#stale-read-probe): a disk that
// stops answering, as a dying SSD or a saturated cloud volume does. A
// test arms it through the environment, then stalls and releases the
// replica's log writes with signals:
//
//	LOCKCELL_DISKSTALL=1   read once at Open
//	SIGUSR1                every later StoreLogs blocks
//	SIGUSR2                the blocked and later StoreLogs go on
//
// A stalled leader is the interesting case. Raft's leader loop writes new
// entries to the log itself, so it stops inside StoreLogs and runs no
// leader-lease check: the replica goes on believing it leads long after
// a quorum has elected a successor, which a process pause cannot show
// (on waking, the lease check runs first). Anything the master answers
// from that belief alone, without a round of contact with a quorum, is
// then answered by a deposed master. Unarmed, no handler is installed and
// StoreLogs pays one nil check; without the faultpoints build tag (a
// release build) none of this is compiled in (faultpoints_off.go).

// diskStall is the process's stall gate: nil when the fault is unarmed.
var diskStall *stallGate

func init() {
	armed, armedErr = parseCrashPoint(os.Getenv(CrashPointEnv))
	if os.Getenv(DiskStallEnv) == "1" {
		diskStall = newStallGate()
	}
	startGate = os.Getenv(StartGateEnv)
}

// startGate is the file whose absence holds Open (StartGateEnv), or "".
var startGate string

// waitStartGate holds a replica's start, before its store opens, until the
// StartGateEnv file exists: a slow store open a test can end when it
// wants. It polls, as the test creates the file from another process.
func waitStartGate() {
	if startGate == "" {
		return
	}
	fmt.Fprintf(os.Stderr, "%s waiting for %s before opening the store\n", StartGateMarker, startGate)
	for {
		if _, err := os.Stat(startGate); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FaultPointsBuilt reports whether this build has the fault points (crash
// points and the disk-stall fault): true only with the faultpoints tag.
const FaultPointsBuilt = true

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

// stallGate blocks log writes while stalled. Its signal goroutine lives as
// long as the process (the fault belongs to the process, not to one
// replica): tests arm it only in lockcelld processes.
type stallGate struct {
	mu      sync.Mutex
	release chan struct{} // nil when not stalled; closed on release
}

func newStallGate() *stallGate {
	g := &stallGate{}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sig {
			g.set(s == syscall.SIGUSR1)
		}
	}()
	return g
}

func (g *stallGate) set(stalled bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case stalled && g.release == nil:
		g.release = make(chan struct{})
		os.Stderr.WriteString("LOCKCELL-DISKSTALL on\n")
	case !stalled && g.release != nil:
		close(g.release)
		g.release = nil
		os.Stderr.WriteString("LOCKCELL-DISKSTALL off\n")
	}
}

// wait blocks while the disk is stalled.
func (g *stallGate) wait() {
	if g == nil {
		return
	}
	g.mu.Lock()
	ch := g.release
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}
