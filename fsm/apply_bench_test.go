package fsm

import (
	"fmt"
	"testing"

	"lockcell/audit"
)

// The state machine's cost per committed entry, as raft's apply goroutine
// pays it: decode the entry's bytes, de-duplicate, apply. The command is
// encoded once, outside the timed loop, apart from its request id.

// BenchmarkFSMApply: a 100-byte SetContents and an Acquire/Release pair
// on one handle of one session.
func BenchmarkFSMApply(b *testing.B) {
	setup := func(b *testing.B) (*fsmtH, uint64, uint64) {
		h := newFSMT(b)
		s := h.session()
		return h, s, h.mustOpen(s, "f", fsmtRWC)
	}
	apply := func(b *testing.B, h *fsmtH, c *Command) {
		data, err := c.Encode()
		if err != nil {
			b.Fatal(err)
		}
		h.idx++
		if r := h.f.ApplyEntry(h.idx, data).(*Result); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	for _, trail := range []bool{false, true} {
		name := "SetContents"
		if trail {
			// With the audit trail a replica keeps (package audit): one
			// record buffered a command, written once an entry.
			name += "/audited"
		}
		b.Run(name, func(b *testing.B) {
			h, s, handle := setup(b)
			if trail {
				tr, err := audit.Open(b.TempDir(), audit.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Close()
				h.f.SetAuditor(tr)
			}
			seq := h.seq[s]
			contents := make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				seq++
				apply(b, h, &Command{Time: h.now, Session: s, Seq: seq, Ack: seq - 1, Principal: "admin", Admin: true, Payload: &SetContentsArgs{Handle: handle, Contents: contents}})
			}
		})
	}
	b.Run("AcquireRelease", func(b *testing.B) {
		h, s, handle := setup(b)
		seq := h.seq[s]
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			seq++
			apply(b, h, &Command{Time: h.now, Session: s, Seq: seq, Ack: seq - 1, Payload: &AcquireArgs{Handle: handle, Mode: LockExclusive}})
			seq++
			apply(b, h, &Command{Time: h.now, Session: s, Seq: seq, Ack: seq - 1, Payload: &ReleaseArgs{Handle: handle}})
		}
	})
}

// benchCommands are commands as the master proposes them for the common
// calls: a request id, the caller, and a typed payload.
func benchCommands() map[string]*Command {
	env := func(p Payload) *Command {
		return &Command{Time: 1_700_000_000_000_000_000, Session: 1 << 20, Seq: 12345, Ack: 12344,
			Principal: "alice", Payload: p}
	}
	fenced := env(&ReleaseArgs{Handle: 1 << 21})
	fenced.Fence = &Fence{Path: "/ls/c/lock", Mode: LockExclusive, Generation: 42}
	return map[string]*Command{
		"SetContents":   env(&SetContentsArgs{Handle: 1 << 21, Contents: make([]byte, 100)}),
		"Open":          env(&OpenArgs{Path: "/ls/c/dir/file", Flags: 7, LockDelay: int64(60e9), Quota: &Quota{}}),
		"Acquire":       env(&AcquireArgs{Handle: 1 << 21, Mode: LockExclusive, Wait: true}),
		"FencedRelease": fenced,
	}
}

// BenchmarkCommandEncode: encoding a command for the log (Command.Encode),
// as the leader does for every proposal.
func BenchmarkCommandEncode(b *testing.B) {
	for name, c := range benchCommands() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := c.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommandDecode: decoding a log entry (DecodeCommand), as every
// replica does for every entry it applies.
func BenchmarkCommandDecode(b *testing.B) {
	for name, c := range benchCommands() {
		b.Run(name, func(b *testing.B) {
			data, err := c.Encode()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for range b.N {
				if _, err := DecodeCommand(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSessionEndBigNamespace: what a session's end (CreateSession,
// then CloseSession) costs the apply goroutine in a namespace of 0, 10,000
// and 100,000 files made by another session. A client can make and drop
// sessions as fast as the session caps let it, and every replica applies
// each end: its cost must not grow with the namespace.
func BenchmarkSessionEndBigNamespace(b *testing.B) {
	for _, n := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			h := newFSMT(b)
			s := h.session()
			for i := range n {
				h.closeH(s, h.mustOpen(s, fmt.Sprintf("f%06d", i), fsmtRWC))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				x := h.session()
				if r := h.raw(Command{Session: x, Payload: &CloseSessionArgs{Expired: true}}); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		})
	}
}
