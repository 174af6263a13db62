package main

import (
	"strings"
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
	base := []string{"lockcelld", "serve", "--id", "1", "--data", t.TempDir(), "--peers", "1=127.0.0.1:1/127.0.0.1:2", "--insecure"}
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
	// A heartbeat timeout alone takes the election timeout and the leader
	// lease along where raft needs them to (election >= heartbeat >=
	// lease), so the replica starts.
	for _, c := range []struct{ heartbeat, election, lease time.Duration }{
		{time.Second, time.Second, 300 * time.Millisecond},
		{500 * time.Millisecond, 500 * time.Millisecond, 300 * time.Millisecond},
		{200 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond},
	} {
		got := serveConfigOf(t, "--raft-heartbeat", c.heartbeat.String()).Timings
		if got.ElectionTimeout != c.election || got.LeaderLeaseTimeout != c.lease {
			t.Errorf("--raft-heartbeat %v alone: election %v, lease %v; want %v, %v",
				c.heartbeat, got.ElectionTimeout, got.LeaderLeaseTimeout, c.election, c.lease)
		}
	}
}

// serveConfigErr parses serve's flags from args and returns the usage
// error serveConfig gives, or nil.
func serveConfigErr(t *testing.T, peers string, args ...string) error {
	t.Helper()
	cmd := serveCommand()
	var err error
	cmd.Action = func(c *cli.Context) error {
		_, err = serveConfig(c)
		return nil
	}
	app := &cli.App{Name: "lockcelld", Commands: []*cli.Command{cmd}}
	if rerr := app.Run(append([]string{"lockcelld", "serve", "--id", "1", "--data", t.TempDir(), "--peers", peers}, args...)); rerr != nil {
		t.Fatal(rerr)
	}
	return err
}

// A plain cell is asked for, never fallen into: without TLS, serve wants
// --insecure, and with it binds loopback addresses only unless
// --insecure-bind-any says otherwise.
func TestServePlainIsExplicit(t *testing.T) {
	const loop = "1=127.0.0.1:1/127.0.0.1:2"
	for _, c := range []struct {
		name, peers string
		args        []string
		want        string // "" for accepted
	}{
		{"no TLS, no --insecure", loop, nil, "--insecure"},
		{"--insecure on loopback", loop, []string{"--insecure"}, ""},
		{"--insecure on localhost and ::1", "1=localhost:1/[::1]:2", []string{"--insecure"}, ""},
		{"--insecure, client port on all interfaces", "1=:1/127.0.0.1:2", []string{"--insecure"}, "loopback"},
		{"--insecure, Raft port on 0.0.0.0", "1=127.0.0.1:1/0.0.0.0:2", []string{"--insecure"}, "loopback"},
		{"--insecure, a LAN address", "1=10.1.2.3:1/10.1.2.3:2", []string{"--insecure"}, "loopback"},
		{"--insecure-bind-any", "1=10.1.2.3:1/0.0.0.0:2", []string{"--insecure", "--insecure-bind-any"}, ""},
		{"--insecure-bind-any alone", loop, []string{"--insecure-bind-any"}, "--insecure"},
	} {
		err := serveConfigErr(t, c.peers, c.args...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		case c.want != "":
			if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
				t.Errorf("%s: %v is not a usage error (exit code 2)", c.name, err)
			}
		}
	}
}
