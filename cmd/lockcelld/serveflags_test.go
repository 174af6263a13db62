package main

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/replica"
)

// serveConfigOf parses serve's flags from args and returns the replica
// configuration they describe (the replica is not started).
func serveConfigOf(t *testing.T, args ...string) cell.Config {
	t.Helper()
	cmd := serveCommand()
	var got cell.Config
	cmd.Action = func(c *cli.Context) error {
		var err error
		got, err = serveConfig(c)
		return err
	}
	app := &cli.App{Name: "lockcelld", Commands: []*cli.Command{cmd}}
	base := []string{"lockcelld", "serve", "--id", "1", "--data", t.TempDir(), "--peers", "1=127.0.0.1:1/127.0.0.1:2"}
	if err := app.Run(append(base, args...)); err != nil {
		t.Fatal(err)
	}
	return got
}

// The Raft flags reach the replica's configuration; left out, they are
// replica.DefaultTimings().
func TestServeRaftFlags(t *testing.T) {
	if got := serveConfigOf(t).Timings; got != replica.DefaultTimings() {
		t.Errorf("default timings %+v, want %+v", got, replica.DefaultTimings())
	}
	got := serveConfigOf(t, "--raft-heartbeat", "500ms", "--raft-election", "1s", "--raft-leader-lease", "250ms",
		"--snapshot-interval", "2s", "--snapshot-threshold", "64", "--trailing-logs", "32").Timings
	want := replica.DefaultTimings()
	want.HeartbeatTimeout, want.ElectionTimeout, want.LeaderLeaseTimeout = 500*time.Millisecond, time.Second, 250*time.Millisecond
	want.SnapshotInterval, want.SnapshotThreshold, want.TrailingLogs = 2*time.Second, 64, 32
	if got != want {
		t.Errorf("timings %+v, want %+v", got, want)
	}
}
