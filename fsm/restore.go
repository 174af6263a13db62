package fsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// Reading a snapshot back: Restore bounds, shape-checks, decodes and
// validates snapshot bytes before any of them replace the state.

// maxSnapshotSize bounds the bytes Restore reads. Snapshot encodes the
// whole state in memory, so a state this large could not be snapshotted
// either; a longer stream is refused rather than read to the end.
const maxSnapshotSize = 1 << 30

// Restore replaces the whole state with a snapshot's. The snapshot is read
// into memory (at most maxSnapshotSize bytes), its bytes pass codec.CheckBounds
// and a count check before they are decoded, so hostile or corrupt bytes
// cannot make decoding allocate more than a small multiple of their size,
// and the decoded image is validated as a whole before any of it is used.
// Every rejection wraps ErrMalformedSnapshot (ErrSnapshotTooLarge for the
// size cap) and leaves the state the FSM had.
func (f *FSM) Restore(r io.Reader) error { return f.RestoreThen(r, nil) }

// RestoreThen is Restore that calls installing (unless nil) once the
// snapshot has been read and validated, just before it replaces the
// state: the node's crash point for a snapshot stored but not installed.
func (f *FSM) RestoreThen(r io.Reader, installing func()) error {
	b, err := io.ReadAll(io.LimitReader(r, maxSnapshotSize+1))
	if err != nil {
		return fmt.Errorf("replica: read snapshot: %w", err)
	}
	if len(b) > maxSnapshotSize {
		return fmt.Errorf("%w: more than %d bytes", ErrSnapshotTooLarge, maxSnapshotSize)
	}
	img, err := decodeSnapshot(b)
	if err != nil {
		return err
	}
	next, err := f.restoredState(img)
	if err != nil {
		return err
	}
	if installing != nil {
		installing()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch, f.applied, f.lastIndex, f.cellKey = next.epoch, next.applied, next.lastIndex, next.cellKey
	// What the entries up to the snapshot changed is not known here.
	f.hist.reset(Position{Index: f.applied + 1})
	if f.auditor != nil {
		// The entries the snapshot covers are never applied here: their
		// records are another replica's to serve, unless this one has
		// them already (the restart of a replica that wrote them).
		f.auditor.Gap(max(f.lastIndex, f.applied))
	}
	f.nodes, f.sessions, f.handles, f.watch = next.nodes, next.sessions, next.handles, next.watch
	f.members, f.ephemerals = next.members, next.ephemerals
	f.ttls = ttlIndexOf(f.nodes)
	f.principals, f.principalHandles = map[string]int{}, map[string]int{}
	for _, s := range f.sessions {
		f.principals[s.Principal]++
		if len(s.handles) > 0 {
			f.principalHandles[s.Principal] += len(s.handles)
		}
	}
	f.usage = usageOf(f.nodes, f.Root())
	// Parsed ACL files are derived from the state just replaced.
	f.aclMu.Lock()
	f.aclParsed = nil
	f.aclMu.Unlock()
	return nil
}

// The fewest bytes one element of a snapshot's arrays takes as Snapshot
// writes it: the encoding of the type's zero value, since fields without
// omitempty are always written, integers at their full width, and no value
// encodes shorter than its type's zero. TestSnapshotElementSizes keeps
// them in step with the struct tags and the encoder.
const (
	minNodeBytes    = 51  // p, i, cg, ct, mt
	minHolderBytes  = 23  // h, s
	minWaiterBytes  = 38  // h, s, q, m
	minSessionBytes = 24  // id, t
	minHandleBytes  = 45  // id, s, p, i, f
	minResultBytes  = 280 // s, q, r with its st
)

// snapshotFields are the top-level keys of a snapshotImage, with the least
// encoded size of one element of each array field.
var snapshotFields = map[string]int{
	"v": 0, "c": 0, "e": 0, "a": 0, "k": 0,
	"n": minNodeBytes, "s": minSessionBytes, "h": minHandleBytes, "r": minResultBytes,
	"ms": 0, "mb": minMemberBytes, "li": 0, "rr": 0, // rr: strings, a small multiple of their bytes decoded
}

// decodeSnapshot decodes snapshot bytes into an image. codec.CheckBounds caps
// every claimed length by the bytes present, but it lets a short array's
// elements take one byte each and a long one's two, while an element
// decodes into a Node of some 300 bytes or slices twice the size of its
// elements; so the bytes must also have the shape Snapshot writes (see
// checkSnapshotShape) before they are decoded.
func decodeSnapshot(b []byte) (*snapshotImage, error) {
	if err := codec.CheckBounds(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	if err := checkSnapshotShape(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	var img snapshotImage
	if err := msgpack.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	return &img, nil
}

// checkSnapshotShape checks bytes that passed codec.CheckBounds have the shape
// Snapshot writes: a map of snapshotImage's keys, each at most once (a key
// this version does not know would be dropped silently), whose array
// fields hold maps, and whose arrays, with the lock holders and waiters
// inside the nodes, claim no more elements than the bytes could hold at
// their least encoded size. Decoding then allocates a small multiple of
// len(b).
func checkSnapshotShape(b []byte) error {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	least := 0
	// array skips an array (or nil) of maps, charging per bytes for each
	// and calling elem, when set, on the key of each of its entries.
	array := func(per int, elem func(key string) error) error {
		count, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		least += max(count, 0) * per
		for range count {
			if c, err := d.PeekCode(); err != nil || !isMapCode(c) {
				return fmt.Errorf("element of type byte %#x, not a map", c)
			}
			if elem == nil {
				err = d.Skip()
			} else {
				err = mapEntries(d, elem)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	node := func(key string) error {
		switch key {
		case "lh":
			return array(minHolderBytes, nil)
		case "lw":
			return array(minWaiterBytes, nil)
		}
		return d.Skip()
	}
	seen := map[string]bool{}
	field := func(key string) error {
		per, known := snapshotFields[key]
		if !known || seen[key] {
			return fmt.Errorf("unknown or repeated")
		}
		seen[key] = true
		switch {
		case per == 0:
			return d.Skip()
		case key == "n":
			return array(per, node)
		}
		return array(per, nil)
	}
	if !isMapCode(b[0]) {
		return fmt.Errorf("type byte %#x, not a map", b[0])
	}
	if err := mapEntries(d, field); err != nil {
		return err
	}
	if least > len(b) {
		return fmt.Errorf("its arrays claim elements of at least %d bytes in all, but it has %d", least, len(b))
	}
	return nil
}

// mapEntries reads a map's header and calls value on each string key; value
// reads or skips the key's value.
func mapEntries(d *msgpack.Decoder, value func(key string) error) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		if err := value(key); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	return nil
}

// isMapCode reports whether c starts a msgpack map.
func isMapCode(c byte) bool { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }

// restoredState validates a decoded snapshot image and builds the state it
// describes in a scratch FSM, touching nothing of f's. It refuses what no
// run of this FSM could have snapshotted, as far as applying later entries
// relies on it, and requires: a version and cell that match; no nil or repeated entries; a root
// directory that is not ephemeral, every other node in a directory below
// it; sessions and handles with ids of entries already applied; handles of
// existing sessions; de-duplication results that exist, of existing
// sessions, above their session's acknowledgement; and locks whose mode
// matches their holders and whose holders and waiters are handles open on
// that node, each at most once.
func (f *FSM) restoredState(img *snapshotImage) (*FSM, error) {
	bad := func(format string, args ...any) (*FSM, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrMalformedSnapshot}, args...)...)
	}
	if img.Version < minSnapshotVersion || img.Version > snapshotVersion {
		return bad("version %d is not %d to %d", img.Version, minSnapshotVersion, snapshotVersion)
	}
	if img.Cell != f.cell {
		return bad("snapshot of cell %q restored into cell %q", img.Cell, f.cell)
	}
	next := &FSM{cell: f.cell, epoch: img.Epoch, applied: img.Applied, lastIndex: max(img.Applied, img.LastIndex), cellKey: img.Key,
		nodes:      make(map[string]*Node, len(img.Nodes)),
		sessions:   make(map[uint64]*Session, len(img.Sessions)),
		handles:    make(map[uint64]*Handle, len(img.Handles)),
		watch:      map[string]*watchSet{},
		ephemerals: map[uint64]map[string]bool{},
	}
	root := next.Root()
	for i, n := range img.Nodes {
		switch {
		case n == nil:
			return bad("node %d is nil", i)
		case next.nodes[n.Path] != nil:
			return bad("node %q appears twice", n.Path)
		case n.Path == root && (!n.Dir || n.Ephemeral):
			return bad("root %q is not a plain directory", root)
		case n.Path != root && !strings.HasPrefix(n.Path, root+"/"):
			return bad("node %q is outside the root %q", n.Path, root)
		case n.ChildSeq != 0 && !n.Dir:
			return bad("file %q has a sequence counter", n.Path)
		case n.TTL != 0 && (n.Dir || n.Ephemeral || n.TTL < int64(MinTTL) || n.TTL > int64(MaxTTL)):
			return bad("node %q has TTL %d: only a plain file takes one, of %d to %d ns", n.Path, n.TTL, int64(MinTTL), int64(MaxTTL))
		case n.Container && (!n.Dir || n.Ephemeral || n.Path == root):
			return bad("node %q is a container but no plain directory below the root", n.Path)
		case n.ChildSeq > maxChildSeq+1:
			return bad("directory %q has sequence counter %d, past the last number %d", n.Path, n.ChildSeq, uint64(maxChildSeq))
		}
		if n.Dir {
			n.children = map[string]bool{}
		}
		next.nodes[n.Path] = n
	}
	if next.nodes[root] == nil {
		return bad("no root %q", root)
	}
	for _, n := range img.Nodes {
		if n.Path == root {
			continue
		}
		p := next.nodes[parentOf(n.Path)]
		if p == nil || !p.Dir {
			return bad("node %q has no parent directory", n.Path)
		}
		p.children[baseOf(n.Path)] = n.Dir
		p.addKid(baseOf(n.Path), n)
		next.ownEphemeral(n)
	}
	for i, s := range img.Sessions {
		switch {
		case s == nil:
			return bad("session %d is nil", i)
		case s.ID == 0 || s.ID > next.lastIndex:
			return bad("session id %d is not an applied command index (last %d)", s.ID, next.lastIndex)
		case next.sessions[s.ID] != nil:
			return bad("session %d appears twice", s.ID)
		}
		s.Results, s.handles = nil, map[uint64]bool{}
		next.sessions[s.ID] = s
	}
	for _, r := range img.Results {
		s := next.sessions[r.Session]
		switch {
		case s == nil:
			return bad("result %d of unknown session %d", r.Seq, r.Session)
		case r.Result == nil:
			return bad("result %d of session %d is nil", r.Seq, r.Session)
		case r.Seq <= s.AckSeq:
			return bad("result %d of session %d is at or below its acknowledgement %d", r.Seq, r.Session, s.AckSeq)
		case s.Results[r.Seq] != nil:
			return bad("result %d of session %d appears twice", r.Seq, r.Session)
		}
		if s.Results == nil {
			s.Results = map[uint64]*Result{}
		}
		s.Results[r.Seq] = r.Result
	}
	for i, h := range img.Handles {
		switch {
		case h == nil:
			return bad("handle %d is nil", i)
		case h.ID == 0 || h.ID > next.lastIndex:
			return bad("handle id %d is not an applied command index (last %d)", h.ID, next.lastIndex)
		case next.handles[h.ID] != nil:
			return bad("handle %d appears twice", h.ID)
		case next.sessions[h.Session] == nil:
			return bad("handle %d of unknown session %d", h.ID, h.Session)
		}
		next.handles[h.ID] = h
		next.addWatch(h)
		next.sessions[h.Session].handles[h.ID] = true
		if n := next.nodes[h.Path]; n != nil && n.Instance == h.Instance {
			n.openHandles++
		}
	}
	if err := next.checkRestoredLocks(img.Nodes); err != nil {
		return nil, err
	}
	if err := next.members.restore(img); err != nil {
		return nil, err
	}
	return next, nil
}

// checkRestoredLocks checks the locks of restored nodes: the mode says
// whether there are holders (exactly one when exclusive), waiters ask for
// a real mode, and every holder and waiter is a handle of its session open
// on that node instance, holding or waiting at most once.
func (f *FSM) checkRestoredLocks(nodes []*Node) error {
	bad := func(n *Node, format string, args ...any) error {
		return fmt.Errorf("%w: lock of %q: "+format, append([]any{ErrMalformedSnapshot, n.Path}, args...)...)
	}
	onNode := func(n *Node, handle, session uint64) bool {
		h := f.handles[handle]
		return h != nil && h.Session == session && h.Path == n.Path && h.Instance == n.Instance
	}
	seen := map[uint64]bool{} // a handle is open on one node: holds or waits once
	for _, n := range nodes {
		switch {
		case n.LockMode > LockShared:
			return bad(n, "mode %d", n.LockMode)
		case (n.LockMode == LockFree) != (len(n.Holders) == 0):
			return bad(n, "mode %s with %d holders", modeName(n.LockMode), len(n.Holders))
		case n.LockMode == LockExclusive && len(n.Holders) != 1:
			return bad(n, "exclusive with %d holders", len(n.Holders))
		case n.SemLimit != 0 && (n.Dir || n.SemLimit > MaxSemLimit || n.LockMode == LockExclusive || len(n.Holders) > int(n.SemLimit)):
			return bad(n, "a semaphore of %d permits (directory %v) held %s by %d", n.SemLimit, n.Dir, modeName(n.LockMode), len(n.Holders))
		case n.SemLimit == 0 && len(n.SemDelays) != 0:
			return bad(n, "permit delays on a plain lock")
		}
		for _, ho := range n.Holders {
			if !onNode(n, ho.Handle, ho.Session) || seen[ho.Handle] {
				return bad(n, "holder %+v is not a handle open on it, or holds twice", ho)
			}
			if (n.SemLimit != 0) != (ho.Gen != 0) {
				return bad(n, "holder %+v: a generation of its own is a semaphore holder's only", ho)
			}
			seen[ho.Handle] = true
		}
		for _, w := range n.Waiters {
			if w.Mode != LockExclusive && w.Mode != LockShared {
				return bad(n, "waiter %+v asks for mode %d", w, w.Mode)
			}
			if !onNode(n, w.Handle, w.Session) || seen[w.Handle] {
				return bad(n, "waiter %+v is not a handle open on it, or holds or waits twice", w)
			}
			if w.Group != nil && (n.SemLimit != 0 || w.Mode != LockExclusive || !slices.Contains(w.Group, w.Handle) ||
				len(w.Group) > MaxMultiLock || !slices.IsSorted(w.Group)) {
				return bad(n, "multi-lock waiter %+v is not one this version makes", w)
			}
			seen[w.Handle] = true
		}
	}
	return nil
}
