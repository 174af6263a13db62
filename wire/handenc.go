package wire

import (
	"reflect"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
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
		"KeepStream:k,omitempty Incarnation:in,omitempty OnBehalfOf:ob,omitempty ProxyCache:pc,omitempty",
	reflect.TypeFor[Status](): "Code:c Msg:g,omitempty Leader:l,omitempty Epoch:e,omitempty",
	reflect.TypeFor[HandleRequest](): "Handle:h Sequencer:sq,omitempty Cache:c,omitempty After:a,omitempty " +
		"Limit:l,omitempty",
	reflect.TypeFor[SetContentsRequest](): "Handle:h Contents:c IfGeneration:g,omitempty HasIfGeneration:i,omitempty " +
		"Sequencer:sq,omitempty",
	reflect.TypeFor[KeepAliveRequest]():  "AckEvent:a,omitempty Prompt:p,omitempty",
	reflect.TypeFor[KeepAliveResponse](): "Epoch:e HeldMillis:h LeaseMillis:l Events:v,omitempty Proxy:px,omitempty",
	reflect.TypeFor[Stat](): "Instance:i ContentGen:cg LockGen:lg ACLGen:ag Checksum:ck Size:sz CTime:ct MTime:mt " +
		"Dir:d,omitempty Ephemeral:ep,omitempty ReadACL:ra,omitempty WriteACL:wa,omitempty ChangeACL:ca,omitempty " +
		"LockMode:lm,omitempty LockHolders:lh,omitempty LockWaiters:lw,omitempty LockDelayUntil:ld,omitempty " +
		"Holders:ho,omitempty Waiters:wt,omitempty LockDelayBy:lb,omitempty TTLMillis:tl,omitempty Container:cn,omitempty SemLimit:sl,omitempty",
	reflect.TypeFor[ContentsResponse](): "Contents:c Stat:s Cacheable:k,omitempty ProxyCacheable:pk,omitempty Proxy:px,omitempty",
	reflect.TypeFor[StatResponse]():     "Stat:s Cacheable:k,omitempty ProxyCacheable:pk,omitempty Proxy:px,omitempty",
}

// byHand says, per type, whether its fields are still those its encoder
// writes (see handTags).
var byHand = codec.TagGuard(handTags)

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

// encodeByHand writes v with e if v is one of the types encoded by hand
// (and still matches its encoder), reporting whether it did. e must be
// WriteMessage's encoder: compact integers, no other flags.
func encodeByHand(e *msgpack.Encoder, v any) (bool, error) {
	w := codec.Writer{E: e, Compact: true}
	switch m := v.(type) {
	case *Header:
		if !headerByHand || m == nil {
			return false, nil
		}
		w.MapLen(1, m.Session != 0, m.Epoch != 0, m.Seq != 0, m.Ack != 0, m.KeepStream, m.Incarnation != 0, m.OnBehalfOf != "",
			m.ProxyCache != 0)
		w.Uint("m", uint64(m.Method), true)
		w.Uint("s", m.Session, false)
		w.Uint("e", m.Epoch, false)
		w.Uint("q", m.Seq, false)
		w.Uint("a", m.Ack, false)
		w.Bool("k", m.KeepStream)
		w.Uint("in", m.Incarnation, false)
		w.Str("ob", m.OnBehalfOf, false)
		w.Uint("pc", m.ProxyCache, false)
	case *Status:
		if !statusByHand || m == nil {
			return false, nil
		}
		w.MapLen(1, m.Msg != "", m.Leader != "", m.Epoch != 0)
		w.Uint("c", uint64(m.Code), true)
		w.Str("g", m.Msg, false)
		w.Str("l", m.Leader, false)
		w.Uint("e", m.Epoch, false)
	case *HandleRequest:
		if !handleReqByHand || m == nil {
			return false, nil
		}
		w.MapLen(1, len(m.Sequencer) != 0, m.Cache, m.After != "", m.Limit != 0)
		w.Uint("h", m.Handle, true)
		w.Bytes("sq", m.Sequencer, false)
		w.Bool("c", m.Cache)
		w.Str("a", m.After, false)
		w.Uint("l", uint64(m.Limit), false)
	case *SetContentsRequest:
		if !setContentsByHand || m == nil {
			return false, nil
		}
		w.MapLen(2, m.IfGeneration != 0, m.HasIfGeneration, len(m.Sequencer) != 0)
		w.Uint("h", m.Handle, true)
		w.Bytes("c", m.Contents, true)
		w.Uint("g", m.IfGeneration, false)
		w.Bool("i", m.HasIfGeneration)
		w.Bytes("sq", m.Sequencer, false)
	case *KeepAliveRequest:
		if !keepAliveReqByHand || m == nil {
			return false, nil
		}
		w.MapLen(0, m.AckEvent != 0, m.Prompt)
		w.Uint("a", m.AckEvent, false)
		w.Bool("p", m.Prompt)
	case *KeepAliveResponse:
		if !keepAliveByHand || m == nil {
			return false, nil
		}
		w.MapLen(3, len(m.Events) != 0, m.Proxy != 0)
		w.Uint("e", m.Epoch, true)
		w.Int("h", m.HeldMillis, true)
		w.Int("l", m.LeaseMillis, true)
		if len(m.Events) != 0 {
			w.Key("v")
			w.Check(e.Encode(m.Events))
		}
		w.Uint("px", m.Proxy, false)
	case *ContentsResponse:
		if !contentsByHand || m == nil {
			return false, nil
		}
		w.MapLen(2, m.Cacheable, m.ProxyCacheable, m.Proxy != 0)
		w.Bytes("c", m.Contents, true)
		w.Key("s")
		writeStat(&w, &m.Stat)
		w.Bool("k", m.Cacheable)
		w.Bool("pk", m.ProxyCacheable)
		w.Uint("px", m.Proxy, false)
	case *StatResponse:
		if !statRespByHand || m == nil {
			return false, nil
		}
		w.MapLen(1, m.Cacheable, m.ProxyCacheable, m.Proxy != 0)
		w.Key("s")
		writeStat(&w, &m.Stat)
		w.Bool("k", m.Cacheable)
		w.Bool("pk", m.ProxyCacheable)
		w.Uint("px", m.Proxy, false)
	default:
		return false, nil
	}
	return true, w.Err
}

// writeStat writes s as reflection does (see handTags).
func writeStat(w *codec.Writer, s *Stat) {
	w.MapLen(8, s.Dir, s.Ephemeral, s.ReadACL != "", s.WriteACL != "", s.ChangeACL != "", s.LockMode != 0,
		s.LockHolders != 0, s.LockWaiters != 0, s.LockDelayUntil != 0, len(s.Holders) != 0, len(s.Waiters) != 0,
		s.LockDelayBy != nil, s.TTLMillis != 0, s.Container, s.SemLimit != 0)
	w.Uint("i", s.Instance, true)
	w.Uint("cg", s.ContentGen, true)
	w.Uint("lg", s.LockGen, true)
	w.Uint("ag", s.ACLGen, true)
	w.Uint("ck", s.Checksum, true)
	w.Uint("sz", s.Size, true)
	w.Int("ct", s.CTime, true)
	w.Int("mt", s.MTime, true)
	w.Bool("d", s.Dir)
	w.Bool("ep", s.Ephemeral)
	w.Str("ra", s.ReadACL, false)
	w.Str("wa", s.WriteACL, false)
	w.Str("ca", s.ChangeACL, false)
	w.Uint("lm", uint64(s.LockMode), false)
	w.Uint("lh", uint64(s.LockHolders), false)
	w.Uint("lw", uint64(s.LockWaiters), false)
	w.Int("ld", s.LockDelayUntil, false)
	if len(s.Holders) != 0 {
		w.Key("ho")
		w.Check(w.E.Encode(s.Holders))
	}
	if len(s.Waiters) != 0 {
		w.Key("wt")
		w.Check(w.E.Encode(s.Waiters))
	}
	if s.LockDelayBy != nil {
		w.Key("lb")
		w.Check(w.E.Encode(s.LockDelayBy))
	}
	w.Int("tl", s.TTLMillis, false)
	w.Bool("cn", s.Container)
	w.Uint32("sl", s.SemLimit, false)
}
