package cell

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An audit file is appended to (never truncated), created private, holds
// one JSON object a line with --log-json, and "off" writes nothing.
func TestOpenAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte("earlier line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log, file, err := OpenAuditLog(path, true)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("audit", "principal", "alice", "op", "Open", "result", "permission denied")
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "earlier line" {
		t.Fatalf("audit file %q: want the earlier line kept and one more", b)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil || rec["principal"] != "alice" || rec["msg"] != "audit" {
		t.Fatalf("audit line %q: %v %v", lines[1], rec, err)
	}
	fresh := filepath.Join(t.TempDir(), "new.log")
	_, file, err = OpenAuditLog(fresh, false)
	if err != nil {
		t.Fatal(err)
	}
	file.Close()
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("new audit file: %v %v, want mode 0600", st.Mode(), err)
	}
	off, _, err := OpenAuditLog("off", false)
	if err != nil || off.Enabled(t.Context(), 8) {
		t.Fatalf("off: %v, enabled %v", err, off.Enabled(t.Context(), 8))
	}
	if _, _, err := OpenAuditLog(filepath.Join(t.TempDir(), "no", "such", "dir", "a.log"), false); err == nil {
		t.Fatal("an audit file in a missing folder opened")
	}
}

// Rotation: the operator renames the file and the process reopens it
// (SIGHUP): lines before go to the renamed file, lines after to a new one
// at the path, none lost.
func TestAuditLogReopensAfterRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, file, err := OpenAuditLog(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	log.Info("audit", "n", 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	log.Info("audit", "n", 2) // still the renamed file, until reopened
	if err := file.Reopen(); err != nil {
		t.Fatal(err)
	}
	log.Info("audit", "n", 3)
	count := func(p string) int {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	if old, cur := count(path+".1"), count(path); old != 2 || cur != 1 {
		t.Fatalf("rotated file has %d lines, new file %d: want 2 and 1", old, cur)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("reopened file: %v %v, want mode 0600", st.Mode(), err)
	}
}
