package main

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/master"
)

// TestIdleSessionTimeoutFlag: --idle-session-timeout reaches the master's
// limits; its default is the master's (a minute), and 0 turns idle
// closing off, which the limits say with a negative timeout (their zero
// is "the default").
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
}
