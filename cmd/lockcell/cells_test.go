package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lockcell/fixtures"
)

// TestCLINamesOfOtherCells runs the real binary from a shell pointed at
// cell west (LOCKCELL_CELL, LOCKCELL_REPLICAS) with a cells file
// (LOCKCELL_CELLS): a name of cell east reaches east; --cell east without
// replicas finds them in the file; names of two cells in one command,
// and a cell the file does not list, fail with codes a script can tell
// apart; without a cells file a name of another cell is still refused as
// before.
func TestCLINamesOfOtherCells(t *testing.T) {
	bin := buildCLI(t)
	cells := fixtures.NewCells(t, 1, fixtures.Options{}, "west", "east")
	file := fixtures.WriteCellsFile(t, cells)
	env := []string{"LOCKCELL_CELL=west", "LOCKCELL_REPLICAS=" + strings.Join(cells["west"].Addrs(), ","),
		"LOCKCELL_CELLS=" + file}
	run := func(args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", env, append([]string{"--timeout", "20s"}, args...)...)
	}
	ok := func(args ...string) result {
		t.Helper()
		res := run(args...)
		if res.code != exitOK {
			t.Fatalf("lockcell %s: exit %d, stderr %q", strings.Join(args, " "), res.code, res.stderr)
		}
		return res
	}
	ok("put", "/ls/east/x", "from west's shell")
	ok("put", "x", "west's own")
	if got := ok("cat", "/ls/east/x").stdout; got != "from west's shell" {
		t.Fatalf("cat /ls/east/x = %q", got)
	}
	if got := ok("cat", "x").stdout; got != "west's own" {
		t.Fatalf("cat x (west) = %q", got)
	}
	// The value is in east itself: with --cell east and no --replicas,
	// east's replicas come from the cells file.
	if res := runCLI(t, bin, "", []string{"LOCKCELL_CELLS=" + file}, "--cell", "east", "cat", "x"); res.code != exitOK || res.stdout != "from west's shell" {
		t.Fatalf("--cell east cat x: exit %d, %q, %q", res.code, res.stdout, res.stderr)
	}
	for _, c := range []struct {
		stdin string
		args  []string
		code  string
	}{
		{"", []string{"--json", "cat", "/ls/nowhere/x"}, "unknown_cell"},
		{"create /ls/east/y 1\ncreate /ls/west/y 1\n", []string{"--json", "txn"}, "cross_cell"},
	} {
		res := runCLI(t, bin, c.stdin, env, c.args...)
		var e struct{ Code string }
		json.Unmarshal([]byte(res.stderr), &e)
		if res.code != exitError || e.Code != c.code {
			t.Errorf("lockcell %s: exit %d, stderr %q; want exit %d with code %q", strings.Join(c.args, " "), res.code, res.stderr, exitError, c.code)
		}
	}
	// A home cell the file does not list is no obstacle to a name of
	// a cell it does, and fails a name of its own as unknown.
	if res := runCLI(t, bin, "", []string{"LOCKCELL_CELLS=" + file}, "cat", "/ls/east/x"); res.code != exitOK || res.stdout != "from west's shell" {
		t.Fatalf("cell local (not in the file) cat /ls/east/x: exit %d, %q, %q", res.code, res.stdout, res.stderr)
	}
	if res := runCLI(t, bin, "", []string{"LOCKCELL_CELLS=" + file}, "--json", "cat", "x"); res.code != exitError || !strings.Contains(res.stderr, `"unknown_cell"`) {
		t.Fatalf("cell local (not in the file) cat x: exit %d, %q", res.code, res.stderr)
	}
	res := runCLI(t, bin, "", env[:2], "cat", "/ls/east/x")
	if res.code == exitOK || !strings.Contains(res.stderr, "/ls/west/") {
		t.Fatalf("without a cells file: exit %d, stderr %q; want the name refused", res.code, res.stderr)
	}
}
