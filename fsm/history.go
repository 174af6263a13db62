package fsm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"lockcell/acl"
)

// The change history behind subtree watches. Every replica keeps, as
// derived state built while entries apply (never in a snapshot, emptied
// by a restore, like the watch index), a bounded record of the recent
// changes to nodes: created, contents replaced, deleted, lock granted.
// Each has a Position, the Raft index of the entry that made it and its
// ordinal among the recorded changes of that entry, so positions strictly
// increase in log order and one entry's changes (a transaction's, a
// closing session's ephemerals) can be read in several pages without a
// resume skipping the rest of the entry.
//
// Why a consumer resuming from a position it was given misses nothing,
// whichever replica answers: the history holds every change after its
// floor (nothing older is forgotten without the floor moving past it),
// a position before the floor is answered ErrHistoryCompacted rather
// than with a gap, and every replica records the same changes at the same
// positions (they apply the same entries). A replica restored from a
// snapshot at index S starts with its floor at (S+1, 0): it cannot say
// what entries up to S changed.

// Default bounds of the history (SetHistoryLimits changes them).
const (
	DefaultHistoryChanges = 64 << 10
	DefaultHistoryBytes   = 16 << 20
)

// historyOverhead is what one recorded change costs besides its strings:
// the record itself and its share of the slice.
const historyOverhead = 96

// ErrHistoryCompacted answers a read of the history after a position the
// replica no longer holds the changes after (or never held: a position of
// another cell's log, or ahead of this replica's). The reader must re-read
// what it watches and resume from a position it is given now.
var ErrHistoryCompacted = errors.New("lockcell: the change history no longer reaches back to that position")

// Position orders the changes of the history: Index is the Raft index of
// the entry that made a change, Ord its ordinal (from 1) among the
// entry's recorded changes. Position{I, 0} is "before every change of
// entry I": the progress position after entry I-1.
type Position struct {
	Index uint64
	Ord   uint32
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Ord < q.Ord
}

// String writes p as "index.ord", which ParsePosition reads back.
func (p Position) String() string {
	return strconv.FormatUint(p.Index, 10) + "." + strconv.FormatUint(uint64(p.Ord), 10)
}

// ParsePosition reads a position written by Position.String. A bare index
// "I" is read as I.0.
func ParsePosition(s string) (Position, error) {
	i, o, dotted := strings.Cut(s, ".")
	idx, err := strconv.ParseUint(i, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: index: %w", s, err)
	}
	var ord uint64
	if dotted {
		if ord, err = strconv.ParseUint(o, 10, 32); err != nil {
			return Position{}, fmt.Errorf("position %q: ordinal: %w", s, err)
		}
	}
	return Position{Index: idx, Ord: uint32(ord)}, nil
}

// HistoryKind says what a HistoryChange reports. Its bits make the kind
// masks of View.SubtreeChanges.
type HistoryKind uint8

// Kinds of recorded change.
const (
	HistoryCreated      HistoryKind = 1 << iota // the node was created; Generation is its instance
	HistoryContents                             // its contents were replaced; Generation is the new content generation
	HistoryDeleted                              // it was deleted; Generation is the instance that went
	HistoryLockAcquired                         // its lock was granted; Generation is the lock generation
)

// HistoryAllKinds is the mask of every kind.
const HistoryAllKinds = HistoryCreated | HistoryContents | HistoryDeleted | HistoryLockAcquired

// HistoryChange is one recorded change.
type HistoryChange struct {
	Pos        Position
	Path       string
	Kind       HistoryKind
	Generation uint64
	// ACL is the node's ACL when the change was made: who may hear of it
	// is decided on it (a deleted node has no other).
	ACL acl.NodeACL
}

func (c *HistoryChange) size() int64 {
	return int64(historyOverhead + len(c.Path) + len(c.ACL.Read) + len(c.ACL.Write) + len(c.ACL.ChangeACL) + len(c.ACL.Owner))
}

// history is the FSM's bounded record of changes (under FSM.mu). recs
// from start are the changes in position order; the slice is shifted down
// once half of it is dead, so eviction is amortised O(1).
type history struct {
	recs     []HistoryChange
	start    int
	bytes    int64
	maxCount int
	maxBytes int64
	// floor: every change after it is held.
	floor Position
	// entry and ord number the changes of the entry being applied.
	entry uint64
	ord   uint32
	// waits are the readers waiting for a change below a directory
	// (View.HistoryWake), by directory: a change closes the channels of
	// its ancestors only, so a change wakes the readers it concerns, not
	// every reader. wakeMu guards them: readers come under the state's
	// read lock only.
	wakeMu sync.Mutex
	waits  map[string]*histWait
}

// histWait is the readers waiting on one directory: the channel a change
// below it closes, and how many hold it.
type histWait struct {
	ch      chan struct{}
	holders int
}

func newHistory() history {
	return history{maxCount: DefaultHistoryChanges, maxBytes: DefaultHistoryBytes}
}

// begin numbers the changes of entry index from 1.
func (h *history) begin(index uint64) { h.entry, h.ord = index, 0 }

// reset empties the history: it holds nothing at or before floor.
func (h *history) reset(floor Position) {
	clear(h.recs)
	h.recs, h.start, h.bytes, h.floor = nil, 0, 0, floor
	h.wakeMu.Lock()
	for dir, w := range h.waits { // readers re-read, and hear they are compacted
		close(w.ch)
		delete(h.waits, dir)
	}
	h.wakeMu.Unlock()
}

// wakeAbove wakes the readers waiting on a directory above name: O(its
// depth).
func (h *history) wakeAbove(name string) {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	if len(h.waits) == 0 {
		return
	}
	for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name, '/') {
		name = name[:i]
		if w := h.waits[name]; w != nil {
			close(w.ch)
			delete(h.waits, name)
		}
	}
}

func (h *history) add(c HistoryChange) {
	h.ord++
	c.Pos = Position{Index: h.entry, Ord: h.ord}
	h.recs = append(h.recs, c)
	h.bytes += c.size()
	h.trim()
	h.wakeAbove(c.Path)
}

// trim forgets the oldest changes past the bounds.
func (h *history) trim() {
	for n := len(h.recs) - h.start; n > 0 && (n > h.maxCount || h.bytes > h.maxBytes); n-- {
		old := &h.recs[h.start]
		h.bytes -= old.size()
		h.floor = old.Pos
		*old = HistoryChange{} // keeps no strings alive
		h.start++
	}
	if h.start > 1024 && h.start*2 > len(h.recs) {
		n := copy(h.recs, h.recs[h.start:])
		clear(h.recs[n:])
		h.recs, h.start = h.recs[:n], 0
	}
}

// record adds what c says of a node to the history (FSM.mu held, c just
// noted): O(1).
func (f *FSM) record(c *Change) {
	h := &f.hist
	switch c.Kind {
	case ChangeChildAdded:
		if n := f.nodes[c.Path+"/"+c.Child]; n != nil {
			h.add(HistoryChange{Path: n.Path, Kind: HistoryCreated, Generation: n.Instance, ACL: c.ChildACL})
		}
	case ChangeContents:
		if n := f.nodes[c.Path]; n != nil {
			h.add(HistoryChange{Path: n.Path, Kind: HistoryContents, Generation: n.ContentGen, ACL: nodeACL(n)})
		}
	case ChangeDeleted:
		h.add(HistoryChange{Path: c.Path, Kind: HistoryDeleted, Generation: c.Seq, ACL: c.ChildACL})
	case ChangeLockGranted:
		if n := f.nodes[c.Path]; n != nil {
			h.add(HistoryChange{Path: n.Path, Kind: HistoryLockAcquired, Generation: n.LockGen, ACL: nodeACL(n)})
		}
	}
}

// SetHistoryLimits bounds the change history to changes records and
// bytes bytes (each at least 1), forgetting the oldest past them at once.
func (f *FSM) SetHistoryLimits(changes int, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hist.maxCount, f.hist.maxBytes = max(changes, 1), max(bytes, 1)
	f.hist.trim()
}

// HistoryStats describes the change history now.
type HistoryStats struct {
	Changes int
	Bytes   int64
	// Floor: every change after it is held; Progress is the position
	// after the last applied entry.
	Floor, Progress Position
	// Waiting counts the directories readers wait on (HistoryWake).
	Waiting int
}

// HistoryStats reports the history's size and window.
func (v View) HistoryStats() HistoryStats {
	h := &v.f.hist
	h.wakeMu.Lock()
	waiting := len(h.waits)
	h.wakeMu.Unlock()
	return HistoryStats{Changes: len(h.recs) - h.start, Bytes: h.bytes, Floor: h.floor, Progress: v.progress(), Waiting: waiting}
}

// progress is the position after every change applied so far.
func (v View) progress() Position {
	return Position{Index: v.f.applied + 1}
}

// HistoryWake returns a channel closed once an entry applied after this
// view records a change below directory dir (or the history is emptied by
// a restore), and the func to call once done waiting: what a reader that
// found nothing new waits on before it reads again. Only the changes
// below dir wake it, so a busy cell does not wake every waiting reader
// at every change.
func (v View) HistoryWake(dir string) (<-chan struct{}, func()) {
	h := &v.f.hist
	// The view holds the read lock: other readers may be here too.
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	if h.waits == nil {
		h.waits = map[string]*histWait{}
	}
	w := h.waits[dir]
	if w == nil {
		w = &histWait{ch: make(chan struct{})}
		h.waits[dir] = w
	}
	w.holders++
	return w.ch, func() {
		h.wakeMu.Lock()
		defer h.wakeMu.Unlock()
		// A wait no reader holds any more goes, so the map is bounded by
		// the readers waiting now.
		if w.holders--; w.holders == 0 && h.waits[dir] == w {
			delete(h.waits, dir)
		}
	}
}

// SubtreeChanges appends to dst the recorded changes after position after
// to the nodes strictly below directory dir whose kind is in kinds and
// that keep (if not nil) accepts, looking at no more than scan changes and
// returning at most limit. next is the position to read after next time: the
// last change looked at, or, once every held change was looked at, the
// progress position after the last applied entry (so an idle reader's
// position keeps up with the log). A position before the history's floor,
// or after the progress position, is answered ErrHistoryCompacted.
//
// keep runs under the state's read lock. The cost is O(log n + scan).
func (v View) SubtreeChanges(dst []HistoryChange, dir string, after Position, kinds HistoryKind, scan, limit int, keep func(*HistoryChange) bool) ([]HistoryChange, Position, error) {
	h := &v.f.hist
	prog := v.progress()
	if after.Less(h.floor) || prog.Less(after) {
		return dst, after, fmt.Errorf("%w: %s (the history holds the changes after %s, up to %s)", ErrHistoryCompacted, after, h.floor, prog)
	}
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	recs := h.recs[h.start:]
	lo, hi := 0, len(recs) // the first change after after
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if after.Less(recs[m].Pos) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	next := after
	found := 0
	for i := lo; i < len(recs); i++ {
		if scan <= 0 || found >= limit {
			return dst, next, nil
		}
		scan--
		c := &recs[i]
		next = c.Pos
		if c.Kind&kinds == 0 || !strings.HasPrefix(c.Path, prefix) || keep != nil && !keep(c) {
			continue
		}
		dst = append(dst, *c)
		found++
	}
	return dst, prog, nil
}
