package replica

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
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
// then answered by a deposed master. Unarmed (the production case) no
// handler is installed and StoreLogs pays one nil check.

// DiskStallEnv is the environment variable that arms the disk-stall fault.
const DiskStallEnv = "LOCKCELL_DISKSTALL"

// diskStall is the process's stall gate: nil when the fault is unarmed.
var diskStall *stallGate

func init() {
	if os.Getenv(DiskStallEnv) == "1" {
		diskStall = newStallGate()
	}
}

// DiskStallArmed reports whether this process arms the disk-stall fault.
func DiskStallArmed() bool { return diskStall != nil }

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
