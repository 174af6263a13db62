package fsm

import (
	"bytes"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Commands are encoded by hand in Command.Encode, for the reason nodes
// are in snapshots: msgpack's reflection allocates for every struct with
// omitempty fields (a slice of the fields it keeps and a boxed copy of
// each omitempty value), and a command is two such structs, three with a
// quota. That was most of the leader's garbage per proposal. The hand
// encoding writes exactly what reflection writes for the envelope and
// each payload with Encode's encoder (default flags: integers at their
// full width), and TestCommandEncodingMatchesReflection checks it byte
// for byte; the log format is forever, so a difference of one byte would
// be a new format. It is used only by Encode, never through a method
// msgpack would find, so an encoder with other flags (none exists today)
// still gets reflection's bytes from Command.EncodeMsgpack.
//
// Should one of these types gain, lose or retag a field without its
// encoder following, its tags no longer match cmdTags and it is encoded
// by reflection instead, so no field is ever left out of an entry.

// cmdTags are the exported fields with their msgpack tags of each type
// encoded by hand, as its encoder writes them.
var cmdTags = map[reflect.Type]string{
	reflect.TypeFor[envelope](): "Type:t Time:tm,omitempty Session:s,omitempty Seq:q,omitempty Ack:a,omitempty " +
		"Principal:pr,omitempty Admin:ad,omitempty Client:cl,omitempty Fence:fc,omitempty Incarnation:in,omitempty",
	reflect.TypeFor[Fence](): "Path:p Mode:m Generation:g",
	reflect.TypeFor[Quota](): "Nodes:n,omitempty ContentBytes:b,omitempty NodesPerPrincipal:pn,omitempty " +
		"ContentBytesPerPrincipal:pb,omitempty NodesAdminReserve:rn,omitempty ContentBytesAdminReserve:rb,omitempty",
	reflect.TypeFor[CreateSessionArgs](): "Host:ho,omitempty PID:pi,omitempty Program:pg,omitempty",
	reflect.TypeFor[CloseSessionArgs]():  "Expired:x,omitempty",
	reflect.TypeFor[OpenArgs](): "Path:p,omitempty Flags:f,omitempty Contents:c,omitempty LockDelay:ld,omitempty " +
		"EventMask:em,omitempty Quota:qu,omitempty",
	reflect.TypeFor[CloseArgs](): "Handle:h,omitempty",
	reflect.TypeFor[SetContentsArgs](): "Handle:h,omitempty Contents:c,omitempty IfGen:ig,omitempty " +
		"HasIfGen:hi,omitempty Quota:qu,omitempty Path:p,omitempty",
	reflect.TypeFor[DeleteArgs]():     "Handle:h,omitempty",
	reflect.TypeFor[AcquireArgs]():    "Handle:h,omitempty Mode:m,omitempty Wait:w,omitempty",
	reflect.TypeFor[ReleaseArgs]():    "Handle:h,omitempty",
	reflect.TypeFor[CancelWaitArgs](): "Handle:h,omitempty WaitSeq:ws,omitempty",
	reflect.TypeFor[GrantArgs]():      "Path:p,omitempty",
}

// cmdByHand says, per type, whether its fields are still those its
// encoder writes (see cmdTags).
var cmdByHand = func() map[reflect.Type]bool {
	m := make(map[reflect.Type]bool, len(cmdTags))
	for t, tags := range cmdTags {
		m[t] = exportedTags(t) == tags
	}
	return m
}()

// The answers of cmdByHand, read on every command without a map lookup.
// A type that holds a Fence or a Quota is written by hand only while
// those are too.
var (
	envelopeByHand    = cmdByHand[reflect.TypeFor[envelope]()] && cmdByHand[reflect.TypeFor[Fence]()]
	quotaByHand       = cmdByHand[reflect.TypeFor[Quota]()]
	createSessByHand  = cmdByHand[reflect.TypeFor[CreateSessionArgs]()]
	closeSessByHand   = cmdByHand[reflect.TypeFor[CloseSessionArgs]()]
	openByHand        = cmdByHand[reflect.TypeFor[OpenArgs]()] && quotaByHand
	closeByHand       = cmdByHand[reflect.TypeFor[CloseArgs]()]
	setContentsByHand = cmdByHand[reflect.TypeFor[SetContentsArgs]()] && quotaByHand
	deleteByHand      = cmdByHand[reflect.TypeFor[DeleteArgs]()]
	acquireByHand     = cmdByHand[reflect.TypeFor[AcquireArgs]()]
	releaseByHand     = cmdByHand[reflect.TypeFor[ReleaseArgs]()]
	cancelWaitByHand  = cmdByHand[reflect.TypeFor[CancelWaitArgs]()]
	grantByHand       = cmdByHand[reflect.TypeFor[GrantArgs]()]
)

// encodeByHand writes c (whose Type is t) as EncodeMsgpack does, with
// e's flags those of Encode's encoder (none).
func (c *Command) encodeByHand(e *msgpack.Encoder, t CmdType) error {
	if !envelopeByHand {
		return e.Encode(c)
	}
	w := cmdWriter{e: e}
	w.check(e.EncodeArrayLen(2))
	w.mapLen(1, c.Time != 0, c.Session != 0, c.Seq != 0, c.Ack != 0, c.Principal != "", c.Admin, c.Client != "",
		c.Fence != nil, c.Incarnation != 0)
	w.key("t")
	w.check(e.EncodeUint8(uint8(t)))
	w.int("tm", c.Time)
	w.uint("s", c.Session)
	w.uint("q", c.Seq)
	w.uint("a", c.Ack)
	w.str("pr", c.Principal)
	w.boolean("ad", c.Admin)
	w.str("cl", c.Client)
	if f := c.Fence; f != nil {
		w.key("fc")
		w.check(e.EncodeMapLen(3))
		w.key("p")
		w.check(e.EncodeString(f.Path))
		w.key("m")
		w.check(e.EncodeUint8(f.Mode))
		w.key("g")
		w.check(e.EncodeUint64(f.Generation))
	}
	w.uint("in", c.Incarnation)
	if w.err != nil {
		return w.err
	}
	if !w.payload(c.Payload) {
		return e.Encode(c.Payload)
	}
	return w.err
}

// payload writes p if its type is written by hand, reporting whether it
// was.
func (w *cmdWriter) payload(p Payload) bool {
	switch p := p.(type) {
	case *CreateSessionArgs:
		if !createSessByHand {
			return false
		}
		w.mapLen(0, p.Host != "", p.PID != 0, p.Program != "")
		w.str("ho", p.Host)
		w.int("pi", p.PID)
		w.str("pg", p.Program)
	case *CloseSessionArgs:
		if !closeSessByHand {
			return false
		}
		w.mapLen(0, p.Expired)
		w.boolean("x", p.Expired)
	case *OpenArgs:
		if !openByHand {
			return false
		}
		w.mapLen(0, p.Path != "", p.Flags != 0, len(p.Contents) != 0, p.LockDelay != 0, p.EventMask != 0, p.Quota != nil)
		w.str("p", p.Path)
		w.uint32("f", p.Flags)
		w.bytes("c", p.Contents)
		w.int("ld", p.LockDelay)
		w.uint32("em", p.EventMask)
		w.quota("qu", p.Quota)
	case *CloseArgs:
		if !closeByHand {
			return false
		}
		w.handleOnly(p.Handle)
	case *SetContentsArgs:
		if !setContentsByHand {
			return false
		}
		w.mapLen(0, p.Handle != 0, len(p.Contents) != 0, p.IfGen != 0, p.HasIfGen, p.Quota != nil, p.Path != "")
		w.uint("h", p.Handle)
		w.bytes("c", p.Contents)
		w.uint("ig", p.IfGen)
		w.boolean("hi", p.HasIfGen)
		w.quota("qu", p.Quota)
		w.str("p", p.Path)
	case *DeleteArgs:
		if !deleteByHand {
			return false
		}
		w.handleOnly(p.Handle)
	case *AcquireArgs:
		if !acquireByHand {
			return false
		}
		w.mapLen(0, p.Handle != 0, p.Mode != 0, p.Wait)
		w.uint("h", p.Handle)
		if p.Mode != 0 {
			w.key("m")
			w.check(w.e.EncodeUint8(p.Mode))
		}
		w.boolean("w", p.Wait)
	case *ReleaseArgs:
		if !releaseByHand {
			return false
		}
		w.handleOnly(p.Handle)
	case *CancelWaitArgs:
		if !cancelWaitByHand {
			return false
		}
		w.mapLen(0, p.Handle != 0, p.WaitSeq != 0)
		w.uint("h", p.Handle)
		w.uint("ws", p.WaitSeq)
	case *GrantArgs:
		if !grantByHand {
			return false
		}
		w.mapLen(0, p.Path != "")
		w.str("p", p.Path)
	default:
		return false
	}
	return true
}

// handleOnly writes a payload whose one field is an omitempty Handle.
func (w *cmdWriter) handleOnly(h uint64) {
	w.mapLen(0, h != 0)
	w.uint("h", h)
}

// quota writes an omitempty *Quota field.
func (w *cmdWriter) quota(k string, q *Quota) {
	if q == nil {
		return
	}
	w.key(k)
	w.mapLen(0, q.Nodes != 0, q.ContentBytes != 0, q.NodesPerPrincipal != 0, q.ContentBytesPerPrincipal != 0,
		q.NodesAdminReserve != 0, q.ContentBytesAdminReserve != 0)
	w.int("n", q.Nodes)
	w.int("b", q.ContentBytes)
	w.int("pn", q.NodesPerPrincipal)
	w.int("pb", q.ContentBytesPerPrincipal)
	w.int("rn", q.NodesAdminReserve)
	w.int("rb", q.ContentBytesAdminReserve)
}

// cmdWriter writes a command's fields, keeping the first error. Every
// field it writes is omitempty: written only when not empty.
type cmdWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *cmdWriter) check(err error) {
	if w.err == nil {
		w.err = err
	}
}

// mapLen writes the length of a map of always fields, plus one for each
// omitempty field that is set.
func (w *cmdWriter) mapLen(always int, set ...bool) {
	n := always
	for _, s := range set {
		if s {
			n++
		}
	}
	w.check(w.e.EncodeMapLen(n))
}

func (w *cmdWriter) key(k string) { w.check(w.e.EncodeString(k)) }

func (w *cmdWriter) str(k, v string) {
	if v != "" {
		w.key(k)
		w.check(w.e.EncodeString(v))
	}
}

func (w *cmdWriter) bytes(k string, v []byte) {
	if len(v) != 0 {
		w.key(k)
		w.check(w.e.EncodeBytes(v))
	}
}

func (w *cmdWriter) boolean(k string, v bool) {
	if v {
		w.key(k)
		w.check(w.e.EncodeBool(v))
	}
}

func (w *cmdWriter) uint(k string, v uint64) {
	if v != 0 {
		w.key(k)
		w.check(w.e.EncodeUint64(v))
	}
}

func (w *cmdWriter) uint32(k string, v uint32) {
	if v != 0 {
		w.key(k)
		w.check(w.e.EncodeUint32(v))
	}
}

func (w *cmdWriter) int(k string, v int64) {
	if v != 0 {
		w.key(k)
		w.check(w.e.EncodeInt64(v))
	}
}

// cmdBuffers hold Encode's scratch between commands: a command is encoded
// into one, then copied out at its exact size (the copy is the entry Raft
// keeps). A buffer grown past maxPooledCmdBuffer by a large command is
// left to the collector.
var cmdBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledCmdBuffer = 64 << 10
