package deploy_test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures/freeport"
	"lockcell/replica"
)

// TestReleaseBinaryHasNoFaultPoints: the daemon users run has the test
// fault points compiled out. It was built without the faultpoints tag, and
// an environment that tries to arm a crash point or the disk stall makes
// it refuse to start with a clear error, instead of a production replica
// that kills itself or stalls its log on an environment variable.
func TestReleaseBinaryHasNoFaultPoints(t *testing.T) {
	daemon, _ := binaries(t)
	info, err := buildinfo.ReadFile(daemon)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && strings.Contains(s.Value, "faultpoints") {
			t.Fatalf("the release daemon was built with -tags %s", s.Value)
		}
	}
	for _, env := range []string{replica.CrashPointEnv + "=log-store", replica.DiskStallEnv + "=1", replica.StartGateEnv + "=/nonexistent"} {
		addrs := freeport.Addrs(t, 2)
		client, raft := addrs[0], addrs[1]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, daemon, "serve", "--id", "1", "--data", t.TempDir(),
			"--peers", fmt.Sprintf("1=%s/%s", client, raft), "--listen", client, "--raft", raft, "--insecure")
		cmd.Env = append(os.Environ(), env, "LOCKCELL_LOG_LEVEL=", "LOCKCELL_AUDIT_LOG=")
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || err == nil || !strings.Contains(string(out), "no fault points") {
			t.Errorf("release lockcelld with %s: err %v (timed out: %v), want a refusal naming the missing fault points; output:\n%s",
				env, err, timedOut, out)
		}
	}
}
