package replica

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Raft reads back every entry it stores, soon after: the leader once per
// follower to send it, each follower once to apply it. From badger each
// such read walks the LSM tree and copies the entry out, so a large entry
// (a transaction at its 256 KiB cap) cost the leader four reads and
// copies beside its write; profiled on five replica processes sending such
// entries back to back, reading them back was an eighth of the cell's
// CPU. logCache keeps the newest entries in memory, as hashicorp/raft's
// own LogCache does, but bounded in bytes as well as in entries, since a
// Raft entry may hold up to half a MiB.

// The log cache's bounds: the newest entries up to logCacheEntries of
// them and logCacheBytes of their data, whichever is reached first. A
// round of raft's replication carries up to maxAppendEntries entries; a
// follower lagging further reads from the store, as before.
const (
	logCacheEntries = 2 * maxAppendEntries
	logCacheBytes   = 4 << 20
)

// logEntryOverhead is what an entry costs the cache beyond its data and
// extensions: the raft.Log itself and its slot.
const logEntryOverhead = 96

// logCache is a raft.LogStore that answers GetLog for the newest stored
// entries from memory. It holds one run of consecutive entries, the end
// of the log: entries stored right after it extend it (dropping the
// oldest past the bounds), any other store starts it afresh, a delete of
// the log's head trims it and any other delete empties it, so it never
// holds an entry the store does not hold at the same index. Entries are
// shared, not copied: raft neither changes an entry once stored nor one
// GetLog returned.
type logCache struct {
	raft.LogStore

	mu    sync.Mutex
	run   []*raft.Log // consecutive indexes, oldest first
	bytes int         // logCost of the entries in run
}

func newLogCache(store raft.LogStore) *logCache { return &logCache{LogStore: store} }

func logCost(l *raft.Log) int { return len(l.Data) + len(l.Extensions) + logEntryOverhead }

// GetLog returns the entry at index from memory when the cache holds it,
// else from the store.
func (c *logCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.Lock()
	if n := len(c.run); n > 0 && index >= c.run[0].Index && index <= c.run[n-1].Index {
		*out = *c.run[index-c.run[0].Index]
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.LogStore.GetLog(index, out)
}

// StoreLog stores one entry through StoreLogs.
func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores the entries, then keeps them. A failed store keeps
// nothing and forgets what the cache held: the store may hold part of
// the batch.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	err := c.LogStore.StoreLogs(logs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.resetLocked()
		return err
	}
	for _, l := range logs {
		if n := len(c.run); n > 0 && l.Index != c.run[n-1].Index+1 {
			c.resetLocked()
		}
		c.run = append(c.run, l)
		c.bytes += logCost(l)
	}
	drop := 0
	for drop < len(c.run) && (len(c.run)-drop > logCacheEntries || c.bytes > logCacheBytes) {
		c.bytes -= logCost(c.run[drop])
		c.run[drop] = nil // let the dropped entry go
		drop++
	}
	c.run = c.run[drop:]
	return nil
}

// DeleteRange deletes the entries from the store, and from the cache
// before and after: raft deletes the head after a snapshot (from its
// snapshot goroutine, while new entries are stored), which leaves the
// newest entries cached, and the tail on a conflict with the leader,
// which empties the cache.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	c.forgetLocked(lo, hi)
	c.mu.Unlock()
	err := c.LogStore.DeleteRange(lo, hi)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.resetLocked() // the store may have deleted part of the range
		return err
	}
	c.forgetLocked(lo, hi)
	return nil
}

// forgetLocked drops the cached entries from lo to hi: the oldest ones
// when the range ends inside the run, else the whole run.
func (c *logCache) forgetLocked(lo, hi uint64) {
	n := len(c.run)
	if n == 0 || hi < c.run[0].Index || lo > c.run[n-1].Index {
		return
	}
	if lo > c.run[0].Index || hi >= c.run[n-1].Index {
		c.resetLocked()
		return
	}
	drop := int(hi - c.run[0].Index + 1)
	for _, l := range c.run[:drop] {
		c.bytes -= logCost(l)
	}
	clear(c.run[:drop])
	c.run = c.run[drop:]
}

// IsMonotonic passes on the store's answer: raft must know a store that
// cannot hold a gap (raft-wal), whatever wraps it.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) resetLocked() {
	clear(c.run)
	c.run = c.run[:0]
	c.bytes = 0
}

var _ raft.MonotonicLogStore = (*logCache)(nil)
