package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// serveConfigFrom runs serve's flag handling (the --config file
// included) on args and returns the configuration, or the usage error.
func serveConfigFrom(t *testing.T, args ...string) (cell.Config, error) {
	t.Helper()
	cmd := serveCommand()
	var got cell.Config
	cmd.Action = func(c *cli.Context) error {
		var err error
		got, err = serveConfig(c)
		return err
	}
	app := &cli.App{Name: "lockcelld", Commands: []*cli.Command{cmd},
		Flags:          []cli.Flag{&cli.StringFlag{Name: "log-level", Value: "warn"}},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"lockcelld", "serve"}, args...))
	return got, err
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "replica.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A config file sets any serve flag (identity, peers as a list, timings,
// client-port and session limits, byte sizes, booleans); a flag on the
// command line overrides the file; what neither sets keeps its default.
func TestServeConfigFile(t *testing.T) {
	data := t.TempDir()
	path := writeFile(t, `# replica 2 of cell "ops"
id: "2"
data: `+data+`
cell: ops
peers:
  - 1=127.0.0.1:7001/127.0.0.1:7101
  - 2=127.0.0.1:7002/127.0.0.1:7102
  - 3=127.0.0.1:7003/127.0.0.1:7103
insecure: true
lease: 20s
lock-delay: 30s
raft-election: 2s
raft-heartbeat: 1500ms
snapshot-threshold: 100
max-conns-per-ip: 128
max-conn-buffer: 8MiB
max-ip-rate: 32MiB
max-sessions: 500
max-read-rate: 1MiB
log-level: debug
`)
	cfg, err := serveConfigFrom(t, "--config", path, "--max-conns-per-ip", "7", "--lease", "15s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Self != "2" || cfg.Dir != data || cfg.Cell != "ops" || !cfg.Insecure {
		t.Errorf("id %q data %q cell %q insecure %v: not the file's", cfg.Self, cfg.Dir, cfg.Cell, cfg.Insecure)
	}
	if len(cfg.Peers) != 3 || cfg.Peers[2] != (cell.Peer{ID: "3", ClientAddr: "127.0.0.1:7003", RaftAddr: "127.0.0.1:7103"}) {
		t.Errorf("peers %+v, want the file's three", cfg.Peers)
	}
	if cfg.LeaseTTL != 15*time.Second {
		t.Errorf("lease %v, want the command line's 15s over the file's 20s", cfg.LeaseTTL)
	}
	if cfg.DefaultLockDelay != 30*time.Second {
		t.Errorf("lock-delay %v, want the file's 30s", cfg.DefaultLockDelay)
	}
	if cfg.Timings.ElectionTimeout != 2*time.Second || cfg.Timings.HeartbeatTimeout != 1500*time.Millisecond ||
		cfg.Timings.SnapshotThreshold != 100 {
		t.Errorf("timings %+v, want the file's election 2s, heartbeat 1.5s, snapshot threshold 100", cfg.Timings)
	}
	if cfg.Limits.MaxConnsPerIP != 7 {
		t.Errorf("max-conns-per-ip %d, want the command line's 7 over the file's 128", cfg.Limits.MaxConnsPerIP)
	}
	if cfg.Limits.MaxConnBuffer != 8<<20 || cfg.Limits.MaxIPRate != 32<<20 {
		t.Errorf("max-conn-buffer %d, max-ip-rate %d, want the file's 8MiB and 32MiB", cfg.Limits.MaxConnBuffer, cfg.Limits.MaxIPRate)
	}
	if cfg.SessionLimits.Sessions != 500 || cfg.SessionLimits.ReadBytesPerSecond != 1<<20 {
		t.Errorf("session limits %+v, want the file's 500 sessions and 1MiB/s", cfg.SessionLimits)
	}
	if !cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		t.Errorf("the file's global log-level debug did not reach the logger")
	}
	if d := cell.DefaultConnLimits; cfg.Limits.MaxIPBuffer != d.MaxIPBuffer || cfg.Limits.RequestTimeout != d.RequestTimeout {
		t.Errorf("limits the file leaves out %+v, want defaults", cfg.Limits)
	}
}

// Every flag of serve can be set from the file: none is unknown to it.
func TestServeConfigFileKnowsEveryFlag(t *testing.T) {
	var lines []string
	for _, f := range serveCommand().Flags {
		name := f.Names()[0]
		if name == "config" {
			continue
		}
		// A value each flag parses and its range takes (the resulting
		// configuration need not be valid: only the flag handling is
		// under test).
		val := "1"
		switch f.(type) {
		case *cli.StringFlag:
			val = `"x"`
		case *cli.BoolFlag:
			val = "false"
		}
		if r, ok := cell.SettingRanges[name]; ok {
			val = r.Unit.Format(r.Min)
		}
		lines = append(lines, name+": "+val)
	}
	path := writeFile(t, strings.Join(lines, "\n")+"\n")
	_, err := serveConfigFrom(t, "--config", path)
	if err != nil && strings.Contains(err.Error(), path) {
		t.Fatalf("a file naming every serve flag was refused: %v", err)
	}
}

// A typo in a key, a key given twice or a value that does not parse is a
// usage error naming the key and its line, never ignored.
func TestServeConfigFileMistakes(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"unknown key", "id: \"1\"\nmax-con-per-ip: 5\n", `line 2: unknown setting "max-con-per-ip"`},
		{"twice", "lease: 1s\nlease: 2s\n", `"lease" is set twice`},
		{"bad value", "\nmax-conn-buffer: lots\n", "line 2: max-conn-buffer"},
		{"not a mapping", "- id\n", "mapping"},
		{"nested", "limits:\n  max-conns: 1\n", `"limits"`},
	} {
		_, err := serveConfigFrom(t, "--config", writeFile(t, c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
			continue
		}
		if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
			t.Errorf("%s: %v is not a usage error (exit code 2)", c.name, err)
		}
	}
	if _, err := serveConfigFrom(t, "--insecure"); err == nil || !strings.Contains(err.Error(), "--id is required") {
		t.Errorf("no id anywhere: got %v, want --id is required", err)
	}
}

// A real replica process runs from its config file alone, and the binary
// refuses a misspelt key with exit status 2.
func TestServeConfigFileProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := fixtures.BuildLockcelld(t)
	peer := fixtures.FreePeers(t, 1)[0]
	path := writeFile(t, "id: \""+peer.ID+"\"\ndata: "+t.TempDir()+"\ncell: cfgcell\ninsecure: true\npeers: "+
		cell.FormatPeers([]cell.Peer{peer})+"\nlease: 5s\n")
	cmd := exec.Command(bin, "serve", "--config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ccfg := client.Config{Cell: "cfgcell", Replicas: []string{peer.ClientAddr}, RetryTimeout: 30 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := admin.QueryStatusWith(ctx, ccfg, peer.ClientAddr)
		cancel()
		if err == nil && st.Epoch > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica started from its config file never served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	bad := writeFile(t, "id: \"1\"\nmax-conns-par-ip: 5\n")
	out, err := exec.Command(bin, "serve", "--config", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `unknown setting "max-conns-par-ip"`) {
		t.Fatalf("a misspelt key: %v\n%s", err, out)
	}
}

// The binary refuses an out-of-range value, from its config file or its
// command line, with exit status 2 and a message naming the key (and the
// file's line) before it starts anything.
func TestServeConfigFileOutOfRangeProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := fixtures.BuildLockcelld(t)
	peer := fixtures.FreePeers(t, 1)[0]
	base := "id: \"" + peer.ID + "\"\ndata: " + t.TempDir() + "\ncell: cfgcell\ninsecure: true\npeers: " +
		cell.FormatPeers([]cell.Peer{peer}) + "\n"
	for _, c := range []struct {
		text string
		args []string
		want string // after the file's path, or the whole message without one
	}{
		{text: base + "lease: 1ns\n", want: ":6: lease: 1ns is below the minimum 1s"},
		{text: base + "lease: 1000h\n", want: ":6: lease: 1000h is above the maximum 10m0s"},
		{text: base + "\nmax-sessions: 0\n", want: ":7: max-sessions: 0 is below the minimum 1"},
		{text: base + "max-handles-per-session: -5\n", want: ":6: max-handles-per-session: -5 is below the minimum 1"},
		{text: base, args: []string{"--max-conns-per-ip", "0"}, want: "--max-conns-per-ip 0: below the minimum 1"},
	} {
		path := writeFile(t, c.text)
		want := c.want
		if strings.HasPrefix(want, ":") {
			want = path + want
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, append([]string{"serve", "--config", path}, c.args...)...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), want) {
			t.Errorf("%q %v: %v, want exit status 2 and %q; output:\n%s", c.text, c.args, err, want, out)
		}
	}
}
