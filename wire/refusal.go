package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// RPCRefused is the first byte a replica writes on a client connection it
// will not serve (a cap on connections was reached), in place of the
// yamux session: one frame holding a Status (CodeTooMany, a message
// naming the cap) follows, and then the replica closes. A replica that
// admits a connection never writes first, and every frame yamux writes
// begins with its version byte 0, so the byte cannot be mistaken for an
// admitted connection's; nor for a TLS record (types 20-24), so a client
// reads it in place of a ServerHello when the replica refuses before the
// handshake. A client that does not know the byte sees yamux fail on a
// wrong protocol version and the connection end, as it did when the
// replica closed without a word.
const RPCRefused byte = 'R'

// MaxRefusalSize bounds a refusal's frame: a reader refuses a longer
// one without reading it.
const MaxRefusalSize = 1024

// WriteRefusal writes the refusal byte and a Status frame of CodeTooMany
// with msg in one write.
func WriteRefusal(w io.Writer, msg string) error {
	var b bytes.Buffer
	b.WriteByte(RPCRefused)
	if err := WriteMessage(&b, &Status{Code: CodeTooMany, Msg: msg}); err != nil {
		return err
	}
	if b.Len() > 1+frameHeader+MaxRefusalSize {
		return Errorf(CodeTooLarge, "refusal of %d bytes exceeds %d", b.Len(), MaxRefusalSize)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// ReadRefusal reads a refusal's frame, after its RPCRefused byte, and
// returns the replica's typed error (CodeTooMany). A frame that is
// truncated, too long or malformed is an error of its own.
func ReadRefusal(r io.Reader) (*Error, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("wire: refusal: %w", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > MaxRefusalSize {
		return nil, fmt.Errorf("wire: refusal of %d bytes exceeds %d", n, MaxRefusalSize)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("wire: refusal: %w", err)
	}
	var st Status
	if err := Decode(b, &st); err != nil {
		return nil, fmt.Errorf("wire: refusal: %w", err)
	}
	if st.Code == CodeOK {
		return nil, fmt.Errorf("wire: refusal without an error code")
	}
	return &Error{Code: st.Code, Msg: st.Msg}, nil
}
