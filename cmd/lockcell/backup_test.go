package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// backup writes a file that --verify accepts, prints one summary line (or
// JSON) and nothing on a stderr that is not a terminal; a file that is
// not a backup, or no FILE, are reported.
func TestBackupVerb(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}
	r.ok("put", "a", "alpha")
	r.ok("put", "b", "beta")
	dir := t.TempDir()
	file := filepath.Join(dir, "t.lcb")
	res := r.ok("backup", file)
	if res.stderr != "" || !strings.HasPrefix(res.stdout, file+": cell t, index ") || !strings.Contains(res.stdout, "sha256 ") {
		t.Fatalf("backup printed %q / %q", res.stdout, res.stderr)
	}
	if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
	var sum struct {
		File     string `json:"file"`
		Cell     string `json:"cell"`
		Index    uint64 `json:"index"`
		Nodes    uint64 `json:"nodes"`
		Bytes    int64  `json:"bytes"`
		Checksum string `json:"checksum"`
		SHA256   string `json:"sha256"`
	}
	file2 := filepath.Join(dir, "t2.lcb")
	if err := json.Unmarshal([]byte(r.ok("backup", "--json", file2).stdout), &sum); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file2)
	if err != nil || sum.File != file2 || sum.Cell != "t" || sum.Nodes != 3 || sum.Bytes != fi.Size() || len(sum.Checksum) != 64 || sum.Index == 0 {
		t.Fatalf("backup --json %+v; file %v %v", sum, fi, err)
	}
	if out := r.ok("backup", "--verify", file2).stdout; !strings.Contains(out, ": ok: cell t, index ") || !strings.Contains(out, "sha256 "+sum.SHA256) {
		t.Fatalf("verify printed %q", out)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a backup at all, just some text"), 0o600)
	r.fails(exitError, "not a lockcell backup", "backup", "--verify", junk)
	r.fails(exitUsage, "", "backup")
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	b := &progressBar{w: &buf, start: time.Now().Add(-time.Second)}
	b.update(512<<10, 2<<20)
	b.update(2<<20, 2<<20)
	b.finish()
	out := buf.String()
	for _, want := range []string{"\r[=======", " 25% 512.0 KiB / 2.0 MiB", "100% 2.0 MiB / 2.0 MiB", "/s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("progress %q lacks %q", out, want)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("progress %q does not end its line", out)
	}
	var none *progressBar // not a terminal: no bar
	none.update(1, 2)
	none.finish()
}
