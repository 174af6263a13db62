package main

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/proxy"
)

// flagDefault is a limit flag's default as README writes it.
func flagDefault(t *testing.T, f cli.Flag) string {
	t.Helper()
	switch f := f.(type) {
	case *cli.IntFlag:
		return f.GetDefaultText()
	case *cli.DurationFlag:
		return f.Value.String()
	case *cli.GenericFlag:
		return f.Value.String()
	}
	t.Fatalf("flag %v of unexpected type %T", f.Names(), f)
	return ""
}

// README's table of the client port's limits names every limit flag with
// the default the code uses.
func TestReadmeLimitsTableMatchesFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "Limits of the client port")
	if !ok {
		t.Fatal("README has no table of the client port's limits")
	}
	flags := map[string]cli.Flag{}
	for _, f := range limitFlags() {
		flags["--"+f.Names()[0]] = f
	}
	seen := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(rest, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		if len(cols) != 4 || cols[0] == "limit" || strings.HasPrefix(cols[0], "---") {
			continue
		}
		rows++
		name := strings.Trim(cols[2], "`")
		f, ok := flags[name]
		if !ok {
			t.Errorf("README row %q names flag %q, which is not a limit flag", cols[0], cols[2])
			continue
		}
		seen[name] = true
		if want := flagDefault(t, f); cols[1] != want {
			t.Errorf("README gives %s the default %q; the flag's default is %q", name, cols[1], want)
		}
	}
	for name := range flags {
		if !seen[name] {
			t.Errorf("README's limits table has no row for %s", name)
		}
	}
}

// The limit flags parse into cell.ConnLimits, and their defaults are
// cell.DefaultConnLimits, but for MaxConns, passed as 0 unless set so
// that the replica may lower its default to the client ports' share of
// file descriptors.
func TestLimitFlags(t *testing.T) {
	parse := func(args ...string) cell.ConnLimits {
		t.Helper()
		var got cell.ConnLimits
		app := &cli.App{Flags: limitFlags(), Action: func(c *cli.Context) error { got = limits(c); return nil }}
		if err := app.Run(append([]string{"lockcelld"}, args...)); err != nil {
			t.Fatal(err)
		}
		return got
	}
	d := cell.DefaultConnLimits
	d.MaxConns = 0
	if got := parse(); got != d {
		t.Fatalf("defaults %+v, want %+v", got, d)
	}
	got := parse("--max-conn-buffer", "1MiB", "--max-ip-buffer", "3MiB", "--max-buffer", "1GiB", "--buffer-stall", "2s", "--max-calls-per-session", "9",
		"--max-ip-rate", "2MiB")
	if got.MaxIPRate != 2<<20 || got.MaxConnBuffer != 1<<20 || got.MaxIPBuffer != 3<<20 || got.MaxBuffer != 1<<30 || got.BufferStall.Seconds() != 2 || got.MaxCallsPerSession != 9 {
		t.Fatalf("parsed %+v", got)
	}
	got = parse("--buffer-reserve", "5MiB", "--max-streams-per-ip", "11", "--max-streams-per-principal", "12", "--max-streams", "13")
	if got.BufferReserve != 5<<20 || got.MaxStreamsPerIP != 11 || got.MaxStreamsPerPrincipal != 12 || got.MaxStreams != 13 {
		t.Fatalf("parsed %+v", got)
	}
	app := &cli.App{Flags: limitFlags(), Action: func(*cli.Context) error { return nil }}
	app.Writer, app.ErrWriter = flag.CommandLine.Output(), flag.CommandLine.Output()
	if err := app.Run([]string{"lockcelld", "--max-conn-buffer", "16MB"}); err == nil {
		t.Fatal("a byte size without a unit of KiB, MiB or GiB was accepted")
	}
}

// A proxy's client port takes the replica's budget flags (it faces as
// many clients, often from one address), read the same way, and keeps
// its connection cap as given.
func TestProxyLimitFlags(t *testing.T) {
	var got cell.ConnLimits
	cmd := proxyCommand()
	cmd.Action = func(c *cli.Context) error {
		cfg, err := proxyConfig(c)
		got = cfg.Limits
		return err
	}
	app := &cli.App{Commands: []*cli.Command{cmd}}
	err := app.Run([]string{"lockcelld", "proxy", "--listen", "127.0.0.1:0", "--peers", "127.0.0.1:1", "--insecure",
		"--max-ip-rate", "32MiB", "--max-ip-buffer", "64MiB", "--max-buffer", "256MiB", "--buffer-stall", "3s",
		"--request-timeout", "7s", "--max-conns", "9", "--max-kept-streams-per-ip", "50000"})
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxIPRate != 32<<20 || got.MaxIPBuffer != 64<<20 || got.MaxBuffer != 256<<20 || got.BufferStall != 3*time.Second ||
		got.RequestTimeout != 7*time.Second || got.MaxConns != 9 || got.MaxKeptStreamsPerIP != 50000 {
		t.Fatalf("proxy limits %+v", got)
	}
	if d := cell.DefaultConnLimits; got.MaxConnBuffer != d.MaxConnBuffer || got.BufferReserve != d.BufferReserve {
		t.Fatalf("proxy limits left unset: %+v, want the defaults %+v", got, d)
	}
}

// `lockcelld proxy --cache-reads` turns the read cache on with
// --cache-bytes (64MiB by default); a size under 1MiB is refused with
// exit 2 before anything starts, and without --cache-reads nothing is
// cached whatever --cache-bytes says.
func TestProxyCacheFlags(t *testing.T) {
	run := func(args ...string) (proxy.Config, error) {
		var got proxy.Config
		cmd := proxyCommand()
		cmd.Action = func(c *cli.Context) error {
			cfg, err := proxyConfig(c)
			got = cfg
			return err
		}
		app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
		err := app.Run(append([]string{"lockcelld", "proxy", "--listen", "127.0.0.1:0", "--peers", "127.0.0.1:1", "--insecure"}, args...))
		return got, err
	}
	if cfg, err := run("--cache-reads"); err != nil || !cfg.CacheReads || cfg.CacheBytes != proxy.DefaultCacheBytes {
		t.Fatalf("--cache-reads: %+v %v", cfg, err)
	}
	if cfg, err := run("--cache-reads", "--cache-bytes", "256MiB"); err != nil || cfg.CacheBytes != 256<<20 {
		t.Fatalf("--cache-bytes 256MiB: %d %v", cfg.CacheBytes, err)
	}
	if cfg, err := run("--cache-bytes", "256MiB"); err != nil || cfg.CacheReads {
		t.Fatalf("--cache-bytes alone: %+v %v", cfg, err)
	}
	_, err := run("--cache-reads", "--cache-bytes", "512KiB")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != 2 || !strings.Contains(err.Error(), "below the minimum 1MiB") {
		t.Fatalf("--cache-bytes 512KiB: %v, want exit 2 below the minimum", err)
	}
}
