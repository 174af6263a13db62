package backupfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestPruneKeepsTheNewest: of a cell's scheduled backups the newest keep
// stay and the older go, oldest first; other files (another cell's, a
// hand-made copy, a partial file, a folder) are never touched.
func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	var mine []string
	for i := range 5 {
		n := ScheduledName("prod", t0.Add(time.Duration(i)*24*time.Hour))
		mine = append(mine, n)
	}
	others := []string{ScheduledName("prod-eu", t0), ScheduledName("staging", t0), "prod-manual.lcb",
		ScheduledName("prod", t0.Add(time.Hour)) + ".partial", "prod-2026.lcb"}
	// Written newest first, so that no order on disk helps.
	for _, n := range append(slices.Clone(others), mine[4], mine[2], mine[0], mine[3], mine[1]) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ScheduledName("prod", t0.Add(-time.Hour))), 0o700); err != nil {
		t.Fatal(err)
	}
	if mine[0] != "prod-20261201T040000Z.lcb" {
		t.Fatalf("name %q", mine[0])
	}
	removed, err := Prune(dir, "prod", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, mine[0]), filepath.Join(dir, mine[1]), filepath.Join(dir, mine[2])}
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	left, _ := Scheduled(dir, "prod")
	if !slices.Equal(left, []string{filepath.Join(dir, mine[3]), filepath.Join(dir, mine[4])}) {
		t.Fatalf("left %v", left)
	}
	for _, n := range others {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was touched: %v", n, err)
		}
	}
	if removed, err := Prune(dir, "prod", 2); err != nil || len(removed) != 0 {
		t.Fatalf("a second prune removed %v (%v)", removed, err)
	}
	if _, err := Prune(dir, "prod", 0); err == nil {
		t.Fatal("keep 0 accepted")
	}
}
