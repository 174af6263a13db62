package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// A real `lockcelld proxy` process in front of five `lockcelld serve`
// processes: a client that knows only the proxy and the replicas takes a
// lock through the proxy and keeps it over several leases on the proxy's
// batched KeepAlives; kill -9 of the proxy costs it nothing (same
// session, same lock), as it carries on with the replicas directly.
func TestProxyProcessServesAndDiesCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs six processes")
	}
	bin := fixtures.BuildLockcelld(t)
	pc := fixtures.NewProcCell(t, bin, "proc", 5, 2*time.Second)
	pc.MasterIndex(30 * time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePorts(t, 1)[0])
	logFile := filepath.Join(t.TempDir(), "proxy.log")
	px := fixtures.NewProcs(fixtures.ProcsConfig{Bin: bin, N: 1,
		Args: func(int) []string {
			return []string{"--log-level", "info", "proxy", "--listen", addr, "--peers", joinAddrs(pc.Addrs()), "--insecure"}
		},
		OpenLog: func(int) (*os.File, error) { return os.Create(logFile) }})
	t.Cleanup(px.KillAll)
	if err := px.Start(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := pc.ClientConfig()
	cfg.Replicas = append([]string{addr}, pc.Addrs()...)
	cfg.GracePeriod, cfg.RetryTimeout = 30*time.Second, 30*time.Second
	// The proxy is up once a client of it alone gets a session.
	only := cfg
	only.Replicas = []string{addr}
	for deadline := time.Now().Add(20 * time.Second); ; {
		probe, err := client.Dial(ctx, only)
		if err == nil {
			probe.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("dial through the proxy: %v\nproxy log:\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond) // the proxy process is starting
	}
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := admin.New(cl).Master(); got != addr {
		t.Fatalf("the client talks to %s, not the proxy %s", got, addr)
	}
	session := cl.Session()
	lk, err := cl.Open(ctx, "/ls/proc/lock", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	st0, _ := lk.GetStat(ctx)
	time.Sleep(3 * 2 * time.Second) // three leases on the proxy's KeepAlives: the time under test
	if st, err := lk.GetStat(ctx); err != nil || st.LockGen != st0.LockGen {
		t.Fatalf("lock after three leases through the proxy: %+v %v", st, err)
	}
	px.Kill(0)
	time.Sleep(3 * 2 * time.Second) // three leases after the proxy died
	if err := lk.SetContents(ctx, []byte("mine")); err != nil {
		t.Fatalf("write after the proxy died: %v", err)
	}
	if st, err := lk.GetStat(ctx); err != nil || st.LockGen != st0.LockGen || cl.Session() != session {
		t.Fatalf("after the proxy died: %+v %v, session %d (was %d)", st, err, cl.Session(), session)
	}
}

func joinAddrs(as []string) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += ","
		}
		out += a
	}
	return out
}
