package replica

import (
	"testing"

	"github.com/hashicorp/raft"
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
		if r := h.f.Apply(&raft.Log{Index: h.idx, Data: data}).(*Result); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.Run("SetContents", func(b *testing.B) {
		h, s, handle := setup(b)
		seq := h.seq[s]
		contents := make([]byte, 100)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			seq++
			apply(b, h, &Command{Time: h.now, Session: s, Seq: seq, Ack: seq - 1, Payload: &SetContentsArgs{Handle: handle, Contents: contents}})
		}
	})
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
