// Package sequencer is lockcell's fencing token: an opaque byte string that
// names a lock, the mode it was held in, its lock generation and the cell,
// signed by the cell so clients cannot forge one; and Guard, which resource
// servers put in front of their writes to reject stale lock holders.
//
// The format (version 1): a version byte, then uvarint-length-prefixed cell
// and path, a mode byte, the lock generation as a uvarint, and a 16-byte
// HMAC-SHA256 tag over everything before it, keyed by a secret the cell
// keeps in its replicated state. Only the cell can sign or verify the tag;
// anyone can Parse the fields.
package sequencer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Mode is the lock mode a sequencer was issued for.
type Mode uint8

// Lock modes. Exclusive and Shared match the wire protocol's lock modes.
const (
	// Exclusive: the sole holder of a lock.
	Exclusive Mode = 1
	// Shared: one of a shared lock's holders, who all carry the lock's
	// generation.
	Shared Mode = 2
	// Permit: one holder of a counting semaphore's permits (a semaphore's
	// lock is taken in shared mode). Each permit holder has a generation
	// of its own, and holders of one semaphore hold at once: a higher
	// generation does not supersede a lower one, so a Guard never fences
	// a Permit sequencer by generation and accepts it only on the cell's
	// word. A build older than this mode refuses the byte as malformed
	// (fail-closed: a permit holder is refused, never a stale one let in).
	Permit Mode = 3
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Version is the format version this package writes.
const Version byte = 1

// TagSize is the length of the signature tag.
const TagSize = 16

// maxField bounds the cell and path fields (names are at most 1024 bytes).
const maxField = 1024

// Errors. Parse and Verify errors wrap ErrMalformed or ErrForged; Guard
// rejections wrap ErrStale.
var (
	// ErrMalformed: the bytes are not a sequencer (truncated, bad version,
	// over-long fields, trailing bytes).
	ErrMalformed = errors.New("sequencer: malformed")
	// ErrForged: the signature does not match (altered or forged bytes, or
	// a sequencer of another cell).
	ErrForged = errors.New("sequencer: signature does not match")
	// ErrStale: the lock holder the sequencer names has been superseded
	// (a newer generation was seen) or no longer holds the lock.
	ErrStale = errors.New("sequencer: stale")
	// ErrNeedsChecker: a Guard without a Checker was shown a Permit
	// sequencer. Permit holders are concurrent, so no local rule can tell
	// a holder that lost its permit from one that still holds it; only
	// the cell can, and this guard cannot ask it. The sequencer may well
	// be valid: the resource server, not the holder, must change (give
	// the guard a Checker).
	ErrNeedsChecker = errors.New("sequencer: a permit sequencer can only be confirmed by the cell, and this guard has no Checker")
)

// Sequencer is the parsed content of a sequencer.
type Sequencer struct {
	Cell       string
	Path       string
	Mode       Mode
	Generation uint64
}

// String renders the sequencer for people.
func (s Sequencer) String() string {
	return fmt.Sprintf("%s %s generation %d (cell %s)", s.Path, s.Mode, s.Generation, s.Cell)
}

// Key identifies the lock the sequencer is for (cell and path).
func (s Sequencer) Key() string { return s.Cell + "\x00" + s.Path }

func (s Sequencer) body() []byte {
	b := []byte{Version}
	b = binary.AppendUvarint(b, uint64(len(s.Cell)))
	b = append(b, s.Cell...)
	b = binary.AppendUvarint(b, uint64(len(s.Path)))
	b = append(b, s.Path...)
	b = append(b, byte(s.Mode))
	return binary.AppendUvarint(b, s.Generation)
}

func tag(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return m.Sum(nil)[:TagSize]
}

// Sign encodes s and signs it with the cell's key. Only the cell calls it.
func Sign(key []byte, s Sequencer) []byte {
	body := s.body()
	return append(body, tag(key, body)...)
}

// Parse decodes a sequencer's fields without checking its signature (only
// the cell can). It never panics; errors wrap ErrMalformed.
func Parse(b []byte) (Sequencer, error) {
	var s Sequencer
	if len(b) < 1+TagSize {
		return s, fmt.Errorf("%w: %d bytes is too short", ErrMalformed, len(b))
	}
	if b[0] != Version {
		return s, fmt.Errorf("%w: version %d, want %d", ErrMalformed, b[0], Version)
	}
	rest := b[1 : len(b)-TagSize]
	field := func(what string) (string, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > maxField || n > uint64(len(rest)-k) {
			return "", fmt.Errorf("%w: bad %s length", ErrMalformed, what)
		}
		v := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return v, nil
	}
	var err error
	if s.Cell, err = field("cell"); err != nil {
		return Sequencer{}, err
	}
	if s.Path, err = field("path"); err != nil {
		return Sequencer{}, err
	}
	if len(rest) < 1 {
		return Sequencer{}, fmt.Errorf("%w: no mode", ErrMalformed)
	}
	s.Mode = Mode(rest[0])
	if s.Mode != Exclusive && s.Mode != Shared && s.Mode != Permit {
		return Sequencer{}, fmt.Errorf("%w: unknown mode %d", ErrMalformed, rest[0])
	}
	gen, k := binary.Uvarint(rest[1:])
	if k <= 0 {
		return Sequencer{}, fmt.Errorf("%w: bad generation", ErrMalformed)
	}
	if 1+k != len(rest) {
		return Sequencer{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rest)-1-k)
	}
	s.Generation = gen
	return s, nil
}

// Verify parses b and checks its signature with the cell's key. Errors
// wrap ErrMalformed or ErrForged.
func Verify(key, b []byte) (Sequencer, error) {
	s, err := Parse(b)
	if err != nil {
		return s, err
	}
	body := b[:len(b)-TagSize]
	if !hmac.Equal(tag(key, body), b[len(b)-TagSize:]) {
		return Sequencer{}, ErrForged
	}
	return s, nil
}

// EncodeText renders sequencer bytes for environment variables and HTTP
// headers (unpadded URL-safe base64).
func EncodeText(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// DecodeText reverses EncodeText; errors wrap ErrMalformed.
func DecodeText(s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url: %v", ErrMalformed, err)
	}
	return b, nil
}
