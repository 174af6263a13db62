package backupfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Scheduled backups go into one folder under names that sort by time,
// <cell>-<UTC time>.lcb (lockcell-prod-20261203T040000Z.lcb), so that
// keeping the newest N is a sort of names. Retention only ever touches
// files of exactly that form for that cell: a file an operator put there,
// or another cell's backups, stay.

// timeLayout is the time in a scheduled backup's name: UTC, to the
// second, no separators that a shell or a Windows copy would mind.
const timeLayout = "20060102T150405Z"

// Ext is a backup file's name extension.
const Ext = ".lcb"

// ScheduledName is the file name of cell's backup taken at t.
func ScheduledName(cell string, t time.Time) string {
	return cell + "-" + t.UTC().Format(timeLayout) + Ext
}

// scheduledTime parses a scheduled backup's name for cell; ok is false
// for any other name.
func scheduledTime(cell, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, cell+"-")
	if !ok {
		return time.Time{}, false
	}
	stamp, ok := strings.CutSuffix(rest, Ext)
	if !ok || len(stamp) != len(timeLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(timeLayout, stamp)
	return t, err == nil
}

// Scheduled lists cell's scheduled backups in dir, oldest first.
func Scheduled(dir, cell string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("backupfile: %w", err)
	}
	type entry struct {
		name string
		t    time.Time
	}
	var found []entry
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if t, ok := scheduledTime(cell, e.Name()); ok {
			found = append(found, entry{e.Name(), t})
		}
	}
	slices.SortFunc(found, func(a, b entry) int { return a.t.Compare(b.t) })
	out := make([]string, len(found))
	for i, e := range found {
		out[i] = filepath.Join(dir, e.name)
	}
	return out, nil
}

// Prune deletes cell's scheduled backups in dir but the newest keep
// (keep >= 1), oldest first, and returns the paths it deleted. It stops
// at the first file it cannot delete.
func Prune(dir, cell string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, errors.New("backupfile: keep at least one backup")
	}
	all, err := Scheduled(dir, cell)
	if err != nil {
		return nil, err
	}
	var removed []string
	for len(all) > keep {
		if err := os.Remove(all[0]); err != nil {
			return removed, fmt.Errorf("backupfile: %w", err)
		}
		removed = append(removed, all[0])
		all = all[1:]
	}
	return removed, nil
}
