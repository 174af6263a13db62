package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// A master stopped cleanly (SIGTERM) hands its leadership over before it
// exits: with a 6 s heartbeat timeout, after which followers would first
// notice a crashed leader, another replica serves as master well within
// half of it, the master's log names the new leader, and a client's
// session carries on at the new master.
func TestServeCleanShutdownHandsMastershipOver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	const timeout = 6 * time.Second
	bin := fixtures.BuildLockcelld(t)
	// A clean hand-over is routine, logged at INFO: the default level
	// (warn) would not show it.
	t.Setenv(fixtures.EnvProcLog, "info")
	pc := fixtures.NewProcCellWith(t, bin, "handover", 3, 20*time.Second, fixtures.ProcOptions{
		ExtraArgs: []string{"--raft-heartbeat", timeout.String(), "--raft-election", timeout.String(), "--raft-leader-lease", "500ms"}})
	mi := pc.MasterIndex(90 * time.Second)
	peers := pc.Peers()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := cl.Open(ctx, pc.Name("f"), client.Create|client.Write|client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	old, err := admin.QueryStatusWith(ctx, pc.ClientConfig(), peers[mi].ClientAddr)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := syscall.Kill(pc.PID(mi), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	newMaster, took := -1, time.Duration(0)
	for newMaster < 0 {
		for i, p := range peers {
			if i == mi {
				continue
			}
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			st, err := admin.QueryStatusWith(qctx, pc.ClientConfig(), p.ClientAddr)
			qcancel()
			if err == nil && st.State == "Leader" && st.Master == p.ClientAddr && st.Epoch > old.Epoch {
				newMaster, took = i, time.Since(start)
				break
			}
		}
		if newMaster < 0 && time.Since(start) > 4*timeout {
			t.Fatalf("no new master %v after SIGTERM to the master\n%s", time.Since(start), pc.Log(mi))
		}
		time.Sleep(10 * time.Millisecond)
	}
	pc.Stop(mi) // reaps the exiting process
	t.Logf("new master %s serving %v after SIGTERM to master %s", peers[newMaster].ID, took, peers[mi].ID)
	if took > timeout/2 {
		t.Errorf("a new master served only %v after the old one was stopped cleanly; want well within the %v heartbeat timeout (no election wait)", took, timeout)
	}
	if log := pc.Log(mi); !strings.Contains(log, "level=INFO msg=\"shutting down: leadership handed over\"") || !strings.Contains(log, "new_leader="+peers[newMaster].ID) {
		t.Errorf("the stopped master's log does not name the new leader %s:\n%s", peers[newMaster].ID, log)
	}
	// The client's session lives on: its handle works at the new master.
	if err := h.SetContents(ctx, []byte("after")); err != nil {
		t.Fatalf("write on the session opened before the hand-over: %v", err)
	}
	if b, _, err := h.GetContentsAndStat(ctx); err != nil || string(b) != "after" {
		t.Fatalf("read after the hand-over: %q, %v", b, err)
	}
}
