package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"lockcell/fixtures"
)

// lockcell txn reads checks and operations, one a line, from stdin or a
// file, applies them all or none, prints the generation (--json: each
// operation's), and on a failed check names it with the cell's reason and
// code, changing nothing.
func TestTxnVerb(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}
	r.ok("put", "cfg/a", "off")
	r.ok("put", "old", "x")
	gen := statLines(t, r.ok("stat", "cfg/a").stdout)["content generation"]
	if gen == "" {
		t.Fatalf("stat printed no content generation: %q", r.ok("stat", "cfg/a").stdout)
	}
	file := filepath.Join(t.TempDir(), "b")
	if err := os.WriteFile(file, []byte("from a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "# turn both on\ncheck-gen cfg/a " + gen + "\ncheck-missing cfg/b\n\nset cfg/a on now\ncreate cfg/b @" + file + "\nmkdir cfg/d\ndelete old\n"
	res := r.run(script, "--json", "txn")
	if res.code != exitOK {
		t.Fatalf("txn: exit %d, %q", res.code, res.stderr)
	}
	var js struct {
		Generation uint64
		Operations []struct {
			Op, Name   string
			Generation uint64
		}
	}
	if err := json.Unmarshal([]byte(res.stdout), &js); err != nil || len(js.Operations) != 4 || js.Operations[3].Generation != 0 ||
		js.Operations[1].Name != "/ls/t/cfg/b" || js.Operations[1].Generation != js.Generation || js.Generation == 0 {
		t.Fatalf("txn --json printed %q (%+v, %v)", res.stdout, js, err)
	}
	if got := r.ok("cat", "cfg/a").stdout; got != "on now" {
		t.Fatalf("cfg/a holds %q", got)
	}
	if got := r.ok("cat", "cfg/b").stdout; got != "from a file" {
		t.Fatalf("cfg/b holds %q", got)
	}
	if g := statLines(t, r.ok("stat", "cfg/a").stdout)["content generation"]; g != strconv.FormatUint(js.Generation, 10) {
		t.Fatalf("cfg/a is at generation %s, txn said %d", g, js.Generation)
	}

	// The same script again, from a file: its check fails, nothing changes.
	sf := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(sf, []byte(strings.Replace(script, "delete old\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.fails(exitError, "txn check 0 /ls/t/cfg/a: generation mismatch", "txn", sf)
	res = r.fails(exitError, "", "--json", "txn", sf)
	var je struct{ Error, Code string }
	if err := json.Unmarshal([]byte(res.stderr), &je); err != nil || je.Code != "generation_mismatch" {
		t.Fatalf("--json error %q (%v)", res.stderr, err)
	}
	if got := r.ok("cat", "cfg/a").stdout; got != "on now" {
		t.Fatalf("a failed txn wrote cfg/a: %q", got)
	}
	r.fails(exitError, "no checks or operations given", "txn", "-") // stdin is empty
	if res := r.run("frobnicate x\n", "txn"); res.code != exitError || !strings.Contains(res.stderr, `line 1: unknown verb "frobnicate"`) {
		t.Fatalf("unknown verb: exit %d, %q", res.code, res.stderr)
	}
}
