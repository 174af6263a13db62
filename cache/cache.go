// Package cache is the client library's consistent cache of node data
// (docs/spec.md#caching): file contents, stats and directory listings, keyed
// by node name and a caller-chosen kind, and the absence of names (negative
// entries, kept under their directory's name: see Key.Child). It is a pure
// data structure guarded
// by its own mutex: no network, no goroutines, no clock. The client
// translates the master's invalidation events, jeopardy and fail-over into
// calls on it.
//
// # Consistency protocol
//
// A read reply can arrive after an invalidation of the data it carries (the
// master answered, then a write invalidated the name, and the invalidation
// event overtook the reply on its way to the client). Storing such a reply
// would resurrect data older than a completed write, which
// docs/spec.md#caching forbids.
// The client therefore reads like this:
//
//	t := c.Token(name)              // before the read RPC is sent
//	v, err := readFromMaster(name)  // any RPC
//	if err == nil && cacheable {
//		c.PutIf(cache.Key{Name: name, Kind: k}, v, t)
//	}
//
// PutIf stores v only if nothing that could make v stale happened since t
// was taken: no Invalidate of that name, no Purge, no Disable and no Enable.
//
// # How tokens stay bounded (and why they are still correct)
//
// The cache keeps a logical clock. Every event that can make a read stale
// (Invalidate of a name, Purge, Disable, Enable) increments the clock under
// the mutex and is stamped with the new value. A Token records the clock's
// value when it is taken, so for every event e and token t:
//
//	stamp(e) <= t.at  iff  e happened before the token was taken.   (1)
//
// (The clock only grows, the token reads it atomically, and an event's
// stamp is larger than every value the clock had before it.)
//
// Stale-making events are remembered in two places:
//   - stamp[name]: the stamp of the name's most recent Invalidate, kept for
//     at most Config.MaxTracked names (whether or not they have entries);
//   - floor: a stamp no smaller than the stamp of every forgotten
//     Invalidate and equal to the stamp of the most recent Purge, Disable
//     or Enable.
//
// When more than MaxTracked names carry a stamp, the name with the oldest
// stamp is forgotten and floor is raised to that stamp. Stamps are handed
// out in increasing order and kept in a FIFO in that order, so forgetting
// costs O(1) and raises floor as little as possible.
//
// PutIf(key, v, t) accepts iff the cache is enabled, t names key.Name,
// t.at >= floor and t.at >= stamp[key.Name] (absent stamps count as 0).
//
// Claim: if an Invalidate(name), Purge, Disable or Enable e happened after t
// was taken, PutIf(Key{name, _}, _, t) refuses. Proof: by (1),
// stamp(e) > t.at. If e is a Purge, Disable or Enable, floor >= stamp(e)
// from then on (floor only grows), so t.at < floor: refused. If e is an
// Invalidate(name), then either stamp[name] is still tracked, and it is
// >= stamp(e) because a later Invalidate of the name only raises it, or it
// was forgotten (or cleared by a Purge), which raised floor to a value
// >= stamp(e). Either way max(floor, stamp[name]) >= stamp(e) > t.at:
// refused. The converse does not hold, by design: forgetting a stamp may
// refuse a token of another name that was taken before the forgotten
// invalidation. That only costs a cache fill, never correctness, and it
// needs MaxTracked invalidations to happen while the read is in flight.
//
// Corollary: with the client's protocol (every write completes only after
// every cacher applied Invalidate(name), and every read that may be cached
// takes its Token before its RPC), Get never returns data older than a write
// that completed before the Get started: data read before the write's
// Invalidate either was stored before it (and the Invalidate removed it) or
// was offered after it (and PutIf refused it, by the claim).
package cache

import (
	"sync"
	"sync/atomic"
)

// DefaultMaxTracked is the number of per-name invalidation stamps a cache
// remembers when Config.MaxTracked is zero.
const DefaultMaxTracked = 4096

// Config bounds a Cache. A bound that is zero or negative is not enforced.
type Config struct {
	// MaxBytes bounds the sum of the sizes of all entries, where an
	// entry's size is len(Key.Name) plus the size function's value.
	MaxBytes int64
	// MaxEntries bounds the number of entries (one per Key).
	MaxEntries int
	// MaxTracked bounds the number of names whose last invalidation is
	// remembered individually (see the package comment). Zero means
	// DefaultMaxTracked; a negative value means 1. Larger values make
	// spurious PutIf refusals rarer, at about 100 bytes per name.
	MaxTracked int
}

// Key identifies one cached value: the node name and a kind chosen by the
// caller (for example contents, stat or listing), so one name can hold
// several independent values that are invalidated together.
//
// A Key with a Child is a negative entry: its value records that Child, a
// child of the directory Name, is absent. It is stored, looked up and
// invalidated under Name (Invalidate(Name) drops every entry of Name, Child
// or not, and PutIf takes a Token of Name), because what makes an absence
// stale (the child created, or its ACLs changed) changes the directory's
// listing too, and so invalidates the directory. Each negative entry costs
// len(Name)+len(Child) bytes plus its value's size, and counts as one entry
// toward MaxEntries, like any other.
type Key struct {
	Name  string
	Kind  uint8
	Child string
}

// Token records the state of the cache for one name at the moment it was
// taken; see Cache.Token and Cache.PutIf. The zero Token is never accepted.
type Token struct {
	name string
	at   uint64
}

// Stats is a snapshot of a cache's counters.
type Stats struct {
	Hits   uint64 // Gets of keys without a Child that returned a value
	Misses uint64 // Gets of keys without a Child that did not (including while disabled)
	// NegativeHits and NegativeMisses count the Gets of negative entries
	// (keys with a Child) apart, so that looking for an absence, which
	// usually finds none, does not dilute the hit rate of reads.
	NegativeHits   uint64
	NegativeMisses uint64
	Invalidations  uint64 // calls of Invalidate
	Evictions      uint64 // entries dropped to respect MaxBytes or MaxEntries
	Entries        int64  // entries held now
	Bytes          int64  // bytes held now (as MaxBytes counts them)
}

// entry is one cached value; it sits on the LRU list (front = most recent)
// and on its name's list of entries.
type entry[V any] struct {
	key          Key
	val          V
	size         int64
	prev, next   *entry[V] // LRU links
	rprev, rnext *entry[V] // links of rec's entries (nil-terminated)
	rec          *nameRec[V]
}

// nameRec is the per-name state: the entries cached under the name and the
// stamp of the name's last Invalidate while it is tracked (on the stamp
// FIFO).
type nameRec[V any] struct {
	name       string
	ents       *entry[V]   // first of the name's entries
	n          int         // number of entries
	stamp      uint64      // 0 when not tracked
	prev, next *nameRec[V] // stamp FIFO links (oldest at front)
}

func (r *nameRec[V]) add(e *entry[V]) {
	e.rprev, e.rnext = nil, r.ents
	if r.ents != nil {
		r.ents.rprev = e
	}
	r.ents = e
	r.n++
}

func (r *nameRec[V]) remove(e *entry[V]) {
	if e.rprev != nil {
		e.rprev.rnext = e.rnext
	} else {
		r.ents = e.rnext
	}
	if e.rnext != nil {
		e.rnext.rprev = e.rprev
	}
	e.rprev, e.rnext = nil, nil
	r.n--
}

// Cache is a bounded LRU cache of values of type V with the invalidation
// protocol described in the package comment. All methods are safe for
// concurrent use. Stored values are kept as they are: the caller must not
// modify a value after PutIf, nor one returned by Get.
type Cache[V any] struct {
	cfg  Config
	size func(V) int64

	clock atomic.Uint64 // last stamp handed out; written only under mu

	mu      sync.Mutex
	enabled bool
	floor   uint64
	items   map[Key]*entry[V]
	names   map[string]*nameRec[V]
	head    entry[V]   // LRU sentinel: head.next is the most recent
	fifo    nameRec[V] // stamp FIFO sentinel: fifo.next is the oldest
	tracked int        // names on the stamp FIFO
	bytes   int64

	hits, misses, negHits, negMisses, invalidations, evictions atomic.Uint64
	nEntries, nBytes                                           atomic.Int64
}

// New returns an empty, enabled cache bounded by cfg. size reports the
// bytes a value costs (negative results count as 0); nil means every value
// costs 0 bytes, so only the name length counts toward MaxBytes.
func New[V any](cfg Config, size func(V) int64) *Cache[V] {
	if cfg.MaxTracked == 0 {
		cfg.MaxTracked = DefaultMaxTracked
	} else if cfg.MaxTracked < 0 {
		cfg.MaxTracked = 1
	}
	c := &Cache[V]{
		cfg:     cfg,
		size:    size,
		enabled: true,
		floor:   1,
		items:   make(map[Key]*entry[V]),
		names:   make(map[string]*nameRec[V]),
	}
	c.clock.Store(1) // so the zero Token (at 0) is below floor
	c.head.prev, c.head.next = &c.head, &c.head
	c.fifo.prev, c.fifo.next = &c.fifo, &c.fifo
	return c
}

// Token captures name's invalidation state. Take it before sending the read
// RPC whose reply may be stored with PutIf. Token never blocks on the
// cache's lock and never allocates.
func (c *Cache[V]) Token(name string) Token {
	return Token{name: name, at: c.clock.Load()}
}

// Fresh reports whether t is still good: the cache is enabled and no
// invalidation of t's name, purge, disable or enable happened since it was
// taken (exactly the condition under which PutIf would store). Callers
// that keep something else derived from a read (an open handle to reuse)
// check it instead of storing.
func (c *Cache[V]) Fresh(t Token) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || t.name == "" || t.at < c.floor {
		return false
	}
	rec := c.names[t.name]
	return rec == nil || rec.stamp <= t.at
}

// PutIf stores v under key and reports whether it did. It stores only if
// the cache is enabled, t was taken for key.Name, and since t was taken
// there was no Invalidate(key.Name), Purge, Disable or Enable; it may also
// refuse (rarely) when more than Config.MaxTracked other names were
// invalidated since t was taken, and it refuses a value that alone exceeds
// MaxBytes. A stored value replaces any value under key and becomes the
// most recently used; least recently used entries are then evicted until
// the bounds hold again.
func (c *Cache[V]) PutIf(key Key, v V, t Token) bool {
	sz := int64(len(key.Name) + len(key.Child))
	if c.size != nil {
		if s := c.size(v); s > 0 {
			sz += s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || t.name != key.Name || t.at < c.floor {
		return false
	}
	if c.cfg.MaxBytes > 0 && sz > c.cfg.MaxBytes {
		return false
	}
	rec := c.names[key.Name]
	if rec != nil && rec.stamp > t.at {
		return false
	}
	if e := c.items[key]; e != nil {
		c.bytes += sz - e.size
		e.val, e.size = v, sz
		c.unlinkEntry(e)
		c.pushEntry(e)
	} else {
		if rec == nil {
			rec = &nameRec[V]{name: key.Name}
			c.names[key.Name] = rec
		}
		e = &entry[V]{key: key, val: v, size: sz, rec: rec}
		c.items[key] = e
		rec.add(e)
		c.bytes += sz
		c.pushEntry(e)
	}
	for c.overLimit() {
		c.removeEntry(c.head.prev)
		c.evictions.Add(1)
	}
	c.publish()
	return true
}

// Get returns the value stored under key and marks it most recently used.
// It misses while the cache is disabled. A value returned by Get was stored
// by a PutIf whose token was taken after every Invalidate(key.Name), Purge,
// Disable and Enable that happened before this Get. Get does not allocate.
func (c *Cache[V]) Get(key Key) (V, bool) {
	c.mu.Lock()
	e := c.items[key] // the map is empty while disabled
	if e == nil {
		c.mu.Unlock()
		if key.Child != "" {
			c.negMisses.Add(1)
		} else {
			c.misses.Add(1)
		}
		var zero V
		return zero, false
	}
	if c.head.next != e {
		c.unlinkEntry(e)
		c.pushEntry(e)
	}
	v := e.val
	c.mu.Unlock()
	if key.Child != "" {
		c.negHits.Add(1)
	} else {
		c.hits.Add(1)
	}
	return v, true
}

// Invalidate drops every entry cached under name (every kind, and every
// negative entry of its children) and makes every Token taken
// for name before this call unacceptable to PutIf. When Invalidate returns,
// no Get can return data stored before it, nor data offered by a PutIf with
// an older token. Call it for each name an invalidation event covers (a
// directory listing is the caller's to invalidate under the directory's
// name when a child is created or deleted).
func (c *Cache[V]) Invalidate(name string) {
	c.invalidations.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.names[name]
	if rec == nil {
		rec = &nameRec[V]{name: name}
		c.names[name] = rec
	}
	// Stamp the name and move it to the back of the FIFO (newest) first:
	// a record with a stamp survives the removal of its last entry.
	rec.stamp = c.clock.Add(1)
	if rec.prev != nil {
		c.unlinkRec(rec)
	}
	rec.prev, rec.next = c.fifo.prev, &c.fifo
	c.fifo.prev.next = rec
	c.fifo.prev = rec
	c.tracked++
	for rec.ents != nil {
		c.removeEntry(rec.ents)
	}
	// Forget the oldest stamps beyond MaxTracked, raising floor to cover
	// them. rec is the newest and MaxTracked >= 1, so it stays.
	for c.tracked > c.cfg.MaxTracked {
		old := c.fifo.next
		c.unlinkRec(old)
		if old.stamp > c.floor {
			c.floor = old.stamp
		}
		old.stamp = 0
		if old.n == 0 {
			delete(c.names, old.name)
		}
	}
	c.publish()
}

// Purge drops every entry and makes every Token taken before it
// unacceptable to PutIf. The client calls it when invalidations may have
// been lost (jeopardy, master fail-over).
func (c *Cache[V]) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.purgeLocked()
}

// Disable purges the cache and keeps it empty until Enable: Get misses and
// PutIf refuses. Disabling a disabled cache purges it again.
func (c *Cache[V]) Disable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.enabled = false
	c.purgeLocked()
}

// Enable lets the cache fill again after Disable. Tokens taken before
// Enable (in particular while the cache was disabled, when invalidations
// may have been missed) stay unacceptable to PutIf. Enabling an enabled
// cache has no effect.
func (c *Cache[V]) Enable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.enabled {
		return
	}
	c.enabled = true
	c.floor = c.clock.Add(1)
}

// Enabled reports whether the cache is enabled.
func (c *Cache[V]) Enabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled
}

// Stats returns the cache's counters. It takes no lock; the fields are
// each exact but need not be mutually consistent under concurrent use.
func (c *Cache[V]) Stats() Stats {
	return Stats{
		Hits:           c.hits.Load(),
		Misses:         c.misses.Load(),
		NegativeHits:   c.negHits.Load(),
		NegativeMisses: c.negMisses.Load(),
		Invalidations:  c.invalidations.Load(),
		Evictions:      c.evictions.Load(),
		Entries:        c.nEntries.Load(),
		Bytes:          c.nBytes.Load(),
	}
}

func (c *Cache[V]) purgeLocked() {
	clear(c.items)
	clear(c.names)
	c.head.prev, c.head.next = &c.head, &c.head
	c.fifo.prev, c.fifo.next = &c.fifo, &c.fifo
	c.tracked = 0
	c.bytes = 0
	c.floor = c.clock.Add(1)
	c.publish()
}

func (c *Cache[V]) overLimit() bool {
	return (c.cfg.MaxEntries > 0 && len(c.items) > c.cfg.MaxEntries) ||
		(c.cfg.MaxBytes > 0 && c.bytes > c.cfg.MaxBytes)
}

func (c *Cache[V]) publish() {
	c.nEntries.Store(int64(len(c.items)))
	c.nBytes.Store(c.bytes)
}

// removeEntry drops e from the map, the LRU list and its name's record; the
// record itself goes when it has neither entries nor a tracked stamp.
func (c *Cache[V]) removeEntry(e *entry[V]) {
	c.unlinkEntry(e)
	delete(c.items, e.key)
	c.bytes -= e.size
	rec := e.rec
	rec.remove(e)
	if rec.n == 0 && rec.stamp == 0 {
		delete(c.names, rec.name)
	}
	var zero V
	e.val, e.rec = zero, nil
}

func (c *Cache[V]) pushEntry(e *entry[V]) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

func (c *Cache[V]) unlinkEntry(e *entry[V]) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (c *Cache[V]) unlinkRec(r *nameRec[V]) {
	r.prev.next = r.next
	r.next.prev = r.prev
	r.prev, r.next = nil, nil
	c.tracked--
}
