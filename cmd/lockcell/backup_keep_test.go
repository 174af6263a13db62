package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"lockcell/backupfile"
)

// TestBackupDirKeep runs the scheduled-backup form through the real
// binary: backup --dir DIR --keep N writes DIR/<cell>-<UTC time>.lcb,
// verifies it, deletes the cell's older scheduled backups but the newest
// N (saying which), and leaves every other file in DIR alone.
func TestBackupDirKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	runBin := cliOnCell(t)
	dir := t.TempDir()
	// Three older scheduled backups of this cell (their contents do not
	// matter to retention), and files retention must not touch.
	old := time.Now().Add(-72 * time.Hour)
	var olds []string
	for i := range 3 {
		n := backupfile.ScheduledName("t", old.Add(time.Duration(i)*24*time.Hour))
		olds = append(olds, filepath.Join(dir, n))
		os.WriteFile(filepath.Join(dir, n), []byte("old"), 0o600)
	}
	keepers := []string{backupfile.ScheduledName("other", old), "t-by-hand.lcb", "notes.txt"}
	for _, n := range keepers {
		os.WriteFile(filepath.Join(dir, n), []byte("keep"), 0o600)
	}

	res := runBin("--json", "backup", "--dir", dir, "--keep", "2")
	var out struct {
		File    string   `json:"file"`
		SHA256  string   `json:"sha256"`
		Removed []string `json:"removed"`
	}
	if res.code != exitOK || json.Unmarshal([]byte(res.stdout), &out) != nil {
		t.Fatalf("backup --dir --keep 2: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if filepath.Dir(out.File) != dir || !strings.HasPrefix(filepath.Base(out.File), "t-") || !strings.HasSuffix(out.File, ".lcb") {
		t.Fatalf("the new backup is %q", out.File)
	}
	if v := runBin("backup", "--verify", out.File); v.code != exitOK {
		t.Fatalf("the new backup does not verify: %q", v.stderr)
	}
	if !slices.Equal(out.Removed, olds[:2]) {
		t.Fatalf("removed %v, want the two oldest %v", out.Removed, olds[:2])
	}
	left, err := backupfile.Scheduled(dir, "t")
	if err != nil || !slices.Equal(left, []string{olds[2], out.File}) {
		t.Fatalf("scheduled backups left %v (%v), want %v and the new one", left, err, olds[2])
	}
	for _, n := range keepers {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was deleted: %v", n, err)
		}
	}

	// Mistakes are usage errors, before any dialing.
	for _, args := range [][]string{{"backup", "--keep", "2", "x.lcb"}, {"backup", "--dir", dir, "x.lcb"},
		{"backup", "--dir", dir, "--keep", "-1"}, {"backup", "--dir", dir, "--verify"}} {
		if res := runBin(args...); res.code != exitUsage {
			t.Errorf("lockcell %s: exit %d, stderr %q; want a usage error", strings.Join(args, " "), res.code, res.stderr)
		}
	}
}
