package fsm

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// The snapshot codec's writing side: the persisted image of the state,
// Snapshot and StateHash (which encode it), and the chunked buffer and
// hand-written Node encoder that keep that encoding cheap. restore.go reads
// it back.

// snapshotImage is the persisted form of the state machine.
type snapshotImage struct {
	Version  uint8      `msgpack:"v"`
	Cell     string     `msgpack:"c"`
	Epoch    uint64     `msgpack:"e"`
	Applied  uint64     `msgpack:"a"`
	Nodes    []*Node    `msgpack:"n"`
	Sessions []*Session `msgpack:"s"`
	Handles  []*Handle  `msgpack:"h"`
	// Key is the cell's secret sequencer key.
	Key []byte `msgpack:"k,omitempty"`
	// Results are the sessions' de-duplication tables, by (session, seq).
	Results []sessionResult `msgpack:"r"`
	// Members and MemberSize are the member table (members.go), omitted
	// until it is seeded, so older snapshots restore.
	Members    []MemberAddrs `msgpack:"mb,omitempty"`
	MemberSize int           `msgpack:"ms,omitempty"`
	// LastIndex is the last command index (batch.go) when it has run
	// ahead of Applied; omitted while it equals Applied.
	LastIndex uint64 `msgpack:"li,omitempty"`
	// ReadReplicas are the ids of the member table's read replicas
	// (readreplica.go), omitted while there is none.
	ReadReplicas []string `msgpack:"rr,omitempty"`
}

type sessionResult struct {
	Session uint64  `msgpack:"s"`
	Seq     uint64  `msgpack:"q"`
	Result  *Result `msgpack:"r"`
}

// snapshotVersion 2: de-dup tables moved out of the sessions into Results.
// Version 3: sessions carry their declared identity (Host, PID, Program),
// holders and waiters their Since, nodes their LockDelayBy. Every one of
// those is optional, so a version-2 snapshot restores as it is, with them
// empty (minSnapshotVersion). Version 4: sessions carry their
// Incarnation (resume.go), optional too, so versions 2 and 3 restore as
// they are, with every session never resumed. A state in which no live
// session was ever resumed is still written as version 3
// (imageVersion): its bytes are exactly a version-3 snapshot's, so a
// replica of the version before can still install it during a rolling
// upgrade, and a state's hash does not change with the upgrade.
// Version 5: directories carry their sequence counter (Node.ChildSeq,
// sequential.go) and de-duplicated results of sequential opens the name
// they created (Result.Name), optional too, so versions 2 to 4 restore as
// they are, with every counter at 0. By the same rule a state in which no
// directory has a counter and no result a name is written as version 4
// or 3: only a cell that made a sequential name writes version 5, which a
// replica of the version before refuses rather than drop the counters
// and hand their numbers out again.
// Version 6: de-duplicated results of transactions carry their outcome
// (Result.Txn, txn.go), optional too; only a state whose de-duplication
// table holds a transaction's result is written as version 6, so a
// replica of the version before refuses it rather than answer a retried
// transaction without the outcome it needs.
// Version 7: nodes carry their lifetime rule (Node.TTL, Node.Container,
// ttl.go), and de-duplicated results the stat fields of the same names,
// optional too, so versions 2 to 6 restore as they are, with no TTL
// node and no container. A state with neither is written as version 6
// or older: only a cell that made one writes version 7, which a replica
// of the version before refuses rather than keep the nodes forever and
// diverge at the first expiry.
// Version 8: nodes carry a semaphore's permit count and held-back
// permits (Node.SemLimit, Node.SemDelays, semaphore.go), holders their
// own generation (Holder.Gen), waiters their multi-lock group
// (Waiter.Group), and de-duplicated results the stat's SemLimit, all
// optional, so versions 2 to 7 restore as they are, with no semaphore
// and no multi-lock wait. A state with none is written as version 7 or
// older: only a cell that made a semaphore or queued a multi-lock writes
// version 8, which a replica of the version before refuses rather than
// treat a semaphore as a plain lock or a group as separate waits.
// Version 9: the member table carries the read-replica role
// (ReadReplicas, readreplica.go), optional, so versions 2 to 8 restore as
// they are, with no read replica. A state with none is written as version
// 8 or older: only a cell with a read replica in its member table writes
// version 9, which a replica of the version before refuses rather than
// forget the role and promote the read replica to voter.
const snapshotVersion = 9

// The versions written while the newer ones' fields are unused:
// snapshotV3 while no session was resumed, snapshotV4 while no
// sequential name was made, snapshotV5 while no transaction result is
// kept, snapshotV6 while no TTL node or container exists, snapshotV7
// while no semaphore or multi-lock wait exists, snapshotV8 while no read
// replica is in the member table.
const (
	snapshotV3 = 3
	snapshotV4 = 4
	snapshotV5 = 5
	snapshotV6 = 6
	snapshotV7 = 7
	snapshotV8 = 8
)

// imageVersion is the version img is written as: the oldest whose fields
// hold its state.
func imageVersion(img *snapshotImage) uint8 {
	if len(img.ReadReplicas) > 0 {
		return snapshotVersion
	}
	for _, n := range img.Nodes {
		if n.SemLimit != 0 {
			return snapshotV8
		}
		for _, w := range n.Waiters {
			if w.Group != nil {
				return snapshotV8
			}
		}
	}
	for _, r := range img.Results {
		if r.Result != nil && r.Result.Stat.SemLimit != 0 {
			return snapshotV8
		}
	}
	for _, n := range img.Nodes {
		if n.TTL != 0 || n.Container {
			return snapshotV7
		}
	}
	for _, r := range img.Results {
		if r.Result != nil && (r.Result.Stat.TTL != 0 || r.Result.Stat.Container) {
			return snapshotV7
		}
	}
	for _, r := range img.Results {
		if r.Result != nil && r.Result.Txn != nil {
			return snapshotV6
		}
	}
	for _, n := range img.Nodes {
		if n.ChildSeq != 0 {
			return snapshotV5
		}
	}
	for _, r := range img.Results {
		if r.Result != nil && r.Result.Name != "" {
			return snapshotV5
		}
	}
	for _, s := range img.Sessions {
		if s.Incarnation != 0 {
			return snapshotV4
		}
	}
	return snapshotV3
}

// minSnapshotVersion is the oldest snapshot version Restore accepts.
const minSnapshotVersion = 2

// Snapshot is the state encoded at one applied index, in chunks: the
// snapshot bytes Restore reads back. It holds no reference to the FSM, so
// it is written out while applies go on.
type Snapshot struct{ data *chunkBuffer }

// Snapshot encodes the whole state under the read lock (applies wait for
// it), so the bytes are the state at one applied index. Contents slices are
// never mutated in place, so encoding is the only copy. The encoding goes
// into fixed-size chunks (chunkBuffer): the snapshot costs its own size
// once, never a contiguous buffer grown by doubling.
func (f *FSM) Snapshot() (*Snapshot, error) {
	if err := f.syncAudit(); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf chunkBuffer
	if err := f.writeStateLocked(&buf); err != nil {
		return nil, err
	}
	return &Snapshot{data: &buf}, nil
}

// StateHash returns the index of the last applied entry and a SHA-256 of
// the whole state at it (the snapshot bytes, which are byte-for-byte
// repeatable). Two replicas at the same index must give the same hash; the
// chaos tests compare them after healing. The encoding streams into the
// hash under the read lock, so a hash holds no copy of the state.
func (f *FSM) StateHash() (uint64, [32]byte, error) {
	h := sha256.New()
	w := bufio.NewWriterSize(h, hashBufferSize)
	f.mu.RLock()
	err := f.writeStateLocked(w)
	applied := f.applied
	f.mu.RUnlock()
	if err == nil {
		err = w.Flush() // a hash never fails a write
	}
	if err != nil {
		return 0, [32]byte{}, err
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return applied, sum, nil
}

// hashBufferSize batches the encoder's many small writes into the hash.
const hashBufferSize = 64 << 10

// encodeLocked renders the state as one contiguous slice of snapshot
// bytes; f.mu is held. Only seeding a restored replica wants that;
// Snapshot and StateHash stream (writeStateLocked).
func (f *FSM) encodeLocked() ([]byte, error) {
	var buf chunkBuffer
	if err := f.writeStateLocked(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeStateLocked encodes the state as snapshot bytes to w; f.mu is held.
// Map keys are sorted and the arrays are in key order, so identical states
// give identical bytes.
func (f *FSM) writeStateLocked(w io.Writer) error {
	img := snapshotImage{Version: snapshotVersion, Cell: f.cell, Epoch: f.epoch, Applied: f.applied, Key: f.cellKey,
		LastIndex: f.snapshotLastIndex(), Nodes: make([]*Node, 0, len(f.nodes)), Sessions: make([]*Session, 0, len(f.sessions)),
		Handles: make([]*Handle, 0, len(f.handles))}
	for _, p := range sortedStrings(f.nodes) {
		img.Nodes = append(img.Nodes, f.nodes[p])
	}
	for _, id := range sortedKeys(f.sessions) {
		sess := f.sessions[id]
		img.Sessions = append(img.Sessions, sess)
		for _, q := range sortedKeys(sess.Results) {
			img.Results = append(img.Results, sessionResult{Session: id, Seq: q, Result: sess.Results[q]})
		}
	}
	for _, id := range sortedKeys(f.handles) {
		img.Handles = append(img.Handles, f.handles[id])
	}
	f.members.image(&img)
	img.Version = imageVersion(&img)
	enc := msgpack.NewEncoder(w)
	enc.SetSortMapKeys(true) // identical states give identical bytes
	if err := enc.Encode(&img); err != nil {
		return fmt.Errorf("replica: encode snapshot: %w", err)
	}
	return nil
}

// Len is the length of the snapshot bytes.
func (s *Snapshot) Len() int { return s.data.Len() }

// WriteRange writes bytes [from, to) of the snapshot to w, so a caller
// can write it in parts (the node's crash point between two halves).
func (s *Snapshot) WriteRange(w io.Writer, from, to int) error { return s.data.writeRange(w, from, to) }

// Release drops the chunks, so they are garbage even while a reference to
// the snapshot lingers.
func (s *Snapshot) Release() { s.data.reset() }

// snapshotChunkSize is the size of one chunk of an encoded snapshot. A
// snapshot of a large state is tens of MiB; chunks this size waste at most
// one partial chunk and take no contiguous span of that size.
const snapshotChunkSize = 256 << 10

// chunkBuffer collects written bytes in chunks of snapshotChunkSize. Unlike
// a bytes.Buffer it never grows by doubling: it allocates what is written,
// rounded up to one chunk, with no garbage of earlier, smaller copies and
// no peak of old and new buffer at once. The zero value is empty and ready.
type chunkBuffer struct {
	chunks [][]byte
	n      int
}

// Write appends p; it never fails.
func (b *chunkBuffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		c := b.room()
		k := copy(c[len(c):cap(c)], p)
		b.chunks[len(b.chunks)-1] = c[:len(c)+k]
		p = p[k:]
	}
	b.n += n
	return n, nil
}

// WriteString appends s; it never fails.
func (b *chunkBuffer) WriteString(s string) (int, error) {
	n := len(s)
	for len(s) > 0 {
		c := b.room()
		k := copy(c[len(c):cap(c)], s)
		b.chunks[len(b.chunks)-1] = c[:len(c)+k]
		s = s[k:]
	}
	b.n += n
	return n, nil
}

// WriteByte appends c; it never fails.
func (b *chunkBuffer) WriteByte(c byte) error {
	last := b.room()
	b.chunks[len(b.chunks)-1] = append(last, c)
	b.n++
	return nil
}

// room returns the last chunk, after adding one when it is full.
func (b *chunkBuffer) room() []byte {
	if k := len(b.chunks); k > 0 && len(b.chunks[k-1]) < cap(b.chunks[k-1]) {
		return b.chunks[k-1]
	}
	c := make([]byte, 0, snapshotChunkSize)
	b.chunks = append(b.chunks, c)
	return c
}

// Len is the number of bytes written.
func (b *chunkBuffer) Len() int { return b.n }

// writeRange writes bytes [from, to) to w.
func (b *chunkBuffer) writeRange(w io.Writer, from, to int) error {
	off := 0
	for _, c := range b.chunks {
		lo, hi := max(from-off, 0), min(to-off, len(c))
		off += len(c)
		if lo >= hi {
			continue
		}
		if _, err := w.Write(c[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// Bytes joins the chunks into one slice of exactly Len bytes.
func (b *chunkBuffer) Bytes() []byte {
	out := make([]byte, 0, b.n)
	for _, c := range b.chunks {
		out = append(out, c...)
	}
	return out
}

// reset drops the chunks.
func (b *chunkBuffer) reset() { b.chunks, b.n = nil, 0 }

// Node is encoded by hand in snapshots: msgpack's reflection allocates for
// every struct it encodes with omitempty fields (a slice of the fields
// kept and a boxed value for each omitempty one, about 360 bytes a node),
// which at 100,000 nodes is 36 MiB of garbage per snapshot or state hash
// and a fifth of the time the encoding holds the FSM's read lock.
// EncodeMsgpack writes exactly what reflection writes for Node with the
// encoder snapshots use (integers at their full width: Node is encoded
// nowhere else). TestNodeEncodingMatchesReflection checks it byte for byte.

// plainNode is Node without EncodeMsgpack: msgpack encodes it by
// reflection.
type plainNode Node

// nodeTags are Node's exported fields with their msgpack tags, as
// EncodeMsgpack writes them. Should Node gain, lose or retag a field
// without EncodeMsgpack following, Node is encoded by reflection instead
// (nodeByHand is false), so no field is ever left out of a snapshot.
const nodeTags = "Path:p Dir:d,omitempty Ephemeral:e,omitempty Owner:o,omitempty Contents:c,omitempty " +
	"Instance:i ContentGen:cg LockGen:lg,omitempty ACLGen:ag,omitempty Checksum:ck,omitempty CTime:ct MTime:mt " +
	"ReadACL:ra,omitempty WriteACL:wa,omitempty ChangeACL:ca,omitempty LockMode:lm,omitempty Holders:lh,omitempty " +
	"Waiters:lw,omitempty LockDelayUntil:ld,omitempty Creator:cr,omitempty LockDelayBy:lb,omitempty " +
	"ChildSeq:sq,omitempty TTL:tl,omitempty Container:cn,omitempty SemLimit:sl,omitempty SemDelays:sd,omitempty"

var nodeByHand = codec.FieldTags(reflect.TypeFor[Node]()) == nodeTags

// EncodeMsgpack writes n as msgpack's reflection does for Node (see
// nodeTags): a map of its fields in declaration order, the omitempty ones
// only when they are not empty.
func (n *Node) EncodeMsgpack(e *msgpack.Encoder) error {
	if !nodeByHand {
		return e.Encode((*plainNode)(n))
	}
	// Integers at their full width, as snapshots' encoder writes them; five
	// fields always (p, i, cg, ct, mt).
	w := codec.Writer{E: e}
	w.MapLen(5, n.Dir, n.Ephemeral, n.Owner != 0, len(n.Contents) != 0, n.LockGen != 0,
		n.ACLGen != 0, n.Checksum != 0, n.ReadACL != "", n.WriteACL != "", n.ChangeACL != "", n.LockMode != 0,
		len(n.Holders) != 0, len(n.Waiters) != 0, n.LockDelayUntil != 0, n.Creator != "", n.LockDelayBy != nil,
		n.ChildSeq != 0, n.TTL != 0, n.Container, n.SemLimit != 0, len(n.SemDelays) != 0)
	w.Str("p", n.Path, true)
	w.Bool("d", n.Dir)
	w.Bool("e", n.Ephemeral)
	w.Uint("o", n.Owner, false)
	w.Bytes("c", n.Contents, false)
	w.Uint("i", n.Instance, true)
	w.Uint("cg", n.ContentGen, true)
	w.Uint("lg", n.LockGen, false)
	w.Uint("ag", n.ACLGen, false)
	w.Uint("ck", n.Checksum, false)
	w.Int("ct", n.CTime, true)
	w.Int("mt", n.MTime, true)
	w.Str("ra", n.ReadACL, false)
	w.Str("wa", n.WriteACL, false)
	w.Str("ca", n.ChangeACL, false)
	w.Uint8("lm", n.LockMode, false)
	if len(n.Holders) != 0 {
		w.Key("lh")
		w.Check(e.Encode(n.Holders))
	}
	if len(n.Waiters) != 0 {
		w.Key("lw")
		w.Check(e.Encode(n.Waiters))
	}
	w.Int("ld", n.LockDelayUntil, false)
	w.Str("cr", n.Creator, false)
	if n.LockDelayBy != nil {
		w.Key("lb")
		w.Check(e.Encode(n.LockDelayBy))
	}
	w.Uint("sq", n.ChildSeq, false)
	w.Int("tl", n.TTL, false)
	w.Bool("cn", n.Container)
	w.Uint32("sl", n.SemLimit, false)
	if len(n.SemDelays) != 0 {
		w.Key("sd")
		w.Check(e.Encode(n.SemDelays))
	}
	return w.Err
}
