package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupBinaryRefusesOverwriteAndPrintsFileSHA256 runs backup through
// the real binary: the sha256 it prints (and its --json "sha256", and
// --verify's) is the SHA-256 of the whole file as written, what
// crypto/sha256 and sha256sum compute over the file's bytes; a second
// backup to the same FILE is refused without --force and leaves the file
// as it was, and --force replaces it.
func TestBackupBinaryRefusesOverwriteAndPrintsFileSHA256(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runBin := cliOnCell(t)
	fileSum := func(path string) (string, []byte) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:]), b
	}
	if res := runBin("put", "a", "alpha"); res.code != exitOK {
		t.Fatalf("put: %q", res.stderr)
	}
	file := filepath.Join(t.TempDir(), "cell.lcb")
	res := runBin("backup", file)
	if res.code != exitOK {
		t.Fatalf("backup: exit %d, stderr %q", res.code, res.stderr)
	}
	sum, first := fileSum(file)
	if !strings.HasSuffix(strings.TrimSpace(res.stdout), "sha256 "+sum) {
		t.Fatalf("backup printed %q; the file's SHA-256 is %s", res.stdout, sum)
	}
	if out, err := exec.Command("sha256sum", file).Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) == 0 || f[0] != sum {
			t.Fatalf("sha256sum says %q, backup printed %s", out, sum)
		}
	}
	if res := runBin("backup", "--verify", file); res.code != exitOK || !strings.Contains(res.stdout, "sha256 "+sum) {
		t.Fatalf("backup --verify: exit %d, %q; want sha256 %s", res.code, res.stdout, sum)
	}

	// Again to the same file: refused, before and whatever the cell
	// holds now, and the file is untouched.
	runBin("put", "b", "beta")
	res = runBin("backup", file)
	if res.code != exitError || !strings.Contains(res.stderr, "exists") || !strings.Contains(res.stderr, "--force") {
		t.Fatalf("backup over an existing file: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runBin("--json", "backup", file)
	var e struct{ Error, Code string }
	if res.code != exitError || json.Unmarshal([]byte(res.stderr), &e) != nil || e.Code != "exists" {
		t.Fatalf("--json backup over an existing file: exit %d, stderr %q", res.code, res.stderr)
	}
	if _, now := fileSum(file); !bytes.Equal(now, first) {
		t.Fatal("a refused backup changed the file")
	}

	// --force replaces it; --json's sha256 is the new file's.
	res = runBin("--json", "backup", "--force", file)
	var out struct {
		SHA256   string `json:"sha256"`
		Checksum string `json:"checksum"`
		Nodes    int    `json:"nodes"`
	}
	if res.code != exitOK || json.Unmarshal([]byte(res.stdout), &out) != nil {
		t.Fatalf("backup --force: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	sum2, now := fileSum(file)
	if bytes.Equal(now, first) || out.SHA256 != sum2 || out.Nodes != 3 {
		t.Fatalf("backup --force: %+v; the file's SHA-256 is %s (changed: %v)", out, sum2, !bytes.Equal(now, first))
	}
	// "checksum" stays the one the file ends with: of the bytes before it.
	inner := sha256.Sum256(now[:len(now)-sha256.Size])
	if out.Checksum != hex.EncodeToString(inner[:]) || !bytes.Equal(now[len(now)-sha256.Size:], inner[:]) {
		t.Fatalf("checksum %s is not the SHA-256 the file ends with", out.Checksum)
	}
	if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("a partial file is left: %v", err)
	}
}
