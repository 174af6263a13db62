// Package frame handles the byte stream under a yamux session, where the
// wire's messages travel: the Scanner that follows yamux's frames across
// the reads or writes that carry them, and BatchConn, which writes whole
// frames in batches. It knows yamux's framing (hashicorp/yamux's
// spec.md), not lockcell's messages (package wire frames those inside
// yamux's streams). It is a leaf: it imports nothing of lockcell.
package frame

import "encoding/binary"

// HeaderSize is the size of yamux's frame header: version (1), type (1),
// flags (2), stream id (4), length (4), big-endian.
const HeaderSize = 12

// yamux's frame types. Only a data frame has a body: Length bytes of it.
// A window update's Length is a window delta, a ping's an opaque value, a
// go-away's an error code.
const (
	TypeData         = 0
	TypeWindowUpdate = 1
	TypePing         = 2
	TypeGoAway       = 3
)

// yamux's frame flags.
const (
	FlagSYN = 1
	FlagACK = 2
	FlagFIN = 4
	FlagRST = 8
)

// Header is one yamux frame header.
type Header [HeaderSize]byte

// Type is the frame's type (TypeData, TypeWindowUpdate, ...).
func (h *Header) Type() byte { return h[1] }

// Flags are the frame's flags (FlagSYN, ...).
func (h *Header) Flags() uint16 { return binary.BigEndian.Uint16(h[2:4]) }

// StreamID is the frame's stream (0: the session itself).
func (h *Header) StreamID() uint32 { return binary.BigEndian.Uint32(h[4:8]) }

// Length is a data frame's body length (see the frame types for the rest).
func (h *Header) Length() uint32 { return binary.BigEndian.Uint32(h[8:12]) }

// Scanner follows yamux frames across the chunks of a byte stream, however
// it is cut: a header may span chunks, and a body may span many. The zero
// value expects a header first. A Scanner is used by one goroutine.
type Scanner struct {
	hdr  Header
	have int    // header bytes so far
	body uint32 // body bytes of the current data frame still to come
}

// Body is how many body bytes of the current data frame are still to come
// (0: a header is next).
func (s *Scanner) Body() uint32 { return s.body }

// SkipBody moves over up to n bytes of the current frame's body and
// returns how many: min(n, Body()).
func (s *Scanner) SkipBody(n int) int {
	k := uint32(min(n, 1<<30))
	k = min(k, s.body)
	s.body -= k
	return int(k)
}

// FillHeader takes header bytes from the start of b, when no body is due
// (Body() is 0), and returns how many it took and, once the header is
// complete, the header (ok). After a data frame's header its body is
// due: Body() is its Length.
func (s *Scanner) FillHeader(b []byte) (k int, h *Header, ok bool) {
	k = copy(s.hdr[s.have:], b)
	s.have += k
	if s.have < HeaderSize {
		return k, nil, false
	}
	s.have = 0
	if s.hdr.Type() == TypeData {
		s.body = s.hdr.Length()
	}
	return k, &s.hdr, true
}

// Scan moves over b and returns the offset in b just past the last frame
// that ends in it, or -1 if none does.
func (s *Scanner) Scan(b []byte) int {
	last := -1
	for i := 0; i < len(b); {
		if s.body > 0 {
			i += s.SkipBody(len(b) - i)
			if s.body == 0 {
				last = i
			}
			continue
		}
		k, _, ok := s.FillHeader(b[i:])
		i += k
		if !ok {
			break
		}
		if s.body == 0 {
			last = i
		}
	}
	return last
}
