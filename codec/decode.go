package codec

import (
	"bytes"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Decode checks b (CheckBounds) and decodes it into v, a pointer to a
// concrete type, with a pooled decoder (DecodeChecked). A check's error is
// returned as it is, so a caller can word both kinds alike.
func Decode(b []byte, v any) error {
	if err := CheckBounds(b); err != nil {
		return err
	}
	return DecodeChecked(b, v)
}

// DecodeChecked decodes b, which has passed CheckBounds, into v with a
// pooled decoder, as msgpack.Unmarshal does (default flags) but without
// its per-call reader. Nothing decoded aliases b: msgpack reads through an
// io.Reader, so it copies every string and byte slice out of b (into v's
// own slice when v already holds one with room, as msgpack.Unmarshal
// does), and b may be reused once DecodeChecked returns.
func DecodeChecked(b []byte, v any) error {
	d := decoders.Get().(*decoder)
	d.r.Reset(b)
	d.dec.Reset(&d.r) // flags cleared: as msgpack.Unmarshal decodes
	err := d.dec.Decode(v)
	d.r.Reset(nil)   // the pool holds no input
	d.dec.Reset(nil) // nor the reader
	if len(b) <= maxPooledDecode {
		decoders.Put(d)
	}
	return err
}

// decoder is a msgpack decoder with the reader it decodes from, kept
// together so that decoding allocates neither.
type decoder struct {
	dec *msgpack.Decoder
	r   bytes.Reader
}

// decoders holds decoders between calls. msgpack.Unmarshal pools its own
// decoders too, but allocates a reader for every call.
var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// maxPooledDecode is the largest input whose decoder goes back to the
// pool: a decoder keeps a scratch buffer as long as the longest string it
// has read, so one that read a large input is left to the collector
// rather than held in the pool.
const maxPooledDecode = 64 << 10
