// Package codec holds the msgpack mechanics lockcell's formats share: the
// Writer that hand-written encoders write fields with, the tag guard that
// keeps them honest (TagGuard), the bounds check on untrusted bytes
// (CheckBounds) and the pooled, bounded decode (Decode). The formats
// themselves (the wire's messages, the Raft log's commands, the
// snapshot's nodes) and their encoders stay beside their types. It is a
// leaf: it imports nothing of lockcell.
//
// Why encoders are written by hand at all: msgpack's reflection allocates
// for every struct it encodes with omitempty fields (a slice of the fields
// it keeps and a boxed copy of each omitempty value to ask it whether it
// is empty), which was most of the garbage of the hot paths. A hand
// encoder writes exactly the bytes reflection writes: a map of the fields
// in declaration order, each omitempty one only when it is not empty.
package codec

import (
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// FieldTags lists t's exported fields as "Name:tag" (the msgpack tag),
// space-separated, in declaration order.
func FieldTags(t reflect.Type) string {
	var out []string
	for f := range t.Fields() {
		if f.IsExported() {
			out = append(out, f.Name+":"+f.Tag.Get("msgpack"))
		}
	}
	return strings.Join(out, " ")
}

// TagGuard says, for each type of want (its fields as FieldTags lists
// them when its hand encoder was written), whether its fields are still
// exactly those. A type that gained, lost or retagged a field without its
// encoder following gets false, and its caller encodes it by reflection
// instead, so no field is ever left out.
func TagGuard(want map[reflect.Type]string) map[reflect.Type]bool {
	m := make(map[reflect.Type]bool, len(want))
	for t, tags := range want {
		m[t] = FieldTags(t) == tags
	}
	return m
}

// Writer writes a hand-encoded struct's fields to an encoder as msgpack's
// reflection does, keeping the first error (Err). Compact must match the
// encoder's UseCompactInts: reflection writes an integer field at its
// type's full width, or in its smallest form on a compact encoder, and
// Writer writes what reflection would. A field passed with always false
// is omitempty: written only when it is not empty.
//
// A Writer is a value kept on the caller's stack: writing allocates
// nothing beyond what the encoder does.
type Writer struct {
	E       *msgpack.Encoder // the encoder written to
	Compact bool             // E writes compact integers (UseCompactInts)
	Err     error            // the first error E returned, if any
}

// Check keeps err if it is the first error.
func (w *Writer) Check(err error) {
	if w.Err == nil {
		w.Err = err
	}
}

// MapLen writes the length of a map of always fields, plus one for each
// omitempty field that is set.
func (w *Writer) MapLen(always int, set ...bool) {
	n := always
	for _, s := range set {
		if s {
			n++
		}
	}
	w.Check(w.E.EncodeMapLen(n))
}

// Key writes a field's key.
func (w *Writer) Key(k string) { w.Check(w.E.EncodeString(k)) }

// field writes k when the field is to be written (always, or not empty)
// and reports whether it is.
func (w *Writer) field(k string, write bool) bool {
	if write {
		w.Key(k)
	}
	return write
}

// Str writes a string field.
func (w *Writer) Str(k, v string, always bool) {
	if w.field(k, always || v != "") {
		w.Check(w.E.EncodeString(v))
	}
}

// Bytes writes a []byte field.
func (w *Writer) Bytes(k string, v []byte, always bool) {
	if w.field(k, always || len(v) != 0) {
		w.Check(w.E.EncodeBytes(v))
	}
}

// Bool writes an omitempty bool field (only a true one is written).
func (w *Writer) Bool(k string, v bool) {
	if w.field(k, v) {
		w.Check(w.E.EncodeBool(v))
	}
}

// Uint writes a uint64 field. It encodes v itself rather than through
// uint: most integers written are uint64s, and the call is a tenth of
// their cost.
func (w *Writer) Uint(k string, v uint64, always bool) {
	switch {
	case !w.field(k, always || v != 0):
	case w.Compact:
		w.Check(w.E.EncodeUint(v))
	default:
		w.Check(w.E.EncodeUint64(v))
	}
}

// Uint32 writes a uint32 field.
func (w *Writer) Uint32(k string, v uint32, always bool) {
	if w.field(k, always || v != 0) {
		w.uint(uint64(v), 4)
	}
}

// Uint8 writes a uint8 field.
func (w *Writer) Uint8(k string, v uint8, always bool) {
	if w.field(k, always || v != 0) {
		w.uint(uint64(v), 1)
	}
}

// uint writes v as reflection writes an unsigned field of size bytes:
// in its smallest form on a compact encoder, else at the full size.
func (w *Writer) uint(v uint64, size int) {
	switch {
	case w.Compact:
		w.Check(w.E.EncodeUint(v))
	case size == 1:
		w.Check(w.E.EncodeUint8(uint8(v)))
	case size == 4:
		w.Check(w.E.EncodeUint32(uint32(v)))
	default:
		w.Check(w.E.EncodeUint64(v))
	}
}

// Int writes an int64 field.
func (w *Writer) Int(k string, v int64, always bool) {
	if !w.field(k, always || v != 0) {
		return
	}
	if w.Compact {
		w.Check(w.E.EncodeInt(v))
	} else {
		w.Check(w.E.EncodeInt64(v))
	}
}
