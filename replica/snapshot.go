package replica

import (
	"io"
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

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
	"Waiters:lw,omitempty LockDelayUntil:ld,omitempty Creator:cr,omitempty"

var nodeByHand = exportedTags(reflect.TypeFor[Node]()) == nodeTags

// exportedTags lists t's exported fields as "Name:tag", space-separated.
func exportedTags(t reflect.Type) string {
	var out []string
	for f := range t.Fields() {
		if f.IsExported() {
			out = append(out, f.Name+":"+f.Tag.Get("msgpack"))
		}
	}
	return strings.Join(out, " ")
}

// EncodeMsgpack writes n as msgpack's reflection does for Node (see
// nodeTags): a map of its fields in declaration order, the omitempty ones
// only when they are not empty.
func (n *Node) EncodeMsgpack(e *msgpack.Encoder) error {
	if !nodeByHand {
		return e.Encode((*plainNode)(n))
	}
	fields := 5 // p, i, cg, ct, mt
	for _, set := range [...]bool{n.Dir, n.Ephemeral, n.Owner != 0, len(n.Contents) != 0, n.LockGen != 0,
		n.ACLGen != 0, n.Checksum != 0, n.ReadACL != "", n.WriteACL != "", n.ChangeACL != "", n.LockMode != 0,
		len(n.Holders) != 0, len(n.Waiters) != 0, n.LockDelayUntil != 0, n.Creator != ""} {
		if set {
			fields++
		}
	}
	w := nodeWriter{e: e}
	w.check(e.EncodeMapLen(fields))
	w.str("p", n.Path, true)
	w.boolean("d", n.Dir)
	w.boolean("e", n.Ephemeral)
	w.uint("o", n.Owner, false)
	if len(n.Contents) != 0 {
		w.key("c")
		w.check(e.EncodeBytes(n.Contents))
	}
	w.uint("i", n.Instance, true)
	w.uint("cg", n.ContentGen, true)
	w.uint("lg", n.LockGen, false)
	w.uint("ag", n.ACLGen, false)
	w.uint("ck", n.Checksum, false)
	w.int("ct", n.CTime, true)
	w.int("mt", n.MTime, true)
	w.str("ra", n.ReadACL, false)
	w.str("wa", n.WriteACL, false)
	w.str("ca", n.ChangeACL, false)
	if n.LockMode != 0 {
		w.key("lm")
		w.check(e.EncodeUint8(n.LockMode))
	}
	if len(n.Holders) != 0 {
		w.key("lh")
		w.check(e.Encode(n.Holders))
	}
	if len(n.Waiters) != 0 {
		w.key("lw")
		w.check(e.Encode(n.Waiters))
	}
	w.int("ld", n.LockDelayUntil, false)
	w.str("cr", n.Creator, false)
	return w.err
}

// nodeWriter writes a Node's fields, keeping the first error.
type nodeWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *nodeWriter) check(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *nodeWriter) key(k string) { w.check(w.e.EncodeString(k)) }

func (w *nodeWriter) str(k, v string, always bool) {
	if always || v != "" {
		w.key(k)
		w.check(w.e.EncodeString(v))
	}
}

func (w *nodeWriter) boolean(k string, v bool) {
	if v {
		w.key(k)
		w.check(w.e.EncodeBool(v))
	}
}

func (w *nodeWriter) uint(k string, v uint64, always bool) {
	if always || v != 0 {
		w.key(k)
		w.check(w.e.EncodeUint64(v))
	}
}

func (w *nodeWriter) int(k string, v int64, always bool) {
	if always || v != 0 {
		w.key(k)
		w.check(w.e.EncodeInt64(v))
	}
}
