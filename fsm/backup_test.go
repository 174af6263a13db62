package fsm

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/backupfile"
)

// backupFixture is an FSM with a cell key, plain files and a directory,
// a session holding an exclusive lock with a waiter queued, and an
// ephemeral file of that session.
func backupFixture(t testing.TB) *fsmtH {
	h := newFSMT(t)
	if r := h.raw(Command{Payload: &CellKeyArgs{Key: bytes.Repeat([]byte{7}, 32)}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	s := h.session()
	h.mustOpen(s, "dir", fsmtRWC|FlagDirectory)
	f := h.mustOpen(s, "dir/file", fsmtRWC)
	wantOK(t, "set", h.set(s, f, "contents"))
	lk := h.mustOpen(s, "lock", fsmtRWC)
	if r, _ := h.acquire(s, lk, LockExclusive, false); !r.Granted {
		t.Fatalf("acquire: %+v", r)
	}
	s2 := h.session()
	lk2 := h.mustOpen(s2, "lock", fsmtRW)
	if r, _ := h.acquire(s2, lk2, LockExclusive, true); !r.Queued {
		t.Fatalf("queued acquire: %+v", r)
	}
	h.mustOpen(s, "eph", fsmtRWC|FlagEphemeral)
	return h
}

func TestBackupReadBackAndSeed(t *testing.T) {
	h := backupFixture(t)
	b, err := h.f.Backup(3, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	file := backupBytes(t, b)
	hd := b.Header
	if hd.Cell != fsmtCell || hd.Applied != h.idx || hd.Term != 3 || hd.Nodes != 5 || hd.Sessions != 2 || hd.Time != 100e9 {
		t.Fatalf("header %+v (applied %d)", hd, h.idx)
	}
	if !bytes.Equal(file[len(file)-32:], b.Checksum[:]) {
		t.Fatal("the file does not end with its checksum")
	}
	got, err := ReadBackup(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if got.Header != hd || !bytes.Equal(got.Snapshot, h.snapshot()) {
		t.Fatalf("read back %+v; snapshot equal %v", got.Header, bytes.Equal(got.Snapshot, h.snapshot()))
	}

	// The state a seeded replica starts from (the node's Seed writes
	// these bytes as its Raft snapshot; replica's TestSeedOpensAtTheBackup
	// opens a replica on them).
	snap, res, err := SeedState(got, fsmtCell)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header != hd || res.Nodes != 4 || res.DroppedEphemeral != 1 || res.Sessions != 2 {
		t.Fatalf("seed result %+v", res)
	}
	f, err := fsmtRestore(t, fsmtCell, snap)
	if err != nil {
		t.Fatal(err)
	}
	idx, sum, err := f.StateHash()
	if err != nil || idx != hd.Applied || sum != res.StateHash {
		t.Fatalf("seeded state at %d hash %x (%v), seed result %d %x", idx, sum[:4], err, hd.Applied, res.StateHash[:4])
	}
	if !bytes.Equal(f.CellKey(), bytes.Repeat([]byte{7}, 32)) {
		t.Fatal("the cell key did not come along")
	}
	if n := len(f.Sessions()); n != 0 {
		t.Fatalf("%d sessions restored", n)
	}
	src := h.f
	for _, name := range []string{"", "/dir", "/dir/file", "/lock"} {
		a, b := src.nodes[fsmtRoot+name], f.nodes[fsmtRoot+name]
		if b == nil {
			t.Fatalf("%s not restored", fsmtRoot+name)
		}
		if a.Instance != b.Instance || a.ContentGen != b.ContentGen || a.LockGen != b.LockGen || a.ACLGen != b.ACLGen ||
			a.CTime != b.CTime || a.MTime != b.MTime || !bytes.Equal(a.Contents, b.Contents) || a.Checksum != b.Checksum {
			t.Fatalf("%s: restored %+v, backed up %+v", name, b, a)
		}
		if b.LockMode != LockFree || len(b.Holders)+len(b.Waiters) != 0 || b.LockDelayUntil != 0 {
			t.Fatalf("%s: lock state restored: %+v", name, b)
		}
	}
	if f.nodes[fsmtPath("eph")] != nil {
		t.Fatal("the ephemeral node outlived its session")
	}
	if _, _, err := SeedState(got, "other"); err == nil {
		t.Fatal("a backup of cell c was seeded as cell other")
	}
	if nodes, dropped, sessions := BackupPreview(got); nodes != res.Nodes || dropped != res.DroppedEphemeral || sessions != res.Sessions {
		t.Fatalf("preview %d %d %d, seed %+v", nodes, dropped, sessions, res)
	}
}

func TestReadBackupDetectsDamage(t *testing.T) {
	b, err := backupFixture(t).f.Backup(1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	file := backupBytes(t, b)
	for _, at := range []int{0, 17, 25, len(file) / 2, len(file) - 40, len(file) - 1} {
		bad := bytes.Clone(file)
		bad[at] ^= 0x10
		_, err := ReadBackup(bytes.NewReader(bad))
		if !errors.Is(err, ErrBadBackup) {
			t.Fatalf("byte %d flipped: %v", at, err)
		}
		if at > 40 && !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("byte %d flipped: %v, want a checksum mismatch", at, err)
		}
	}
	for _, n := range []int{0, 10, 30, len(file) / 2, len(file) - 32, len(file) - 1} {
		_, err := ReadBackup(bytes.NewReader(file[:n]))
		if !errors.Is(err, ErrBadBackup) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("cut at %d of %d: %v", n, len(file), err)
		}
	}
	if _, err := ReadBackup(bytes.NewReader(append(bytes.Clone(file), 0))); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("a byte appended: %v", err)
	}
}

// BenchmarkBackup100k takes a backup of 100,000 files of 64 bytes each and
// reports how long the FSM's read lock was held (applies wait that long),
// the mean over the runs, beside the time Snapshot holds it to encode the
// same state (what a backup encoding under the lock would cost).
func BenchmarkBackup100k(b *testing.B) {
	f := NewFSM("t", nil)
	root := f.nodes["/ls/t"]
	for i := range 100_000 {
		n := &Node{Path: "/ls/t/n" + strconv.Itoa(i), Instance: uint64(i + 2), ContentGen: uint64(i + 2),
			Contents: bytes.Repeat([]byte{'x'}, 64), CTime: 1, MTime: 1}
		f.nodes[n.Path] = n
		root.children[baseOf(n.Path)] = false
		root.addKid(baseOf(n.Path), n)
	}
	f.applied = 100_002
	b.Run("backup", func(b *testing.B) {
		var held time.Duration
		var size, runs int
		for b.Loop() {
			bk, err := f.Backup(1, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			held += bk.LockHeld
			size = int(bk.Size)
			bk.Close()
			runs++
		}
		b.ReportMetric(float64(held.Microseconds())/1000/float64(runs), "lock-ms")
		b.ReportMetric(float64(size)/(1<<20), "file-MiB")
	})
	b.Run("encode-under-lock", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A backup's file lives in an unlinked temporary file in the backup
// directory: nothing is left there while it is held or after Close, two
// backups of the same state are the same file byte for byte, both read
// back, and the layout is backupfile.Encode's around the same snapshot.
func TestBackupOnDiskIsTheSameFile(t *testing.T) {
	f := backupFixture(t).f
	dir := filepath.Join(t.TempDir(), "backups")
	f.SetBackupDir(dir)
	first, err := f.Backup(3, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.Backup(3, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("the backup directory holds %d entries while backups are held (%v): they must be unlinked", len(left), err)
	}
	one, two := backupBytes(t, first), backupBytes(t, second)
	if !bytes.Equal(one, two) || first.Checksum != second.Checksum {
		t.Fatalf("two backups of one state differ: %d and %d bytes", len(one), len(two))
	}
	if int64(len(two)) != second.Size || !bytes.Equal(two[len(two)-32:], second.Checksum[:]) {
		t.Fatalf("the file has %d bytes ending %x; the backup says %d bytes, checksum %x", len(two), two[len(two)-32:], second.Size, second.Checksum)
	}
	got, err := ReadBackup(bytes.NewReader(two))
	if err != nil {
		t.Fatal(err)
	}
	laid, sum, err := backupfile.Encode(&second.Header, got.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(laid, two) || sum != second.Checksum {
		t.Fatal("the file built on disk differs from backupfile.Encode's layout of its snapshot")
	}
	// Pages as the master serves them: reads at offsets, the last one short.
	page := make([]byte, 1000)
	var paged []byte
	for off := int64(0); off < second.Size; off += int64(len(page)) {
		n, err := second.ReadAt(page, off)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("read at %d: %v", off, err)
		}
		paged = append(paged, page[:n]...)
	}
	if !bytes.Equal(paged, two) {
		t.Fatal("the file read in pages differs from the file read whole")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.ReadAt(page, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a read after Close: %v, want os.ErrClosed", err)
	}
	second.Close()
}

// backupBytes reads b's whole file.
func backupBytes(t testing.TB, b *Backup) []byte {
	t.Helper()
	out, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A backup left behind by a process that died between creating its file
// and unlinking it is removed when a replica opens; an operator's own
// files beside it are kept.
func TestBackupLeftoversRemovedOthersKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backup-tmp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "backup-123.tmp")
	mine := filepath.Join(dir, "lockcell-2026-12-06.lcb")
	for _, name := range []string{left, mine} {
		if err := os.WriteFile(name, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveBackupLeftovers(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the leftover backup is still there: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the operator's file was removed: %v", err)
	}
	if err := RemoveBackupLeftovers(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Fatalf("a missing folder: %v", err)
	}
}

// seededFromBackup backs f up (at term, time 100 s), reads the file back
// and returns the state a replica seeded from it starts with, and the
// seed's result.
func seededFromBackup(t *testing.T, f *FSM, term uint64) (*FSM, *SeedResult) {
	t.Helper()
	b, err := f.Backup(term, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadBackup(bytes.NewReader(backupBytes(t, b)))
	if err != nil {
		t.Fatal(err)
	}
	snap, res, err := SeedState(got, fsmtCell)
	if err != nil {
		t.Fatal(err)
	}
	seeded, err := fsmtRestore(t, fsmtCell, snap)
	if err != nil {
		t.Fatal(err)
	}
	return seeded, res
}
