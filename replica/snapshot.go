package replica

import "io"

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
