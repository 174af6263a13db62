//go:build !faultpoints

package replica

import (
	"fmt"
	"os"
)

// A release build: the crash points, the disk-stall fault and the start
// gate (faultpoints_on.go) are compiled out, so no environment variable can make
// a production replica kill itself or stall its log, and no signal handler
// is installed. A fault armed in the environment is refused at Open
// (ErrNoFaultPoints) rather than silently ignored.

// FaultPointsBuilt reports whether this build has the fault points (crash
// points and the disk-stall fault): true only with the faultpoints tag.
const FaultPointsBuilt = false

func init() {
	for _, env := range []string{CrashPointEnv, DiskStallEnv, StartGateEnv} {
		if v := os.Getenv(env); v != "" {
			armedErr = fmt.Errorf("%w: %s=%s", ErrNoFaultPoints, env, v)
		}
	}
}

// diskStall is always nil in a release build.
var diskStall *stallGate

// stallGate has no state in a release build: a log write never waits.
type stallGate struct{}

func (*stallGate) wait() {}

func crashPoint(CrashPoint) {}

func waitStartGate() {}
