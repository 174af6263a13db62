package replica

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

func TestParseCrashPoint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name CrashPoint
		nth  int64
		bad  bool
	}{
		{in: ""},
		{in: "log-store", name: CrashLogStore, nth: 1},
		{in: "snapshot-install:7", name: CrashSnapshotInstall, nth: 7},
		{in: "log-truncate:0", bad: true},
		{in: "log-truncate:x", bad: true},
		{in: "log-stor", bad: true},
	} {
		a, err := parseCrashPoint(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadCrashPoint) {
				t.Errorf("%q: error %v, want ErrBadCrashPoint", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if tc.in == "" {
			if a != nil {
				t.Errorf("empty value armed %v", a.name)
			}
			continue
		}
		if a.name != tc.name || a.nth != tc.nth {
			t.Errorf("%q: armed %s:%d, want %s:%d", tc.in, a.name, a.nth, tc.name, tc.nth)
		}
	}
}

// crashHelperEnv makes TestCrashPointKillsAfterSync's child run the store
// writes instead of the test.
const crashHelperEnv = "LOCKCELL_CRASHPOINT_HELPER_DIR"

// TestCrashPointKillsAfterSync re-runs this test binary with
// log-store:2 armed: the child stores three batches and must die by
// SIGKILL inside the second StoreLogs, after its marker line; the store
// reopened here holds the first two batches (synced before the crash)
// and not the third.
func TestCrashPointKillsAfterSync(t *testing.T) {
	if !FaultPointsBuilt {
		t.Skip("crash points exist only in builds with -tags faultpoints (make test builds so)")
	}
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		s, err := OpenStore(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 3; i++ {
			if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
		}
		t.Fatal("the armed crash point did not fire")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashPointKillsAfterSync$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir, CrashPointEnv+"=log-store:2")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, stderr.String())
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL\n%s", ws, stderr.String())
	}
	if !strings.Contains(stderr.String(), CrashPointMarker+" log-store hit 2 ") {
		t.Fatalf("no marker line for log-store hit 2 in the child's stderr:\n%s", stderr.String())
	}
	s, err := OpenStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if last != 2 {
		t.Fatalf("after the crash the log ends at %d, want 2 (the crashed call's batch was synced before the hook)", last)
	}
}
