package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// Compile-time proof that Store can back a raft node on its own (log and
// stable state in the same database).
var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// ErrKeyNotFound is returned by Store.Get and Store.GetUint64 for a key that
// was never set. Its text is exactly "not found" because hashicorp/raft
// recognises a missing stable key by comparing err.Error() to that string,
// not by identity; changing the text would make a fresh node fail to start.
var ErrKeyNotFound = errors.New("not found")

// ErrCorruptLog is wrapped by every error that reports stored log bytes which
// cannot be decoded, so callers can tell corruption (errors.Is) apart from
// I/O failures and from raft.ErrLogNotFound.
var ErrCorruptLog = errors.New("replica: corrupt log entry")

// Key prefixes. Each is a single distinct byte, so no key of one kind can be
// a prefix of (or collide with) a key of the other kind, and a prefix
// iterator over one kind never sees the other. Neither byte is '!', which
// keeps us clear of badger's reserved "!badger!" internal keys.
const (
	prefixLog    byte = 'l'
	prefixStable byte = 's'
)

// logKeyLen is the prefix byte plus a big-endian uint64 index; big-endian
// makes badger's byte order equal numeric order, which FirstIndex,
// LastIndex and DeleteRange rely on.
const logKeyLen = 1 + 8

// deleteChunk bounds how many keys DeleteRange holds in memory at once, so
// deleting a huge range costs bounded memory rather than one key per entry.
const deleteChunk = 16384

// Store is a badger-backed raft.LogStore and raft.StableStore. Every
// successful mutating call has been fsync'd to disk before it returns
// (badger SyncWrites). All methods are safe for concurrent use, as raft
// requires (it truncates the log from its snapshot goroutine while
// appending from its main loop).
type Store struct {
	db     *badger.DB
	logger *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// OpenStore opens (creating if needed) the store in dir. The directory is
// locked by badger, so a second OpenStore of the same dir fails until the
// first is closed. A nil logger silences badger entirely; otherwise only
// badger's warnings and errors are forwarded.
func OpenStore(dir string, logger *slog.Logger) (*Store, error) {
	return openStore(dir, logger, nil)
}

// memTableSize is the size of a store's memtables (badger flushes a full
// one into a table of its LSM tree): from 12 MiB up to 20 MiB, spread
// evenly by the replica's place among the cell's n members (slot; a
// replica that is not among them, a joiner, by a hash of its id). Every
// replica stores the same entries, so with one size their memtables
// fill, and flush, at the same moment, and so do the compactions that
// follow; on machines the replicas share (a dev cell, containers, tests)
// the flushes then take every core at once.
// Profiled with five replica processes on two cores taking 256 KiB
// entries back to back, all five built their tables in the same 0.8 s,
// every 3-4 s, and another client's calls stalled through it. Staggered,
// one replica's flush leaves the others the cores, and a quorum answers.
func memTableSize(id string, slot, n int) int64 {
	const base, spread, step = 12 << 20, 8 << 20, 64 << 10
	if slot < 0 || slot >= n {
		h := fnv.New32a()
		h.Write([]byte(id))
		return base + int64(h.Sum32()%(spread/step))*step
	}
	return base + int64(slot)*spread/int64(n)/step*step
}

// openReplicaStore opens the store of replica id in dir (OpenStore), with
// the memtable size of its slot among n members (memTableSize).
func openReplicaStore(dir, id string, slot, n int, logger *slog.Logger) (*Store, error) {
	return openStore(dir, logger, func(o badger.Options) badger.Options {
		return o.WithMemTableSize(memTableSize(id, slot, n))
	})
}

// openStore lets tests shrink badger's limits (e.g. the memtable, which sets
// the transaction size cap) to exercise the ErrTxnTooBig paths cheaply.
func openStore(dir string, logger *slog.Logger, tweak func(badger.Options) badger.Options) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Several replicas share one process and tests open many stores, so
	// the caches and memtables are far below badger's defaults (64 MiB
	// memtables, 256 MiB block cache, 1 GiB value-log files). Raft log
	// entries are small and read mostly once, so little is lost.
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(!bugNoSync). // durability: raft assumes an acknowledged write survives a crash
		WithLogger(badgerLogger{l: logger.With("component", "badger")}).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithIndexCacheSize(0).
		WithBlockCacheSize(8 << 20)
	if tweak != nil {
		opts = tweak(opts)
	}
	if err := removeEmptyLogFiles(dir); err != nil {
		return nil, fmt.Errorf("replica: open badger store in %q: %w", dir, err)
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("replica: open badger store in %q: %w", dir, err)
	}
	return &Store{db: db, logger: logger}, nil
}

// removeEmptyLogFiles deletes the zero-byte memtable (.mem) and value-log
// (.vlog) files a kill -9 can leave in dir. Badger creates such a file and
// then sizes it with a second system call; a process killed between the
// two leaves an empty file, and badger's Open treats it as fatal
// ("while opening fid: N err: Create a new file", dgraph-io/badger#2207),
// so the replica could never start again. An empty file holds no entry and
// nothing points into it, so deleting it loses nothing; badger then creates
// the file afresh. Files with any bytes are left to badger's own recovery.
//
// It holds badger's own directory lock (flock on dir) while it looks, so a
// store another process still has open, which may be between those two
// calls right now, is never touched: the lock is busy, nothing is removed,
// and badger.Open then reports the lock.
func removeEmptyLogFiles(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close() // releases the lock
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove empty %s left by a crash: %w", name, err)
		}
		removed = true
	}
	if !removed {
		return nil
	}
	// Make the removal durable before badger reuses the file ids.
	return d.Sync()
}

// Close flushes and releases the database and its directory lock. It is
// idempotent; later calls return the first call's result. No other method
// may be used after Close.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// SyncWrites reports whether badger is actually fsyncing every write batch.
// It reads the option back from the open database rather than echoing what
// OpenStore asked for, because badger may override it (e.g. in-memory mode).
func (s *Store) SyncWrites() bool {
	return s.db.Opts().SyncWrites
}

// RunGC reclaims value-log space by rewriting files that are at least half
// garbage, until badger finds nothing more worth rewriting. It blocks while
// it works and is never run automatically: raft entries are normally small
// enough to live in the LSM tree, so the value log rarely grows. Failures
// other than "nothing to rewrite" are logged, not returned, since GC is an
// optimisation and a failed run loses nothing.
func (s *Store) RunGC() {
	for {
		err := s.db.RunValueLogGC(0.5)
		if err == nil {
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) {
			s.logger.Warn("badger value-log GC stopped", "error", err)
		}
		return
	}
}

// FirstIndex returns the lowest stored log index, or 0 with a nil error
// when the log is empty, as raft.LogStore requires.
func (s *Store) FirstIndex() (uint64, error) {
	return s.edgeIndex(false)
}

// LastIndex returns the highest stored log index, or 0 with a nil error
// when the log is empty, as raft.LogStore requires.
func (s *Store) LastIndex() (uint64, error) {
	return s.edgeIndex(true)
}

// edgeIndex finds the first (or, reversed, last) log key with a key-only
// iterator, so no values are read from disk.
func (s *Store) edgeIndex(last bool) (uint64, error) {
	var idx uint64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{
			Prefix:  []byte{prefixLog},
			Reverse: last,
		})
		defer it.Close()
		if last {
			// A reverse Seek lands on the greatest key <= the target, and
			// every log key is <= the all-ones index.
			it.Seek(logKey(^uint64(0)))
		} else {
			it.Seek([]byte{prefixLog})
		}
		if !it.Valid() {
			return nil
		}
		var err error
		idx, err = parseLogKey(it.Item().Key())
		return err
	})
	if err != nil {
		return 0, err
	}
	return idx, nil
}

// GetLog fills *log with the entry at index. A missing entry yields
// raft.ErrLogNotFound (raft tests for it with errors.Is); bytes that fail
// to decode, or that decode to a different index, yield an error wrapping
// ErrCorruptLog and leave *log untouched.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	var raw []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(logKey(index))
		if err != nil {
			return err
		}
		// Copy: badger's value buffer is only valid inside the txn, and
		// the decoded Data/Extensions alias this slice.
		raw, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	var l raft.Log
	if err := decodeLog(raw, &l); err != nil {
		return fmt.Errorf("index %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("%w: key index %d holds entry with index %d", ErrCorruptLog, index, l.Index)
	}
	*log = l
	return nil
}

// StoreLog durably stores one entry, replacing any entry at the same index.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs durably stores the entries, replacing any at the same indexes.
// A batch that fits in one badger transaction (the normal case: up to
// ~2.4 MiB of inline data) is committed and fsync'd atomically. A larger
// batch is split into several transactions committed in slice order, so a
// crash part-way leaves a leading part of the batch stored and nothing
// after it; with the ascending indexes raft passes, the log stays
// contiguous, which raft tolerates.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	diskStall.wait() // the disk-stall fault, when built and armed (faultpoints_on.go)
	for i, l := range logs {
		if l == nil {
			return fmt.Errorf("replica: StoreLogs: nil log at position %d", i)
		}
	}
	err := s.batchWrite(len(logs), func(txn *badger.Txn, i int) error {
		// Fresh key and value per entry: badger keeps references to both
		// until the transaction commits.
		return txn.Set(logKey(logs[i].Index), encodeLog(logs[i]))
	})
	if err == nil {
		crashPoint(CrashLogStore) // stored and synced, not yet acknowledged
	}
	return err
}

// DeleteRange durably deletes every entry with min <= index <= max; absent
// indexes are skipped and min > max is a no-op. A range that fits in one
// transaction is deleted atomically. A larger one is deleted in several
// transactions, ordered so that a crash part-way never leaves a hole inside
// the log: a range that starts at or before the first entry (compaction) is
// deleted from the low end, any other range (conflict truncation of the
// tail) from the high end.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	fromHigh := min > first
	lo, hi := min, max
	for lo <= hi {
		keys, err := s.logKeysIn(lo, hi, fromHigh)
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		err = s.batchWrite(len(keys), func(txn *badger.Txn, i int) error {
			return txn.Delete(keys[i])
		})
		if err != nil {
			return err
		}
		crashPoint(CrashLogTruncate) // a chunk deleted and synced, raft not told
		if len(keys) < deleteChunk {
			return nil
		}
		// Narrow the range past the last key handled. The guards stop
		// wrap-around at the ends of the uint64 space.
		edge, err := parseLogKey(keys[len(keys)-1])
		if err != nil {
			return err
		}
		if fromHigh {
			if edge == 0 {
				return nil
			}
			hi = edge - 1
		} else {
			if edge == ^uint64(0) {
				return nil
			}
			lo = edge + 1
		}
	}
	return nil
}

// logKeysIn returns up to deleteChunk existing log keys in [lo, hi], in
// ascending order or, if descending, from hi downward. It reads in its own
// snapshot so the deleting transactions that follow stay blind writes,
// which badger never aborts with ErrConflict.
func (s *Store) logKeysIn(lo, hi uint64, descending bool) ([][]byte, error) {
	var keys [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{
			Prefix:  []byte{prefixLog},
			Reverse: descending,
		})
		defer it.Close()
		start := logKey(lo)
		if descending {
			start = logKey(hi)
		}
		for it.Seek(start); it.Valid() && len(keys) < deleteChunk; it.Next() {
			k := it.Item().KeyCopy(nil)
			idx, err := parseLogKey(k)
			if err != nil {
				return err
			}
			if idx < lo || idx > hi {
				break
			}
			keys = append(keys, k)
		}
		return nil
	})
	return keys, err
}

// batchWrite applies op for i = 0..n-1 in order, in one transaction when
// badger allows it. When badger reports ErrTxnTooBig, the work so far is
// committed (and fsync'd) and op is retried in a fresh transaction, so
// batches of any size succeed. An op that is too big even for an empty
// transaction fails with ErrTxnTooBig rather than looping.
func (s *Store) batchWrite(n int, op func(txn *badger.Txn, i int) error) error {
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }() // no-op once committed; closure sees the latest txn
	pending := 0
	for i := 0; i < n; i++ {
		err := op(txn, i)
		if errors.Is(err, badger.ErrTxnTooBig) && pending > 0 {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = s.db.NewTransaction(true)
			pending = 0
			err = op(txn, i)
		}
		if err != nil {
			return err
		}
		pending++
	}
	return txn.Commit()
}

// Set durably stores val under key in the stable namespace, replacing any
// previous value. Set and SetUint64 share that namespace, as in
// raft-boltdb, so one key holds one value whichever setter wrote it last.
func (s *Store) Set(key []byte, val []byte) error {
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(stableKey(key), val)
	})
}

// Get returns a private copy of the value stored under key, which is never
// nil for a key that exists (even if set to an empty value). A key never
// set yields a nil value and ErrKeyNotFound, whose text raft checks.
func (s *Store) Get(key []byte) ([]byte, error) {
	var val []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(stableKey(key))
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	if val == nil {
		val = []byte{}
	}
	return val, nil
}

// SetUint64 durably stores val under key as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value stored by SetUint64 under key. A key never set
// yields 0 and ErrKeyNotFound (raft treats that as "fresh node"); a key
// whose value is not 8 bytes (written by Set) yields an error, not a guess.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	val, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("replica: stable key %q holds %d bytes, not a uint64", key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}

func logKey(index uint64) []byte {
	k := make([]byte, logKeyLen)
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

func parseLogKey(k []byte) (uint64, error) {
	if len(k) != logKeyLen || k[0] != prefixLog {
		return 0, fmt.Errorf("%w: malformed log key %x", ErrCorruptLog, k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

func stableKey(key []byte) []byte {
	k := make([]byte, 0, 1+len(key))
	k = append(k, prefixStable)
	return append(k, key...)
}

// Log entry encoding, version 1. The leading version byte lets a future
// layout coexist with entries already on disk.
//
//	byte     version (1)
//	uvarint  Index
//	uvarint  Term
//	byte     Type
//	uvarint  len(Data),       Data bytes
//	uvarint  len(Extensions), Extensions bytes
//	varint   AppendedAt Unix seconds
//	uvarint  AppendedAt nanoseconds within the second (< 1e9)
//
// AppendedAt keeps its instant (time.Time.Equal holds after a round trip)
// but not its location or monotonic reading, which raft never uses; a zero
// AppendedAt decodes to the zero time.Time.
const logEncodingV1 = 1

func encodeLog(l *raft.Log) []byte {
	size := 1 + 3*binary.MaxVarintLen64 + 1 +
		2*binary.MaxVarintLen64 + len(l.Data) + len(l.Extensions) +
		binary.MaxVarintLen64
	b := make([]byte, 0, size)
	b = append(b, logEncodingV1)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	b = binary.AppendVarint(b, l.AppendedAt.Unix())
	b = binary.AppendUvarint(b, uint64(l.AppendedAt.Nanosecond()))
	return b
}

// decodeLog parses encodeLog's output into *l. Every length is checked
// against the bytes remaining, so corrupt input yields an error wrapping
// ErrCorruptLog instead of a panic or an oversized allocation. Data and
// Extensions alias b (capacity-limited, so appending to one cannot
// overwrite the other); callers pass a buffer they own.
func decodeLog(b []byte, l *raft.Log) error {
	d := logDecoder{b: b}
	if v := d.u8("version"); d.err == nil && v != logEncodingV1 {
		return fmt.Errorf("%w: unknown encoding version %d", ErrCorruptLog, v)
	}
	var out raft.Log
	out.Index = d.uvarint("index")
	out.Term = d.uvarint("term")
	out.Type = raft.LogType(d.u8("type"))
	out.Data = d.bytes("data")
	out.Extensions = d.bytes("extensions")
	sec := d.varint("appended-at seconds")
	nsec := d.uvarint("appended-at nanoseconds")
	if d.err != nil {
		return d.err
	}
	if nsec >= uint64(time.Second) {
		return fmt.Errorf("%w: appended-at nanoseconds %d out of range", ErrCorruptLog, nsec)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptLog, len(d.b))
	}
	if t := time.Unix(sec, int64(nsec)); !t.IsZero() {
		out.AppendedAt = t
	}
	*l = out
	return nil
}

// logDecoder consumes b front to back; after the first failure every read
// returns a zero value and err keeps that first failure.
type logDecoder struct {
	b   []byte
	err error
}

func (d *logDecoder) fail(field, why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrCorruptLog, field, why)
	}
	d.b = nil
}

func (d *logDecoder) u8(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(field, "truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *logDecoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(field, "truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *logDecoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(field, "truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns nil for a zero length so that absent and empty slices both
// come back as nil, matching what raft itself produces for empty fields.
func (d *logDecoder) bytes(field string) []byte {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(field, fmt.Sprintf("length %d exceeds the %d bytes left", n, len(d.b)))
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// badgerLogger forwards badger's warnings and errors to slog and drops its
// chatty info and debug output (compaction, flush and replay progress).
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(format string, args ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (b badgerLogger) Warningf(format string, args ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
