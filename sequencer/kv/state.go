package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const stateVersion = 1

// state is the content of the state file.
type state struct {
	Version int               `json:"version"`
	Data    map[string][]byte `json:"data"`
	// Guard is sequencer.Guard's State: the highest accepted generation
	// per lock.
	Guard map[string]uint64 `json:"guard"`
}

// loadState reads the state file; a missing file is an empty state.
func loadState(path string) (state, error) {
	var st state
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("kv: reading the state file: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("kv: state file %s is corrupt: %w", path, err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("kv: state file %s has version %d, want %d", path, st.Version, stateVersion)
	}
	return st, nil
}

// saveState replaces the state file atomically and durably: it writes a
// temporary file in the same folder, syncs it, renames it over the old
// one and syncs the folder. An error wrapping errNotDurable means the new
// state is in place but the folder sync failed.
func saveState(path string, st state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("kv: encoding the state: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("kv: saving the state: %w", err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("kv: saving the state: %w", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("kv: saving the state: %w", err)
	}
	renamed = true
	// The new state is in place; a failure from here on only leaves its
	// durability across a crash in doubt, so the write stands.
	d, derr := os.Open(dir)
	if derr == nil {
		derr = d.Sync()
		d.Close()
	}
	if derr != nil {
		return fmt.Errorf("%w: syncing %s: %v", errNotDurable, dir, derr)
	}
	return nil
}

// errNotDurable: the state file was replaced but its folder could not be
// synced.
var errNotDurable = errors.New("kv: state saved, durability in doubt")
