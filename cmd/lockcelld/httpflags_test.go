package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
)

// The HTTP port's flags reach the replica's configuration; left out, they
// are cell.DefaultHTTPLimits and names for authenticated callers, but for
// the connection cap, passed as 0 so that the replica may lower its
// default to the port's share of file descriptors.
func TestHTTPFlags(t *testing.T) {
	cfg := serveConfigOf(t)
	d := cell.DefaultHTTPLimits
	d.MaxConns = 0
	if cfg.HTTP != d || cfg.HTTPNames != cell.HTTPNamesAuthenticated {
		t.Errorf("defaults %+v, names %q; want %+v, %q", cfg.HTTP, cfg.HTTPNames, d, cell.HTTPNamesAuthenticated)
	}
	cfg = serveConfigOf(t, "--metrics", "127.0.0.1:0", "--http-max-conns-per-ip", "3", "--http-max-conns", "7",
		"--http-read-header-timeout", "2s", "--http-read-timeout", "4s", "--http-write-timeout", "9s", "--http-idle-timeout", "11s",
		"--http-names", "hidden")
	want := cell.HTTPLimits{MaxConnsPerIP: 3, MaxConns: 7, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 4 * time.Second,
		WriteTimeout: 9 * time.Second, IdleTimeout: 11 * time.Second}
	if cfg.HTTP != want || cfg.HTTPNames != cell.HTTPNamesHidden {
		t.Errorf("parsed %+v, names %q", cfg.HTTP, cfg.HTTPNames)
	}
}

// Settings the HTTP port cannot honour stop serve with a usage error
// (exit code 2) naming the flag: a cap above the port's share of file
// descriptors, an unknown --http-names, a plain cell's port off loopback.
// (A negative or zero cap is out of its range: TestFlagRanges.)
func TestHTTPFlagsRefused(t *testing.T) {
	const loop = "1=127.0.0.1:1/127.0.0.1:2"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown names", []string{"--insecure", "--metrics", "127.0.0.1:0", "--http-names", "all"}, "--http-names"},
		{"plain cell, HTTP on all addresses", []string{"--insecure", "--metrics", "0.0.0.0:7201"}, "loopback"},
	}
	if share, _ := cell.HTTPFDShare(); share > 0 {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"cap over the fd share", []string{"--insecure", "--metrics", "127.0.0.1:0", "--http-max-conns", strconv.Itoa(share + 1)},
			"file-descriptor limit"})
	}
	for _, c := range cases {
		err := serveConfigErr(t, loop, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
			continue
		}
		if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 2 {
			t.Errorf("%s: %v is not a usage error (exit code 2)", c.name, err)
		}
	}
	if err := serveConfigErr(t, loop, "--insecure", "--insecure-bind-any", "--metrics", "0.0.0.0:7201"); err != nil {
		t.Errorf("--insecure-bind-any with the HTTP port on all addresses: %v", err)
	}
}

// README's table of the HTTP port's limits names every HTTP flag with the
// default the code uses.
func TestReadmeHTTPTableMatchesFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "Limits of the HTTP port")
	if !ok {
		t.Fatal("README has no table of the HTTP port's limits")
	}
	flags := map[string]cli.Flag{}
	for _, f := range httpFlags() {
		flags["--"+f.Names()[0]] = f
	}
	seen := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(rest, "\n")[1:] {
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
			t.Errorf("README row %q names flag %q, which is not an HTTP flag", cols[0], cols[2])
			continue
		}
		seen[name] = true
		want := ""
		if sf, ok := f.(*cli.StringFlag); ok {
			want = sf.Value
		} else {
			want = flagDefault(t, f)
		}
		if strings.Trim(cols[1], "`") != want {
			t.Errorf("README gives %s the default %q; the flag's default is %q", name, cols[1], want)
		}
	}
	for name := range flags {
		if !seen[name] {
			t.Errorf("README's HTTP table has no row for %s", name)
		}
	}
	if rows == 0 {
		t.Error(errors.New("README's HTTP table has no rows"))
	}
}
