package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// Seeding a new replica's data folder from a backup: the state is the
// fsm's (fsm.SeedState), the folder, the Raft snapshot store and the
// stable store's term are the node's.

// SeedConfig says where and as what a backup is restored.
type SeedConfig struct {
	// Dir is the new replica's data folder. It must not exist or be empty.
	Dir string
	// ID is the new replica's Raft id; it must appear in Peers.
	ID string
	// Cell is the new cell's name; it must equal the backup's (the cell
	// name is part of every node name and every sequencer). Empty takes
	// the backup's.
	Cell string
	// Peers are every voting member of the new cell, this one included,
	// as `serve` will be given them.
	Peers  []Peer
	Logger *slog.Logger
}

// ErrDirNotEmpty means a restore was pointed at a data folder that holds
// something: a restore only ever seeds a new replica.
var ErrDirNotEmpty = errors.New("replica: data folder is not empty")

// ErrCellMismatch means a backup of one cell was restored as another.
var ErrCellMismatch = errors.New("replica: backup is of another cell")

// Seed writes the state of a checked backup into a new replica's data
// folder, as a Raft snapshot at the backup's index and term whose
// configuration is cfg.Peers, with the term stored as the current one. A
// replica opened on the folder restores that snapshot and has Raft state,
// so it does not bootstrap; every member of the new cell is seeded from
// the same backup with the same peers, so they all start at the same
// index, state and configuration and elect a master among themselves.
//
// Sessions are not restored: every session, its handles, its
// de-duplication results, the locks its handles held or waited for, and
// the ephemeral nodes (which live only with their sessions) are dropped,
// as if every session had expired, except that nothing else changes:
// every other node keeps its stat (instance, generations, times, ACL names)
// and contents exactly, and no lock-delay is left. The cell's sequencer
// key and the ACL files come along.
func Seed(b *fsm.BackupContents, cfg SeedConfig) (*fsm.SeedResult, error) {
	if cfg.Cell == "" {
		cfg.Cell = b.Header.Cell
	}
	if cfg.Cell != b.Header.Cell {
		return nil, fmt.Errorf("%w: the backup is of cell %q, not %q (the cell name is part of every name and sequencer)",
			ErrCellMismatch, b.Header.Cell, cfg.Cell)
	}
	var servers []raft.Server
	self := false
	for _, p := range cfg.Peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		self = self || p.ID == cfg.ID
	}
	if !self {
		return nil, fmt.Errorf("replica: id %q is not among the peers", cfg.ID)
	}
	if err := emptyDir(cfg.Dir); err != nil {
		return nil, err
	}
	snap, res, err := fsm.SeedState(b, cfg.Cell)
	if err != nil {
		return nil, err
	}

	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("replica: seed: %w", err)
	}
	if err := seedInto(cfg.Dir, b, servers, snap, log); err != nil {
		// The folder was empty or missing: leave it empty, so the
		// restore can simply be run again.
		if names, rerr := filepath.Glob(filepath.Join(cfg.Dir, "*")); rerr == nil {
			for _, n := range names {
				os.RemoveAll(n)
			}
		}
		return nil, err
	}
	return res, nil
}

// seedInto writes snap into an empty data folder as Seed describes.
func seedInto(dir string, b *fsm.BackupContents, servers []raft.Server, snap []byte, log *slog.Logger) error {
	store, err := OpenStore(filepath.Join(dir, "raft"), log)
	if err != nil {
		return fmt.Errorf("replica: seed: open store: %w", err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, newHCLogger(log))
	if err != nil {
		return fmt.Errorf("replica: seed: snapshot store: %w", err)
	}
	term := max(b.Header.Term, 1)
	index := b.Header.Applied
	// Raft's stable store must know the term, or the new replica would
	// start at term 0 behind its own snapshot. The snapshot is
	// written last: raft's store renames it into place when complete, so
	// it marks a finished restore.
	if err := store.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return fmt.Errorf("replica: seed: store term: %w", err)
	}
	// Create encodes the configuration's peers the legacy way too, through
	// a transport's EncodePeer, which for every transport here is the
	// address as bytes: an in-memory transport does that and holds nothing.
	_, enc := raft.NewInmemTransport("")
	defer enc.Close()
	sink, err := snaps.Create(1, index, term, raft.Configuration{Servers: servers}, index, enc)
	if err != nil {
		return fmt.Errorf("replica: seed: create snapshot: %w", err)
	}
	if _, err := sink.Write(snap); err != nil {
		sink.Cancel()
		return fmt.Errorf("replica: seed: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("replica: seed: write snapshot: %w", err)
	}
	return store.Close()
}

// emptyDir refuses a data folder that exists and holds anything.
func emptyDir(dir string) error {
	if dir == "" {
		return errors.New("replica: no data folder given")
	}
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: data folder: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && err != io.EOF {
		return fmt.Errorf("replica: data folder %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: %s holds %s; a restore seeds a new replica only", ErrDirNotEmpty, dir, names[0])
	}
	return nil
}

// backupTempDir is the folder of a replica's data directory where backups
// being paged out are written (and unlinked at once): the FSM's backup
// folder (fsm.FSM.SetBackupDir).
const backupTempDir = "backup-tmp"

// Term returns the replica's current Raft term.
func (r *Replica) Term() uint64 { return r.raft.CurrentTerm() }
