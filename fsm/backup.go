package fsm

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/backupfile"
)

// A backup file's layout is package backupfile's: a magic string, a
// msgpack header, the snapshot exactly as Raft snapshots encode it, and a
// trailing SHA-256. ReadBackup also decodes and validates the snapshot in
// full.

// BackupMagic opens every backup file.
const BackupMagic = backupfile.Magic

// BackupFormat is the version of the backup file layout written here.
const BackupFormat = backupfile.Format

// ErrBadBackup means a file is not a valid lockcell backup: wrong magic,
// an unknown format, cut short, a checksum that does not match its bytes,
// or a snapshot that does not decode. The message says which.
var ErrBadBackup = errors.New("replica: not a valid backup")

// BackupHeader describes the snapshot a backup file holds.
type BackupHeader = backupfile.Header

// Backup is one backup file, held in an unlinked temporary file: on disk
// (or in the page cache), not in the process's memory, so the backups a
// master holds for paging cost it no heap however large the state, and
// nothing is left behind if the process dies. Close frees it.
type Backup struct {
	Header BackupHeader
	// Size is the whole file's length, trailing checksum included.
	Size int64
	// Checksum is the file's trailing SHA-256.
	Checksum [32]byte
	// LockHeld is how long the state machine's read lock was held (applies
	// wait for it): the time to copy the state.
	LockHeld time.Duration

	file  *os.File
	start int64 // where the backup file begins in file
}

// ReadAt reads the backup file's bytes at off (io.ReaderAt).
func (b *Backup) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("replica: backup read at %d", off)
	}
	if off >= b.Size {
		return 0, io.EOF
	}
	n := len(p)
	if rest := b.Size - off; int64(n) > rest {
		n = int(rest)
	}
	got, err := b.file.ReadAt(p[:n], b.start+off)
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// Close frees the backup's disk space. Reads after Close fail.
func (b *Backup) Close() error { return b.file.Close() }

// Backup encodes the whole state at its current applied index as a backup
// file. Under the read lock (applies wait for it) it only copies the
// state's records, shallowly: contents slices are never changed in place,
// so sharing them is safe. Sorting and encoding (the same bytes a Raft
// snapshot of that state has) happen after the lock is released, so the
// cell keeps applying while a large state is encoded. term and now go into
// the header.
//
// The file is written to an unlinked temporary file in the backup
// directory (SetBackupDir; the system's temporary directory if unset):
// the snapshot first, behind room for the prefix, which is written once
// the snapshot's length is known, then the checksum over both, read back
// from the file. A backup then costs the heap only the copy of the state
// while it is built.
func (f *FSM) Backup(term uint64, now time.Time) (*Backup, error) {
	start := time.Now()
	f.mu.RLock()
	img := f.copyLocked()
	h := BackupHeader{Format: BackupFormat, Cell: f.cell, Applied: f.applied, Term: term, Epoch: f.epoch,
		Time: now.UnixNano(), Nodes: uint64(len(f.nodes)), Sessions: uint64(len(f.sessions))}
	f.mu.RUnlock()
	held := time.Since(start)
	file, err := f.backupFile()
	if err != nil {
		return nil, err
	}
	b, err := writeBackup(file, img, h)
	if err != nil {
		file.Close()
		return nil, err
	}
	b.LockHeld = held
	return b, nil
}

// SetBackupDir makes Backup write its temporary files in dir (created if
// missing): a replica puts them beside its data, whose disk it sizes.
func (f *FSM) SetBackupDir(dir string) { f.backupDir.Store(&dir) }

// backupTempPattern names the files backups being paged out are written
// to (and unlinked at once) in the folder given to SetBackupDir.
const backupTempPattern = "backup-*.tmp"

// RemoveBackupLeftovers removes the backup files a process that died
// between creating and unlinking one left in dir, and nothing else.
func RemoveBackupLeftovers(dir string) error {
	left, err := filepath.Glob(filepath.Join(dir, backupTempPattern))
	if err != nil {
		return err
	}
	for _, name := range left {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove a backup left behind: %w", err)
		}
	}
	return nil
}

// backupFile creates an unlinked temporary file for a backup.
func (f *FSM) backupFile() (*os.File, error) {
	dir := os.TempDir()
	if d := f.backupDir.Load(); d != nil {
		dir = *d
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("replica: backup directory: %w", err)
		}
	}
	file, err := os.CreateTemp(dir, backupTempPattern)
	if err != nil {
		return nil, fmt.Errorf("replica: backup file: %w", err)
	}
	// Unlinked at once: the open file keeps its data until Close, and a
	// crash leaves nothing to clean up.
	if err := os.Remove(file.Name()); err != nil {
		file.Close()
		return nil, fmt.Errorf("replica: backup file: %w", err)
	}
	return file, nil
}

// writeBackup lays out img with header h in file and returns the backup.
func writeBackup(file *os.File, img *snapshotImage, h BackupHeader) (*Backup, error) {
	room := int64(backupfile.MaxHeader + len(backupfile.Magic) + 4)
	w := bufio.NewWriterSize(io.NewOffsetWriter(file, room), 1<<20)
	counted := &countingWriter{w: w}
	if err := encodeImage(counted, img); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("replica: write backup: %w", err)
	}
	h.Length = uint64(counted.n)
	prefix, err := backupfile.Prefix(&h)
	if err != nil {
		return nil, err
	}
	if int64(len(prefix)) > room { // cannot be: the header is at most MaxHeader
		return nil, fmt.Errorf("replica: backup header of %d bytes", len(prefix))
	}
	begin := room - int64(len(prefix))
	if _, err := file.WriteAt(prefix, begin); err != nil {
		return nil, fmt.Errorf("replica: write backup: %w", err)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(file, begin, int64(len(prefix))+counted.n)); err != nil {
		return nil, fmt.Errorf("replica: read backup back: %w", err)
	}
	b := &Backup{Header: h, file: file, start: begin, Size: int64(len(prefix)) + counted.n + sha256.Size}
	sum.Sum(b.Checksum[:0])
	if _, err := file.WriteAt(b.Checksum[:], room+counted.n); err != nil {
		return nil, fmt.Errorf("replica: write backup: %w", err)
	}
	return b, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// copyLocked copies the state into an unsorted image; f.mu is held.
// Nodes, sessions and handles are copied (applies change them in place),
// with their lock queues and de-duplication tables; contents, keys and
// results are shared (never changed once stored).
func (f *FSM) copyLocked() *snapshotImage {
	img := &snapshotImage{Version: snapshotVersion, Cell: f.cell, Epoch: f.epoch, Applied: f.applied, Key: f.cellKey,
		LastIndex: f.snapshotLastIndex(),
		Nodes:     make([]*Node, 0, len(f.nodes)), Sessions: make([]*Session, 0, len(f.sessions)),
		Handles: make([]*Handle, 0, len(f.handles))}
	nodes := make([]Node, len(f.nodes))
	i := 0
	for _, n := range f.nodes {
		c := &nodes[i]
		i++
		*c = *n
		c.Holders, c.Waiters = slices.Clone(n.Holders), slices.Clone(n.Waiters)
		c.children, c.kids = nil, dirIndex{}
		img.Nodes = append(img.Nodes, c)
	}
	for id, s := range f.sessions {
		c := *s
		c.handles = nil
		img.Sessions = append(img.Sessions, &c)
		for q, r := range s.Results {
			img.Results = append(img.Results, sessionResult{Session: id, Seq: q, Result: r})
		}
	}
	hs := make([]Handle, len(f.handles))
	i = 0
	for _, h := range f.handles {
		hs[i] = *h
		img.Handles = append(img.Handles, &hs[i])
		i++
	}
	f.members.image(img) // a copy: sorted builds a fresh slice
	img.Version = imageVersion(img)
	return img
}

// encodeImage sorts an image copied by copyLocked into the order
// encodeLocked writes and encodes it as encodeLocked does, so the bytes
// are those of a snapshot of the same state.
func encodeImage(buf io.Writer, img *snapshotImage) error {
	slices.SortFunc(img.Nodes, func(a, b *Node) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(img.Sessions, func(a, b *Session) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(img.Handles, func(a, b *Handle) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(img.Results, func(a, b sessionResult) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Seq, b.Seq))
	})
	enc := msgpack.NewEncoder(buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(img); err != nil {
		return fmt.Errorf("replica: encode backup: %w", err)
	}
	return nil
}

// BackupContents is a backup file read and checked by ReadBackup.
type BackupContents struct {
	Header   BackupHeader
	Checksum [32]byte
	// Snapshot is the snapshot bytes, decoded and validated.
	Snapshot []byte
	img      *snapshotImage
}

// ReadBackup reads a whole backup file from r and checks it: the magic and
// format, the lengths (a file cut short says how many bytes are missing),
// the trailing SHA-256 (a flipped byte anywhere fails it), nothing after
// it, and then the snapshot decoded and validated in full as Restore would,
// against the header's cell, index and node count. Every failure wraps
// ErrBadBackup.
func ReadBackup(r io.Reader) (*BackupContents, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadBackup}, args...)...)
	}
	file, err := backupfile.Read(r, maxSnapshotSize, ErrBadBackup)
	if err != nil {
		return nil, err
	}
	h, snap, got := file.Header, file.Snapshot, file.Checksum
	img, err := decodeSnapshot(snap)
	if err != nil {
		return nil, bad("%v", err)
	}
	if img.Cell != h.Cell || img.Applied != h.Applied || uint64(len(img.Nodes)) != h.Nodes {
		return nil, bad("the header (cell %q, index %d, %d nodes) does not describe its snapshot (cell %q, index %d, %d nodes)",
			h.Cell, h.Applied, h.Nodes, img.Cell, img.Applied, len(img.Nodes))
	}
	// Validation builds the whole state in a scratch FSM (and consumes the
	// image), so decode a second image for the caller.
	if _, err := NewFSM(h.Cell, nil).restoredState(img); err != nil {
		return nil, bad("%v", err)
	}
	img, err = decodeSnapshot(snap)
	if err != nil {
		return nil, bad("%v", err)
	}
	return &BackupContents{Header: h, Checksum: got, Snapshot: snap, img: img}, nil
}

// SeedResult describes a seeded data folder.
type SeedResult struct {
	Header BackupHeader
	// Nodes and DroppedEphemeral count the nodes kept and the ephemeral
	// nodes dropped with their sessions (with the containers they left
	// empty); Sessions counts the sessions dropped.
	Nodes, DroppedEphemeral, Sessions int
	// StateHash is the SHA-256 of the seeded state (FSM.StateHash of a
	// replica started on it, before any new entry).
	StateHash [32]byte
}

// SeedState is the state a backup seeds a new cell named cell with (see
// the node's Seed): b's state with every session and what hangs on it
// dropped, encoded as snapshot bytes, and what was kept and dropped (its
// Header, Nodes, DroppedEphemeral, Sessions and StateHash filled in).
func SeedState(b *BackupContents, cell string) ([]byte, *SeedResult, error) {
	img, res := stripSessions(b.img)
	next, err := NewFSM(cell, nil).restoredState(img)
	if err != nil {
		return nil, nil, fmt.Errorf("replica: seed: %w", err)
	}
	next.usage = usageOf(next.nodes, next.Root())
	snap, err := next.encodeLocked()
	if err != nil {
		return nil, nil, err
	}
	res.Header, res.Nodes, res.StateHash = b.Header, len(next.nodes), sha256.Sum256(snap)
	return snap, res, nil
}

// stripSessions returns the image without sessions and what hangs on them
// (see replica.Seed). img's nodes are copied, not changed.
func stripSessions(img *snapshotImage) (*snapshotImage, *SeedResult) {
	res := &SeedResult{Sessions: len(img.Sessions)}
	out := &snapshotImage{Version: img.Version, Cell: img.Cell, Epoch: img.Epoch, Applied: img.Applied, Key: img.Key,
		LastIndex: img.LastIndex}
	dropped := map[string]bool{}
	for _, n := range img.Nodes { // in name order: a parent comes before its children
		if n.Ephemeral || dropped[parentOf(n.Path)] {
			dropped[n.Path] = true
			res.DroppedEphemeral++
			continue
		}
		c := *n
		c.Holders, c.Waiters, c.LockMode, c.LockDelayUntil, c.LockDelayBy = nil, nil, LockFree, 0, nil
		c.SemDelays = nil // the semaphore (its SemLimit) is kept, free
		c.children, c.kids, c.openHandles = nil, dirIndex{}, 0
		out.Nodes = append(out.Nodes, &c)
	}
	out.Nodes = dropEmptiedContainers(out.Nodes, dropped, res)
	return out, res
}

// dropEmptiedContainers drops the containers (ttl.go) that lost their last
// child to stripSessions, as the end of those children's sessions would
// have: deepest first, so a chain of containers goes as in removeNode.
// nodes are in name order, each parent before its children.
func dropEmptiedContainers(nodes []*Node, dropped map[string]bool, res *SeedResult) []*Node {
	kids, lost := map[string]int{}, map[string]bool{}
	for _, n := range nodes {
		kids[parentOf(n.Path)]++
	}
	for p := range dropped {
		lost[parentOf(p)] = true
	}
	gone := map[string]bool{}
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		if n.Container && lost[n.Path] && kids[n.Path] == 0 {
			gone[n.Path] = true
			kids[parentOf(n.Path)]--
			lost[parentOf(n.Path)] = true
			res.DroppedEphemeral++
		}
	}
	if len(gone) == 0 {
		return nodes
	}
	kept := nodes[:0]
	for _, n := range nodes {
		if !gone[n.Path] {
			kept = append(kept, n)
		}
	}
	return kept
}

// BackupPreview returns what replica.Seed would keep and drop of b, writing
// nothing (for a dry run).
func BackupPreview(b *BackupContents) (nodes, droppedEphemeral, sessions int) {
	img, res := stripSessions(b.img)
	return len(img.Nodes), res.DroppedEphemeral, res.Sessions
}
