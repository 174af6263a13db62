// Package selfcheck is a prober of a live cell through the client library:
// it runs a small recorded workload (two sessions, a few files and one
// lock) and checks the history for linearizability with Porcupine, so an
// operator can ask a running cell whether it keeps its promises (reads,
// cached reads included, see every write completed before they began;
// compare-and-swap sees the current generation; at most one session holds
// the lock, and lock generations only grow).
//
// Run dials the sessions, creates the files under a prefix of its own,
// runs the workload, deletes the files and checks the history. Check
// checks any history of Ops, such as one written by hand.
package selfcheck

import (
	"fmt"
	"time"
)

// Kind is what an operation did.
type Kind string

// Kinds of operations.
const (
	// KindRead is GetContentsAndStat: the contents (Value) and content
	// generation (Gen) read.
	KindRead Kind = "read"
	// KindWrite is SetContentsAndStat: Value written, Gen the new content
	// generation.
	KindWrite Kind = "write"
	// KindCAS is SetContentsAndStat with IfGeneration(IfGen): Gen the new
	// generation, or Err ErrMismatch.
	KindCAS Kind = "cas"
	// KindAcquire is an exclusive, blocking Acquire of the lock.
	KindAcquire Kind = "acquire"
	// KindRelease is a Release of the lock, or Err ErrNotHeld.
	KindRelease Kind = "release"
	// KindHolder is GetStat of the lock's file: who holds the lock
	// (Holder) and its lock generation (Gen).
	KindHolder Kind = "holder"
)

// Definite failures an Op may record in Err ("" is success).
const (
	ErrMismatch = "generation_mismatch" // a cas on a generation the file no longer has: nothing written
	ErrNotHeld  = "not_held"            // a release by a session that did not hold the lock
)

// Holder values of a KindHolder operation besides a session index.
const (
	HolderNone    = -1 // the lock is free
	HolderOther   = -2 // a session that is not one of the run's holds it
	HolderSeveral = -3 // more than one session holds it (an exclusive lock!)
)

// Op is one operation of a history: what a session called on which object
// (a file, or the lock's file for lock operations), what it got, and when
// it was invoked and returned, on one monotonic clock.
type Op struct {
	Session int    `json:"session"` // index of the session (0 or 1 in Run)
	Seq     int    `json:"seq"`     // per session, from 1
	Kind    Kind   `json:"kind"`
	Object  string `json:"object"`
	// Value is what a write or cas wrote, or what a read returned.
	Value string `json:"value,omitempty"`
	// IfGen is the generation a cas expected.
	IfGen uint64 `json:"if_generation,omitempty"`
	// Gen is the content generation read or written, or the lock
	// generation a holder read saw.
	Gen uint64 `json:"generation,omitempty"`
	// Holder is, for KindHolder, the session holding the lock or one of
	// HolderNone, HolderOther, HolderSeveral.
	Holder int    `json:"holder,omitempty"`
	Err    string `json:"err,omitempty"` // "" or a definite failure (ErrMismatch, ErrNotHeld)
	// Cached: the read went through a handle that may use the client's
	// cache; Hit: it was served from it.
	Cached bool `json:"cached,omitempty"`
	Hit    bool `json:"hit,omitempty"`
	// Unknown: the call failed without a definite answer (a timeout, no
	// master, a lost connection), so it may or may not have taken effect.
	// It is checked as if it returned at the end of time; a read with an
	// unknown outcome says nothing and is left out.
	Unknown bool   `json:"unknown,omitempty"`
	Error   string `json:"error,omitempty"` // the error of an unknown call
	// Call and Return are when the call was invoked and returned, from the
	// start of the run.
	Call   time.Duration `json:"call_ns"`
	Return time.Duration `json:"return_ns"`
}

// String describes the operation for people: who, what, the outcome and
// when.
func (o Op) String() string {
	var call string
	switch o.Kind {
	case KindWrite:
		call = fmt.Sprintf("write(%q)", o.Value)
	case KindCAS:
		call = fmt.Sprintf("cas(%q, if gen %d)", o.Value, o.IfGen)
	default:
		call = string(o.Kind) + "()"
	}
	var out string
	switch {
	case o.Unknown:
		out = "? (" + o.Error + ")"
	case o.Err != "":
		out = o.Err
	case o.Kind == KindRead:
		out = fmt.Sprintf("%q gen %d", o.Value, o.Gen)
		if o.Hit {
			out += " (cache hit)"
		} else if !o.Cached {
			out += " (uncached)"
		}
	case o.Kind == KindWrite || o.Kind == KindCAS:
		out = fmt.Sprintf("gen %d", o.Gen)
	case o.Kind == KindHolder:
		out = holderText(o.Holder)
		if o.Holder >= 0 {
			out += fmt.Sprintf(", lock gen %d", o.Gen)
		}
		if o.Hit {
			out += " (cache hit)"
		}
	default:
		out = "ok"
	}
	ret := "?"
	if !o.Unknown {
		ret = seconds(o.Return)
	}
	return fmt.Sprintf("session %d #%d %s -> %s [%s, %s]", o.Session, o.Seq, call, out, seconds(o.Call), ret)
}

func holderText(h int) string {
	switch h {
	case HolderNone:
		return "free"
	case HolderOther:
		return "held by another session"
	case HolderSeveral:
		return "held by several sessions"
	}
	return fmt.Sprintf("held by session %d", h)
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.6fs", d.Seconds()) }
