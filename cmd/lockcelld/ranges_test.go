package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
)

// numericFlags are the flags of serve and dev that take a count, a
// duration or a byte size, by name.
func numericFlags(t *testing.T) map[string]cli.Flag {
	t.Helper()
	out := map[string]cli.Flag{}
	for _, cmd := range []*cli.Command{serveCommand(), devCommand()} {
		for _, f := range cmd.Flags {
			switch f := f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag, *cli.Float64Flag, *cli.DurationFlag:
			case *cli.GenericFlag:
				if _, ok := f.Value.(*byteSize); !ok {
					t.Errorf("flag --%s: a generic flag of %T: say here whether it is numeric", f.Name, f.Value)
					continue
				}
			default:
				continue
			}
			out[f.Names()[0]] = f
		}
	}
	return out
}

// Every numeric flag of serve and dev has a range in cell.SettingRanges,
// checked as the command reads it (numericValue knows its type); every
// range names such a flag; every relation joins two of them.
func TestEveryNumericFlagHasARange(t *testing.T) {
	flags := numericFlags(t)
	app := &cli.App{Flags: func() []cli.Flag {
		var fs []cli.Flag
		for _, f := range flags {
			fs = append(fs, f)
		}
		return fs
	}(), Action: func(c *cli.Context) error {
		for name, f := range flags {
			if _, ok := numericValue(c, f); !ok {
				t.Errorf("flag --%s (%T): numericValue does not read it, so its range is never checked", name, f)
			}
		}
		return nil
	}}
	if err := app.Run([]string{"lockcelld"}); err != nil {
		t.Fatal(err)
	}
	for name, f := range flags {
		if _, ok := cell.SettingRanges[name]; !ok {
			t.Errorf("flag --%s (%T) has no entry in cell.SettingRanges", name, f)
		}
	}
	for name := range cell.SettingRanges {
		if flags[name] == nil {
			t.Errorf("cell.SettingRanges has %q, which is no numeric flag of serve or dev", name)
		}
	}
	for _, r := range cell.SettingRelations {
		if flags[r.Key] == nil || flags[r.Other] == nil {
			t.Errorf("relation %+v joins a setting that is no numeric flag", r)
		}
	}
}

// serveRun runs serve's flag handling (settings checked, the config file
// applied) on args after a valid base command line and returns its error.
func serveRun(t *testing.T, args ...string) error {
	t.Helper()
	base := []string{"--id", "1", "--data", t.TempDir(), "--peers", "1=127.0.0.1:1/127.0.0.1:2", "--insecure"}
	_, err := serveConfigFrom(t, append(base, args...)...)
	return err
}

// companions are the settings that keep SettingRelations when key is set
// to text: the other side of each relation set alike (relations with a
// setting that may be 0 for "off" hold at the defaults).
func companions(key, text string) []string {
	var out []string
	for _, r := range cell.SettingRelations {
		switch {
		case r.ZeroExempt:
		case r.Key == key:
			out = append(out, "--"+r.Other, text)
		case r.Other == key:
			out = append(out, "--"+r.Key, text)
		}
	}
	return out
}

// Every serve flag with a range takes its minimum and its maximum, and
// refuses one step below and above with a usage error naming the flag,
// the value and the bound; the defaults are all in range.
func TestFlagRanges(t *testing.T) {
	if err := serveRun(t); err != nil {
		t.Fatalf("serve's defaults: %v", err)
	}
	serve := map[string]bool{}
	for _, f := range serveCommand().Flags {
		serve[f.Names()[0]] = true
	}
	for name, r := range cell.SettingRanges {
		if !serve[name] {
			continue // dev's only: TestDevFlagRanges
		}
		_, unsigned := numericFlags(t)[name].(*cli.Uint64Flag)
		accepted := r.Max
		if share, _ := cell.ClientFDShare(); name == "max-conns" && share > 0 && int64(share) < accepted {
			// Also bounded by the process's file descriptors
			// (TestClientConnCapOverFDShareIsRefused).
			accepted = int64(share)
		}
		for _, c := range []struct {
			v    int64
			want string // "" for accepted
		}{
			{r.Min, ""},
			{accepted, ""},
			{r.Min - 1, "below the minimum " + r.Unit.Format(r.Min)},
			{r.Max + 1, "above the maximum " + r.Unit.Format(r.Max)},
		} {
			if c.v < 0 && unsigned {
				continue // does not parse
			}
			text := r.Unit.Format(c.v)
			args := []string{"--" + name, text}
			if c.want == "" {
				args = append(args, companions(name, text)...)
			}
			err := serveRun(t, args...)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("--%s %s (in range): %v", name, text, err)
			case c.want != "" && err == nil:
				t.Errorf("--%s %s: accepted, want %q", name, text, c.want)
			case c.want != "":
				if msg := "--" + name + " " + text + ": " + c.want; err.Error() != msg {
					t.Errorf("--%s %s: %q, want %q", name, text, err, msg)
				}
				if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
					t.Errorf("--%s %s: %v is not a usage error (exit code 2)", name, text, err)
				}
			}
		}
	}
}

// dev checks its flags as serve does, its own included.
func TestDevFlagRanges(t *testing.T) {
	run := func(args ...string) error {
		cmd := devCommand()
		cmd.Action = func(*cli.Context) error { return nil }
		app := &cli.App{Name: "lockcelld", Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
		return app.Run(append([]string{"lockcelld", "dev"}, args...))
	}
	if err := run(); err != nil {
		t.Fatalf("dev's defaults: %v", err)
	}
	for _, c := range []struct{ args, want string }{
		{"--replicas 0", "--replicas 0: below the minimum 1"},
		{"--port 70000", "--port 70000: above the maximum 65535"},
		{"--lease 1ns", "--lease 1ns: below the minimum 1s"},
		{"--max-handles-per-session 0", "--max-handles-per-session 0: below the minimum 1"},
	} {
		if err := run(strings.Fields(c.args)...); err == nil || err.Error() != c.want {
			t.Errorf("dev %s: %v, want %q", c.args, err, c.want)
		}
	}
}

// Orders between settings are refused naming both, the unset Raft
// timings following the heartbeat timeout as the replica's do.
func TestFlagRelations(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--lease 20s --max-lease 15s", "--max-lease 15s: less than lease (20s)"},
		{"--raft-election 100ms", "--raft-election 100ms: less than raft-heartbeat (300ms)"},
		{"--raft-leader-lease 1s", "--raft-leader-lease 1s: more than raft-heartbeat (300ms)"},
		{"--raft-heartbeat 2s", ""},    // the election timeout follows it
		{"--raft-heartbeat 100ms", ""}, // the leader lease follows it
		{"--lease 10m", ""},            // --max-lease 0: leases never lengthen
	} {
		err := serveRun(t, strings.Fields(c.args)...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}

// An out-of-range value in the config file is refused naming the file,
// the line and the key; the command line's value wins over the file's.
func TestServeConfigFileRanges(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"cell: x\nlease: 1ns\n", ":2: lease: 1ns is below the minimum 1s"},
		{"lease: 1000h\n", ":1: lease: 1000h is above the maximum 10m0s"},
		{"\n\nmax-sessions: 0\n", ":3: max-sessions: 0 is below the minimum 1"},
		{"max-conns-per-ip: -4\n", ":1: max-conns-per-ip: -4 is below the minimum 1"},
		{"max-conn-buffer: 1KiB\n", ":1: max-conn-buffer: 1KiB is below the minimum 2MiB"},
		{"snapshot-threshold: 0\n", ":1: snapshot-threshold: 0 is below the minimum 1"},
		{"lock-delay: 0s\n", ":1: lock-delay: 0s is below the minimum 1ms"},
		{"raft-election: 100ms\n", ":1: raft-election: 100ms is less than raft-heartbeat (300ms)"},
	} {
		path := writeFile(t, c.text)
		err := serveRun(t, "--config", path)
		if err == nil || err.Error() != path+c.want {
			t.Errorf("%q: %v, want %q", c.text, err, path+c.want)
			continue
		}
		if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
			t.Errorf("%q: %v is not a usage error (exit code 2)", c.text, err)
		}
	}
	if err := serveRun(t, "--config", writeFile(t, "lease: 1ns\n"), "--lease", "5s"); err != nil {
		t.Errorf("a bad file value the command line overrides: %v", err)
	}
}

// A client connection cap above the client ports' share of file
// descriptors is refused at start, naming the flag, the limit and the
// share, with a usage error.
func TestClientConnCapOverFDShareIsRefused(t *testing.T) {
	share, _ := cell.ClientFDShare()
	if share <= 0 || int64(share) >= cell.SettingRanges["max-conns"].Max {
		t.Skipf("file-descriptor share %d: no cap in range lies above it", share)
	}
	err := serveRun(t, "--max-conns", strconv.Itoa(share+1))
	if err == nil || !strings.Contains(err.Error(), "--max-conns") || !strings.Contains(err.Error(), "file-descriptor limit") {
		t.Fatalf("--max-conns %d over the share %d: %v", share+1, share, err)
	}
}
