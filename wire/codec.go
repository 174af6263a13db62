package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// MaxFrameSize bounds one encoded message on the wire (etcd's default
// request limit). A peer announcing a bigger frame is misbehaving: the
// reader fails with CodeTooLarge before allocating anything.
const MaxFrameSize = 1536 * 1024

// MaxContents is the largest file contents the cell stores
// (docs/spec.md#nodes-and-contents).
const MaxContents = 256 * 1024

// A frame is a 4-byte big-endian length followed by that many bytes of one
// msgpack value.
const frameHeader = 4

var encPool = sync.Pool{New: func() any {
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	enc.UseCompactInts(true)
	return &encoder{buf: &b, enc: enc}
}}

type encoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// WriteMessage encodes the values as consecutive frames and writes them with
// a single Write, so a header and its body travel together. Encoders are
// pooled: a call allocates nothing on the steady path beyond the write.
func WriteMessage(w io.Writer, vals ...any) error {
	e := encPool.Get().(*encoder)
	defer func() {
		if e.buf.Cap() <= 2*MaxFrameSize {
			e.buf.Reset()
			encPool.Put(e)
		}
	}()
	e.buf.Reset()
	for _, v := range vals {
		start := e.buf.Len()
		e.buf.Write([]byte{0, 0, 0, 0})
		done, err := encodeByHand(e.enc, v)
		if !done && err == nil {
			err = e.enc.Encode(v)
		}
		if err != nil {
			return fmt.Errorf("wire: encode %T: %w", v, err)
		}
		n := e.buf.Len() - start - frameHeader
		if n > MaxFrameSize {
			return Errorf(CodeTooLarge, "message of %d bytes exceeds the frame limit of %d", n, MaxFrameSize)
		}
		binary.BigEndian.PutUint32(e.buf.Bytes()[start:], uint32(n))
	}
	_, err := w.Write(e.buf.Bytes())
	return err
}

// frameChunk is the most ReadFrame allocates ahead of the bytes it has
// actually received.
const frameChunk = 16 << 10

// ReadFrame reads one frame into a freshly allocated, length-checked
// buffer. The length is checked before any allocation. A frame of up to
// frameChunk bytes is read into one exact allocation; a larger one is read
// into chunks of frameChunk bytes, allocated one at a time as bytes
// arrive, then joined into one exact allocation. So a peer that claims a
// large frame and sends part of it holds what it sent plus at most one
// chunk (never a buffer doubled ahead of its bytes, nor the garbage of
// earlier doublings), and a completed frame costs its size twice only
// while it is joined.
func ReadFrame(r io.Reader) ([]byte, error) {
	bp := smallPool.Get().(*[smallFrame]byte)
	n, err := readFrameLen(r, bp)
	smallPool.Put(bp)
	if err != nil {
		return nil, err
	}
	return readFrameBody(r, n)
}

// readFrameBody reads the n bytes of a frame whose length ReadFrame or
// ReadMessage has read, as ReadFrame describes.
func readFrameBody(r io.Reader, n int) ([]byte, error) {
	if n > MaxFrameSize {
		return nil, Errorf(CodeTooLarge, "frame of %d bytes exceeds the limit of %d", n, MaxFrameSize)
	}
	if n <= frameChunk {
		buf := make([]byte, n)
		if err := readFull(r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var chunks [][]byte
	for got := 0; got < n; {
		c := make([]byte, min(n-got, frameChunk))
		if err := readFull(r, c); err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
		got += len(c)
	}
	buf := make([]byte, 0, n)
	for i, c := range chunks {
		buf = append(buf, c...)
		chunks[i] = nil // garbage as soon as it is copied
	}
	return buf, nil
}

// readFull fills b from r; a frame cut short is io.ErrUnexpectedEOF.
func readFull(r io.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// Decode decodes one frame's bytes into v, which must be a pointer to a
// concrete struct type of this package (never an interface or a map). Every
// length inside the frame is first checked against the frame's own size
// (codec.CheckBounds), so a hostile length prefix cannot drive an
// allocation larger than the frame. The decoder is pooled (codec.Decode).
//
// Nothing decoded aliases b: msgpack reads through an io.Reader, so it
// copies every string and byte slice out of the frame (into v's own
// slice when v already holds one with room, as msgpack.Unmarshal does),
// and b may be reused once Decode returns.
func Decode(b []byte, v any) error {
	if err := codec.Decode(b, v); err != nil {
		return Errorf(CodeBadRequest, "malformed %T: %v", v, err)
	}
	return nil
}

// ReadMessage reads one frame and decodes it into v (see Decode). A small
// frame (a Header, a Status) is read into a pooled buffer, which goes
// back to the pool once decoded: Decode leaves nothing pointing into it.
func ReadMessage(r io.Reader, v any) error {
	bp := smallPool.Get().(*[smallFrame]byte)
	defer smallPool.Put(bp)
	n, err := readFrameLen(r, bp)
	if err != nil {
		return err
	}
	if n > smallFrame {
		b, err := readFrameBody(r, n)
		if err != nil {
			return err
		}
		return Decode(b, v)
	}
	b := bp[:n]
	if err := readFull(r, b); err != nil {
		return err
	}
	return Decode(b, v)
}

// readFrameLen reads a frame's length into scratch and returns it. The
// length is read into a pooled array rather than a local one, which would
// escape to the heap through r.
func readFrameLen(r io.Reader, scratch *[smallFrame]byte) (int, error) {
	if _, err := io.ReadFull(r, scratch[:frameHeader]); err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint32(scratch[:frameHeader])), nil
}

// smallFrame is the largest frame ReadMessage reads into a pooled buffer.
const smallFrame = 512

var smallPool = sync.Pool{New: func() any { return new([smallFrame]byte) }}
