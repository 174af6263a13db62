package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/replica"
)

// A SIGHUP that comes while a replica is still starting (a `systemctl
// reload` during a slow store open) neither kills it nor is lost: the
// replica starts, serves, and reloads its certificate once it is up.
func TestSighupDuringStartIsQueuedNotFatal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a process")
	}
	if !replica.FaultPointsBuilt {
		t.Skip("holds the start with the start gate: needs -tags faultpoints")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t)
	gate := filepath.Join(t.TempDir(), "open")
	pc := fixtures.NewProcCellWith(t, bin, "hupstart", 1, 8*time.Second,
		fixtures.ProcOptions{TLS: set, Env: []string{replica.StartGateEnv + "=" + gate}})
	id := pc.Peers()[0].ID
	addr := pc.Peers()[0].ClientAddr

	// exited reports how the replica ended, or nil while it runs (waiting
	// briefly for it to end).
	exited := func() *os.ProcessState {
		if st, ok := pc.WaitExit(0, 20*time.Millisecond); ok {
			return st
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(pc.Log(0), replica.StartGateMarker) {
		if st := exited(); st != nil || time.Now().After(deadline) {
			t.Fatalf("the replica never reached its start gate (exit %v):\n%s", st, pc.Log(0))
		}
	}
	// It has read its certificate and waits before opening its store.
	cf, kf := certs.ReplicaFiles(set.Dir, id)
	fresh, err := set.CA.IssueReplica(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second one while the first is queued is the same reload
		if err := syscall.Kill(pc.PID(0), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if st := exited(); st != nil {
		t.Fatalf("SIGHUP during start ended the replica: %v (exit code %d)\n%s", st, st.ExitCode(), pc.Log(0))
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// It starts, reloads and serves.
	deadline = time.Now().Add(60 * time.Second)
	for !strings.Contains(pc.Log(0), "certificate reloaded") {
		if st := exited(); st != nil {
			t.Fatalf("SIGHUP during start ended the replica: %v (exit code %d)\n%s", st, st.ExitCode(), pc.Log(0))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload after a SIGHUP during start:\n%s", pc.Log(0))
		}
	}
	if n := strings.Count(pc.Log(0), "certificate reloaded"); n != 1 {
		t.Errorf("%d reloads for two SIGHUPs during start, want one:\n%s", n, pc.Log(0))
	}
	waitSerial(t, "client port", addr, set.ClientTLS(t, "admin"), fresh.Leaf.SerialNumber)
	// The reload names the new serial as openssl shows it.
	if want := "certificate reloaded (serial " + certs.SerialText(fresh.Leaf.SerialNumber) + ")"; !strings.Contains(pc.Log(0), want) {
		t.Errorf("the reload line does not say %q:\n%s", want, pc.Log(0))
	}
	pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := cl.Open(ctx, pc.Name("f"), client.Create|client.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("served")); err != nil {
		t.Fatal(err)
	}
	if st := exited(); st != nil {
		t.Fatalf("the replica ended: %v\n%s", st, pc.Log(0))
	}
}
