package replica

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// countedReads counts the GetLog calls that reach the store under a
// logCache, which is how a test tells a cached answer from a stored one.
type countedReads struct {
	raft.LogStore
	reads atomic.Int64
}

func (c *countedReads) GetLog(i uint64, l *raft.Log) error {
	c.reads.Add(1)
	return c.LogStore.GetLog(i, l)
}

func entry(i uint64, size int, tag string) *raft.Log {
	data := bytes.Repeat([]byte(tag), size/len(tag)+1)[:size]
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
}

// The cache answers for the newest entries, never for one the store does
// not hold at that index, and always with what the store holds there:
// through head and tail deletes, a gap, a failed store and its bounds.
func TestLogCacheAnswersOnlyWhatTheStoreHolds(t *testing.T) {
	store := openTestStore(t)
	under := &countedReads{LogStore: store}
	c := newLogCache(under)
	want := map[uint64]string{} // index -> tag the store holds
	check := func(what string, i uint64, cached bool) {
		t.Helper()
		before := under.reads.Load()
		var l raft.Log
		err := c.GetLog(i, &l)
		fromStore := under.reads.Load() != before
		tag, held := want[i]
		switch {
		case !held:
			if !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("%s: entry %d: got %v (%d bytes); the store holds none", what, i, err, len(l.Data))
			}
		case err != nil:
			t.Fatalf("%s: entry %d: %v", what, i, err)
		case l.Index != i || len(l.Data) == 0 || string(l.Data[:len(tag)]) != tag:
			t.Fatalf("%s: entry %d read back as index %d, %q...; the store holds %q", what, i, l.Index, l.Data[:min(8, len(l.Data))], tag)
		}
		if where := map[bool]string{true: "the store", false: "the cache"}; held && cached == fromStore {
			t.Fatalf("%s: entry %d answered from %s; want from %s", what, i, where[fromStore], where[!cached])
		}
	}
	put := func(tag string, size int, idx ...uint64) {
		t.Helper()
		var logs []*raft.Log
		for _, i := range idx {
			logs = append(logs, entry(i, size, tag))
			want[i] = tag
		}
		if err := c.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	span := func(lo, hi uint64) []uint64 {
		var s []uint64
		for i := lo; i <= hi; i++ {
			s = append(s, i)
		}
		return s
	}

	put("a", 100, span(1, 10)...)
	for i := uint64(1); i <= 10; i++ {
		check("stored", i, true)
	}
	// Raft compacts the head after a snapshot: the newer entries stay.
	if err := c.DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 4; i++ {
		delete(want, i)
		check("head deleted", i, false)
	}
	check("after a head delete", 7, true)
	// A conflict with a new leader truncates the tail and stores anew.
	if err := c.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	delete(want, 8)
	delete(want, 9)
	delete(want, 10)
	check("tail deleted", 9, false)
	check("cache emptied by a tail delete", 6, false)
	put("b", 100, 8, 9)
	check("stored after the truncation", 8, true)
	check("stored after the truncation", 9, true)
	// An entry not right after the run starts a new one.
	put("c", 100, 12)
	check("the old run after a gap", 9, false)
	check("the new run", 12, true)

	// The bounds: the oldest go first, by bytes or by count.
	const big = 256 << 10
	n := uint64(logCacheBytes/(big+logEntryOverhead)) + 3
	put("d", big, span(13, 12+n)...)
	check("oldest past the byte bound", 13, false)
	check("newest within the byte bound", 12+n, true)
	if c.bytes > logCacheBytes {
		t.Fatalf("the cache holds %d bytes; its bound is %d", c.bytes, logCacheBytes)
	}
	first := 13 + n
	put("e", 10, span(first, first+logCacheEntries+9)...)
	if len(c.run) != logCacheEntries {
		t.Fatalf("the cache holds %d entries; its bound is %d", len(c.run), logCacheEntries)
	}
	check("oldest past the count bound", first+9, false)
	check("newest within the count bound", first+10, true)
	if got := c.bytes; got != logCacheEntries*(10+logEntryOverhead) {
		t.Fatalf("the cache counts %d bytes for %d entries of 10 bytes", got, logCacheEntries)
	}

	// A failed store forgets the run: the store may hold part of it.
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs([]*raft.Log{entry(first+logCacheEntries+10, 10, "f")}); err == nil {
		t.Fatal("a store into a closed database succeeded")
	}
	if len(c.run) != 0 || c.bytes != 0 {
		t.Fatalf("after a failed store the cache holds %d entries, %d bytes", len(c.run), c.bytes)
	}
}

// Raft must still see a store that cannot hold a gap as monotonic through
// the cache: it then drops the whole log when installing a snapshot past
// its end rather than keep a tail behind a hole.
func TestLogCacheKeepsMonotonic(t *testing.T) {
	for _, tc := range []struct {
		store string
		want  bool
	}{{LogStoreBadger, false}, {LogStoreWAL, true}} {
		dir := t.TempDir()
		store, err := OpenStore(filepath.Join(dir, "raft"), nil)
		if err != nil {
			t.Fatal(err)
		}
		logs, closeLogs, err := openLogStore(tc.store, dir, store, &fsm.Histogram{}, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		var m raft.MonotonicLogStore = newLogCache(logs)
		if got := m.IsMonotonic(); got != tc.want {
			t.Errorf("%s through the cache: IsMonotonic %v, want %v", tc.store, got, tc.want)
		}
		if closeLogs != nil {
			closeLogs()
		}
		store.Close()
	}
}
