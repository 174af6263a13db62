package main

import (
	"context"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
)

// TestIdleSessionTimeoutFlag: --idle-session-timeout reaches the master's
// limits, for dev (limitFlags) and serve alike; its default is the
// master's (a minute), and 0 turns idle closing off, which the limits say
// with a negative timeout (their zero is "the default").
func TestIdleSessionTimeoutFlag(t *testing.T) {
	parse := func(args ...string) time.Duration {
		t.Helper()
		var got time.Duration
		app := &cli.App{Flags: limitFlags(), Action: func(c *cli.Context) error { got = sessionLimits(c).IdleSessionTimeout; return nil }}
		if err := app.Run(append([]string{"lockcelld"}, args...)); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := parse(); got != master.DefaultIdleSessionTimeout {
		t.Fatalf("default idle-session timeout %v, want %v", got, master.DefaultIdleSessionTimeout)
	}
	if got := parse("--idle-session-timeout", "300ms"); got != 300*time.Millisecond {
		t.Fatalf("--idle-session-timeout 300ms gave %v", got)
	}
	if got := parse("--idle-session-timeout", "0"); got >= 0 {
		t.Fatalf("--idle-session-timeout 0 gave %v, want a negative timeout (off)", got)
	}
	if got := serveConfigOf(t, "--idle-session-timeout", "2m").SessionLimits.IdleSessionTimeout; got != 2*time.Minute {
		t.Fatalf("serve --idle-session-timeout 2m gave %v", got)
	}
}

// TestServeClosesIdleSessions: a real `lockcelld serve` process started
// with --idle-session-timeout 500ms closes a client's session that holds
// no handle and makes no call; the client hears IdleClosed, and its next
// call works in a new session.
func TestServeClosesIdleSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	pc := fixtures.NewProcCellWith(t, fixtures.BuildLockcelld(t), "t", 1, 2*time.Second,
		fixtures.ProcOptions{ExtraArgs: []string{"--idle-session-timeout", "500ms"}})
	pc.MasterIndex(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	old := cl.Session()
	deadline := time.After(20 * time.Second)
	for idle := false; !idle; {
		select {
		case ev := <-cl.Events():
			idle = ev.Kind == client.IdleClosed
			if ev.Kind == client.Expired {
				t.Fatal("the idle close came as Expired")
			}
		case <-deadline:
			t.Fatalf("no IdleClosed within 20s of a 500ms idle timeout; the replica logged:\n%s", pc.Log(0))
		}
	}
	h, err := cl.Open(ctx, pc.Name("after-idle"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatalf("the call after the idle close: %v", err)
	}
	h.Close()
	if cl.Session() == old {
		t.Fatal("the call ran in the closed session")
	}
}
