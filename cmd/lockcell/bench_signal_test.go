//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// SIGTERM in the middle of a minute's run: bench stops, removes what it
// created (its prefix's missing parents included) and exits 143 saying
// so.
func TestBenchSignal(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}
	admin := c.Client(t)
	res := make(chan result, 1)
	go func() {
		res <- r.run("", "bench", "lock-uncontended", "--clients", "2", "--duration", "1m", "--prefix", "sig/run")
	}()
	// The run's first client has its lock file once the signal handler
	// is in place.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := admin.Open(ctx, c.Name("sig/run/lock-u/0"), client.Read, client.WithoutCache())
		cancel()
		if err == nil {
			h.Close()
			break
		}
		select {
		case got := <-res:
			t.Fatalf("bench ended before the signal: exit %d, stderr %q", got.code, got.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's lock file never appeared: %v", err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var got result
	select {
	case got = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("bench did not end within 30 s of SIGTERM")
	}
	if got.code != 128+15 || !strings.Contains(got.stderr, "interrupted") || !strings.Contains(got.stderr, "removed") || got.stdout != "" {
		t.Fatalf("bench after SIGTERM: exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Open(ctx, c.Name("sig"), client.Read, client.WithoutCache()); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the run's folder after SIGTERM: %v, want not found", err)
	}
}
