package fsm

import (
	"bytes"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
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
		"Principal:pr,omitempty Admin:ad,omitempty Client:cl,omitempty Fence:fc,omitempty Incarnation:in,omitempty " +
		"Proxy:px,omitempty",
	reflect.TypeFor[Fence](): "Path:p Mode:m Generation:g",
	reflect.TypeFor[Quota](): "Nodes:n,omitempty ContentBytes:b,omitempty NodesPerPrincipal:pn,omitempty " +
		"ContentBytesPerPrincipal:pb,omitempty NodesAdminReserve:rn,omitempty ContentBytesAdminReserve:rb,omitempty",
	reflect.TypeFor[CreateSessionArgs](): "Host:ho,omitempty PID:pi,omitempty Program:pg,omitempty",
	reflect.TypeFor[CloseSessionArgs]():  "Expired:x,omitempty Idle:id,omitempty",
	reflect.TypeFor[OpenArgs](): "Path:p,omitempty Flags:f,omitempty Contents:c,omitempty LockDelay:ld,omitempty " +
		"EventMask:em,omitempty Quota:qu,omitempty TTL:tl,omitempty SemLimit:sl,omitempty",
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
var cmdByHand = codec.TagGuard(cmdTags)

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
	w := codec.Writer{E: e} // full-width integers, as Encode's encoder
	w.Check(e.EncodeArrayLen(2))
	w.MapLen(1, c.Time != 0, c.Session != 0, c.Seq != 0, c.Ack != 0, c.Principal != "", c.Admin, c.Client != "",
		c.Fence != nil, c.Incarnation != 0, c.Proxy != "")
	w.Key("t") // every command has one: written here, without Uint8's call
	w.Check(e.EncodeUint8(uint8(t)))
	w.Int("tm", c.Time, false)
	w.Uint("s", c.Session, false)
	w.Uint("q", c.Seq, false)
	w.Uint("a", c.Ack, false)
	w.Str("pr", c.Principal, false)
	w.Bool("ad", c.Admin)
	w.Str("cl", c.Client, false)
	if f := c.Fence; f != nil {
		w.Key("fc")
		w.MapLen(3)
		w.Str("p", f.Path, true)
		w.Uint8("m", f.Mode, true)
		w.Uint("g", f.Generation, true)
	}
	w.Uint("in", c.Incarnation, false)
	w.Str("px", c.Proxy, false)
	if w.Err != nil {
		return w.Err
	}
	if !writePayload(&w, c.Payload) {
		return e.Encode(c.Payload)
	}
	return w.Err
}

// writePayload writes p if its type is written by hand, reporting whether it
// was.
func writePayload(w *codec.Writer, p Payload) bool {
	switch p := p.(type) {
	case *CreateSessionArgs:
		if !createSessByHand {
			return false
		}
		w.MapLen(0, p.Host != "", p.PID != 0, p.Program != "")
		w.Str("ho", p.Host, false)
		w.Int("pi", p.PID, false)
		w.Str("pg", p.Program, false)
	case *CloseSessionArgs:
		if !closeSessByHand {
			return false
		}
		w.MapLen(0, p.Expired, p.Idle)
		w.Bool("x", p.Expired)
		w.Bool("id", p.Idle)
	case *OpenArgs:
		if !openByHand {
			return false
		}
		w.MapLen(0, p.Path != "", p.Flags != 0, len(p.Contents) != 0, p.LockDelay != 0, p.EventMask != 0, p.Quota != nil,
			p.TTL != 0, p.SemLimit != 0)
		w.Str("p", p.Path, false)
		w.Uint32("f", p.Flags, false)
		w.Bytes("c", p.Contents, false)
		w.Int("ld", p.LockDelay, false)
		w.Uint32("em", p.EventMask, false)
		writeQuota(w, "qu", p.Quota)
		w.Int("tl", p.TTL, false)
		w.Uint32("sl", p.SemLimit, false)
	case *CloseArgs:
		if !closeByHand {
			return false
		}
		writeHandleOnly(w, p.Handle)
	case *SetContentsArgs:
		if !setContentsByHand {
			return false
		}
		w.MapLen(0, p.Handle != 0, len(p.Contents) != 0, p.IfGen != 0, p.HasIfGen, p.Quota != nil, p.Path != "")
		w.Uint("h", p.Handle, false)
		w.Bytes("c", p.Contents, false)
		w.Uint("ig", p.IfGen, false)
		w.Bool("hi", p.HasIfGen)
		writeQuota(w, "qu", p.Quota)
		w.Str("p", p.Path, false)
	case *DeleteArgs:
		if !deleteByHand {
			return false
		}
		writeHandleOnly(w, p.Handle)
	case *AcquireArgs:
		if !acquireByHand {
			return false
		}
		w.MapLen(0, p.Handle != 0, p.Mode != 0, p.Wait)
		w.Uint("h", p.Handle, false)
		w.Uint8("m", p.Mode, false)
		w.Bool("w", p.Wait)
	case *ReleaseArgs:
		if !releaseByHand {
			return false
		}
		writeHandleOnly(w, p.Handle)
	case *CancelWaitArgs:
		if !cancelWaitByHand {
			return false
		}
		w.MapLen(0, p.Handle != 0, p.WaitSeq != 0)
		w.Uint("h", p.Handle, false)
		w.Uint("ws", p.WaitSeq, false)
	case *GrantArgs:
		if !grantByHand {
			return false
		}
		w.MapLen(0, p.Path != "")
		w.Str("p", p.Path, false)
	default:
		return false
	}
	return true
}

// writeHandleOnly writes a payload whose one field is an omitempty Handle.
func writeHandleOnly(w *codec.Writer, h uint64) {
	w.MapLen(0, h != 0)
	w.Uint("h", h, false)
}

// writeQuota writes an omitempty *Quota field.
func writeQuota(w *codec.Writer, k string, q *Quota) {
	if q == nil {
		return
	}
	w.Key(k)
	w.MapLen(0, q.Nodes != 0, q.ContentBytes != 0, q.NodesPerPrincipal != 0, q.ContentBytesPerPrincipal != 0,
		q.NodesAdminReserve != 0, q.ContentBytesAdminReserve != 0)
	w.Int("n", q.Nodes, false)
	w.Int("b", q.ContentBytes, false)
	w.Int("pn", q.NodesPerPrincipal, false)
	w.Int("pb", q.ContentBytesPerPrincipal, false)
	w.Int("rn", q.NodesAdminReserve, false)
	w.Int("rb", q.ContentBytesAdminReserve, false)
}

// cmdBuffers hold Encode's scratch between commands: a command is encoded
// into one, then copied out at its exact size (the copy is the entry Raft
// keeps). A buffer grown past maxPooledCmdBuffer by a large command is
// left to the collector.
var cmdBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledCmdBuffer = 64 << 10
