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
	log, closeFn, err := OpenAuditLog(path, true)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("audit", "principal", "alice", "op", "Open", "result", "permission denied")
	if err := closeFn(); err != nil {
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
	_, closeFn, err = OpenAuditLog(fresh, false)
	if err != nil {
		t.Fatal(err)
	}
	closeFn()
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
