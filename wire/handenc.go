package wire

import (
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// The messages of the common calls are encoded by hand in WriteMessage.
// msgpack's reflection allocates for every struct it encodes with
// omitempty fields: a slice of the fields it keeps, and a boxed copy of
// every omitempty field's value to ask it whether it is empty. For a
// small call that was most of the codec's garbage (a Header, a
// HandleRequest, a Status and a ContentsResponse: about 30 allocations).
// encodeByHand writes exactly the bytes reflection writes with
// WriteMessage's encoder (compact integers): a map of the fields in
// declaration order, each omitempty one only when it is not empty.
// TestHandEncodingMatchesReflection checks it byte for byte. It is used
// only by WriteMessage, whose encoder's flags it knows, never through a
// method msgpack would find (a msgpack.Marshal elsewhere, with other
// flags, still encodes these types by reflection).
//
// Should one of these types gain, lose or retag a field without its
// encoder following, its tags no longer match handTags and WriteMessage
// encodes it by reflection, so no field is ever left out of a message.

// handTags are the exported fields with their msgpack tags of each type
// encoded by hand, as its encoder writes them.
var handTags = map[reflect.Type]string{
	reflect.TypeFor[Header](): "Method:m Session:s,omitempty Epoch:e,omitempty Seq:q,omitempty Ack:a,omitempty " +
		"KeepStream:k,omitempty Incarnation:in,omitempty",
	reflect.TypeFor[Status](): "Code:c Msg:g,omitempty Leader:l,omitempty Epoch:e,omitempty",
	reflect.TypeFor[HandleRequest](): "Handle:h Sequencer:sq,omitempty Cache:c,omitempty After:a,omitempty " +
		"Limit:l,omitempty",
	reflect.TypeFor[SetContentsRequest](): "Handle:h Contents:c IfGeneration:g,omitempty HasIfGeneration:i,omitempty " +
		"Sequencer:sq,omitempty",
	reflect.TypeFor[KeepAliveRequest]():  "AckEvent:a,omitempty Prompt:p,omitempty",
	reflect.TypeFor[KeepAliveResponse](): "Epoch:e HeldMillis:h LeaseMillis:l Events:v,omitempty",
	reflect.TypeFor[Stat](): "Instance:i ContentGen:cg LockGen:lg ACLGen:ag Checksum:ck Size:sz CTime:ct MTime:mt " +
		"Dir:d,omitempty Ephemeral:ep,omitempty ReadACL:ra,omitempty WriteACL:wa,omitempty ChangeACL:ca,omitempty " +
		"LockMode:lm,omitempty LockHolders:lh,omitempty LockWaiters:lw,omitempty LockDelayUntil:ld,omitempty " +
		"Holders:ho,omitempty Waiters:wt,omitempty LockDelayBy:lb,omitempty",
	reflect.TypeFor[ContentsResponse](): "Contents:c Stat:s Cacheable:k,omitempty",
	reflect.TypeFor[StatResponse]():     "Stat:s Cacheable:k,omitempty",
}

// byHand says, per type, whether its fields are still those its encoder
// writes (see handTags).
var byHand = func() map[reflect.Type]bool {
	m := make(map[reflect.Type]bool, len(handTags))
	for t, tags := range handTags {
		m[t] = exportedTags(t) == tags
	}
	return m
}()

// The answers of byHand for each type, read on every message without a
// map lookup.
var (
	headerByHand       = byHand[reflect.TypeFor[Header]()]
	statusByHand       = byHand[reflect.TypeFor[Status]()]
	handleReqByHand    = byHand[reflect.TypeFor[HandleRequest]()]
	setContentsByHand  = byHand[reflect.TypeFor[SetContentsRequest]()]
	keepAliveReqByHand = byHand[reflect.TypeFor[KeepAliveRequest]()]
	keepAliveByHand    = byHand[reflect.TypeFor[KeepAliveResponse]()]
	statByHand         = byHand[reflect.TypeFor[Stat]()]
	contentsByHand     = byHand[reflect.TypeFor[ContentsResponse]()] && statByHand
	statRespByHand     = byHand[reflect.TypeFor[StatResponse]()] && statByHand
)

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

// encodeByHand writes v with e if v is one of the types encoded by hand
// (and still matches its encoder), reporting whether it did. e must be
// WriteMessage's encoder: compact integers, no other flags.
func encodeByHand(e *msgpack.Encoder, v any) (bool, error) {
	w := handWriter{e: e}
	switch m := v.(type) {
	case *Header:
		if !headerByHand || m == nil {
			return false, nil
		}
		w.mapLen(1, m.Session != 0, m.Epoch != 0, m.Seq != 0, m.Ack != 0, m.KeepStream, m.Incarnation != 0)
		w.uint("m", uint64(m.Method), true)
		w.uint("s", m.Session, false)
		w.uint("e", m.Epoch, false)
		w.uint("q", m.Seq, false)
		w.uint("a", m.Ack, false)
		w.boolean("k", m.KeepStream)
		w.uint("in", m.Incarnation, false)
	case *Status:
		if !statusByHand || m == nil {
			return false, nil
		}
		w.mapLen(1, m.Msg != "", m.Leader != "", m.Epoch != 0)
		w.uint("c", uint64(m.Code), true)
		w.str("g", m.Msg, false)
		w.str("l", m.Leader, false)
		w.uint("e", m.Epoch, false)
	case *HandleRequest:
		if !handleReqByHand || m == nil {
			return false, nil
		}
		w.mapLen(1, len(m.Sequencer) != 0, m.Cache, m.After != "", m.Limit != 0)
		w.uint("h", m.Handle, true)
		w.bytes("sq", m.Sequencer, false)
		w.boolean("c", m.Cache)
		w.str("a", m.After, false)
		w.uint("l", uint64(m.Limit), false)
	case *SetContentsRequest:
		if !setContentsByHand || m == nil {
			return false, nil
		}
		w.mapLen(2, m.IfGeneration != 0, m.HasIfGeneration, len(m.Sequencer) != 0)
		w.uint("h", m.Handle, true)
		w.bytes("c", m.Contents, true)
		w.uint("g", m.IfGeneration, false)
		w.boolean("i", m.HasIfGeneration)
		w.bytes("sq", m.Sequencer, false)
	case *KeepAliveRequest:
		if !keepAliveReqByHand || m == nil {
			return false, nil
		}
		w.mapLen(0, m.AckEvent != 0, m.Prompt)
		w.uint("a", m.AckEvent, false)
		w.boolean("p", m.Prompt)
	case *KeepAliveResponse:
		if !keepAliveByHand || m == nil {
			return false, nil
		}
		w.mapLen(3, len(m.Events) != 0)
		w.uint("e", m.Epoch, true)
		w.int("h", m.HeldMillis, true)
		w.int("l", m.LeaseMillis, true)
		if len(m.Events) != 0 {
			w.key("v")
			w.check(e.Encode(m.Events))
		}
	case *ContentsResponse:
		if !contentsByHand || m == nil {
			return false, nil
		}
		w.mapLen(2, m.Cacheable)
		w.bytes("c", m.Contents, true)
		w.key("s")
		w.stat(&m.Stat)
		w.boolean("k", m.Cacheable)
	case *StatResponse:
		if !statRespByHand || m == nil {
			return false, nil
		}
		w.mapLen(1, m.Cacheable)
		w.key("s")
		w.stat(&m.Stat)
		w.boolean("k", m.Cacheable)
	default:
		return false, nil
	}
	return true, w.err
}

// stat writes s as reflection does (see handTags).
func (w *handWriter) stat(s *Stat) {
	w.mapLen(8, s.Dir, s.Ephemeral, s.ReadACL != "", s.WriteACL != "", s.ChangeACL != "", s.LockMode != 0,
		s.LockHolders != 0, s.LockWaiters != 0, s.LockDelayUntil != 0, len(s.Holders) != 0, len(s.Waiters) != 0,
		s.LockDelayBy != nil)
	w.uint("i", s.Instance, true)
	w.uint("cg", s.ContentGen, true)
	w.uint("lg", s.LockGen, true)
	w.uint("ag", s.ACLGen, true)
	w.uint("ck", s.Checksum, true)
	w.uint("sz", s.Size, true)
	w.int("ct", s.CTime, true)
	w.int("mt", s.MTime, true)
	w.boolean("d", s.Dir)
	w.boolean("ep", s.Ephemeral)
	w.str("ra", s.ReadACL, false)
	w.str("wa", s.WriteACL, false)
	w.str("ca", s.ChangeACL, false)
	w.uint("lm", uint64(s.LockMode), false)
	w.uint("lh", uint64(s.LockHolders), false)
	w.uint("lw", uint64(s.LockWaiters), false)
	w.int("ld", s.LockDelayUntil, false)
	if len(s.Holders) != 0 {
		w.key("ho")
		w.check(w.e.Encode(s.Holders))
	}
	if len(s.Waiters) != 0 {
		w.key("wt")
		w.check(w.e.Encode(s.Waiters))
	}
	if s.LockDelayBy != nil {
		w.key("lb")
		w.check(w.e.Encode(s.LockDelayBy))
	}
}

// handWriter writes a message's fields, keeping the first error.
type handWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *handWriter) check(err error) {
	if w.err == nil {
		w.err = err
	}
}

// mapLen writes the length of a map of always fields, plus one for each
// omitempty field that is set.
func (w *handWriter) mapLen(always int, set ...bool) {
	n := always
	for _, s := range set {
		if s {
			n++
		}
	}
	w.check(w.e.EncodeMapLen(n))
}

func (w *handWriter) key(k string) { w.check(w.e.EncodeString(k)) }

func (w *handWriter) str(k, v string, always bool) {
	if always || v != "" {
		w.key(k)
		w.check(w.e.EncodeString(v))
	}
}

func (w *handWriter) bytes(k string, v []byte, always bool) {
	if always || len(v) != 0 {
		w.key(k)
		w.check(w.e.EncodeBytes(v))
	}
}

func (w *handWriter) boolean(k string, v bool) {
	if v {
		w.key(k)
		w.check(w.e.EncodeBool(v))
	}
}

// uint writes an unsigned field of any width as the compact encoder does.
func (w *handWriter) uint(k string, v uint64, always bool) {
	if always || v != 0 {
		w.key(k)
		w.check(w.e.EncodeUint(v))
	}
}

// int writes a signed field as the compact encoder does.
func (w *handWriter) int(k string, v int64, always bool) {
	if always || v != 0 {
		w.key(k)
		w.check(w.e.EncodeInt(v))
	}
}
