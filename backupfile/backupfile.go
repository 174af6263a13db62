// Package backupfile is the layout of a lockcell backup file, shared by
// the replica that writes and restores it and the client that fetches and
// verifies it (which may not import the replica):
//
//	Magic (16 bytes)
//	header length (4 bytes, big-endian), at most MaxHeader
//	header (msgpack Header)
//	snapshot (Header.Length bytes: the state machine's snapshot, exactly
//	          as Raft snapshots encode it)
//	SHA-256 of everything above (32 bytes)
//
// The trailing checksum lets a reader that streams the file check it
// without knowing the snapshot's encoding.
package backupfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// Magic opens every backup file.
const Magic = "LOCKCELL-BACKUP\n"

// Format is the version of the layout written here.
const Format = 1

// MaxHeader bounds the header a reader accepts before it decodes it.
const MaxHeader = 4096

// Header describes the snapshot a backup file holds.
type Header struct {
	Format uint8  `msgpack:"f"`
	Cell   string `msgpack:"c"`
	// Applied is the index of the last entry applied to the state.
	Applied uint64 `msgpack:"a"`
	// Term is the master's Raft term when it took the snapshot.
	Term  uint64 `msgpack:"t"`
	Epoch uint64 `msgpack:"e"`
	// Time is when the snapshot was taken (Unix ns, the master's clock).
	Time     int64  `msgpack:"tm"`
	Nodes    uint64 `msgpack:"n"`
	Sessions uint64 `msgpack:"s"`
	// Length is the number of snapshot bytes that follow the header.
	Length uint64 `msgpack:"l"`
}

// Prefix returns what a backup file holds before its snapshot: the magic,
// the header's length and the header. A writer that encodes the snapshot
// in place can put it in front without copying the snapshot (Encode does
// copy it).
func Prefix(h *Header) ([]byte, error) {
	hb, err := msgpack.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode backup header: %w", err)
	}
	out := make([]byte, 0, len(Magic)+4+len(hb))
	out = append(out, Magic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hb)))
	return append(out, hb...), nil
}

// Encode lays out a backup file around snapshot bytes and returns it with
// its trailing checksum.
func Encode(h *Header, snap []byte) ([]byte, [32]byte, error) {
	hb, err := msgpack.Marshal(h)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("encode backup header: %w", err)
	}
	out := make([]byte, 0, len(Magic)+4+len(hb)+len(snap)+sha256.Size)
	out = append(out, Magic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	out = append(out, snap...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), sum, nil
}

// File is a backup file read and checked by Read.
type File struct {
	Header   Header
	Snapshot []byte
	Checksum [32]byte
	// Size is the file's length in bytes.
	Size uint64
}

// Read reads a whole backup file from r and checks its frame: the magic
// and format, every length (a file cut short says how much is missing; a
// snapshot over maxSnapshot bytes is refused before it is read), the
// trailing SHA-256 (any changed byte fails it) and nothing after it. It
// does not decode the snapshot: that is the caller's. Every failure wraps
// errBad, the caller's sentinel, and says what is wrong.
func Read(r io.Reader, maxSnapshot uint64, errBad error) (*File, error) {
	bad := func(format string, args ...any) (*File, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{errBad}, args...)...)
	}
	hash := sha256.New()
	tr := io.TeeReader(r, hash)
	var pre [len(Magic) + 4]byte
	if n, err := io.ReadFull(tr, pre[:]); err != nil {
		return bad("truncated: %d bytes, too short for a backup header (%v)", n, err)
	}
	if string(pre[:len(Magic)]) != Magic {
		return bad("no backup magic at the start: not a lockcell backup file")
	}
	hl := binary.BigEndian.Uint32(pre[len(Magic):])
	if hl == 0 || hl > MaxHeader {
		return bad("header of %d bytes (at most %d)", hl, MaxHeader)
	}
	hb := make([]byte, hl)
	if n, err := io.ReadFull(tr, hb); err != nil {
		return bad("truncated in the header: %d of %d bytes (%v)", n, hl, err)
	}
	var f File
	if err := codec.CheckBounds(hb); err != nil {
		return bad("header: %v", err)
	}
	if err := msgpack.Unmarshal(hb, &f.Header); err != nil {
		return bad("header: %v", err)
	}
	h := &f.Header
	if h.Format != Format {
		return bad("format %d, this version reads format %d", h.Format, Format)
	}
	if h.Length == 0 || h.Length > maxSnapshot {
		return bad("snapshot of %d bytes (at most %d)", h.Length, maxSnapshot)
	}
	// Read in steps, so a header that claims a huge snapshot in a small
	// file costs no more than the bytes present.
	var sb bytes.Buffer
	if n, err := io.CopyN(&sb, tr, int64(h.Length)); err != nil {
		return bad("truncated: %d of the %d snapshot bytes the header announces, and no checksum (%v)", n, h.Length, err)
	}
	var want [32]byte
	hash.Sum(want[:0])
	if n, err := io.ReadFull(r, f.Checksum[:]); err != nil {
		return bad("truncated: %d of the 32 checksum bytes (%v)", n, err)
	}
	if f.Checksum != want {
		return bad("checksum mismatch: the file's bytes are not the ones written (stored %x, computed %x)", f.Checksum[:8], want[:8])
	}
	var extra [1]byte
	if n, _ := io.ReadFull(r, extra[:]); n > 0 {
		return bad("bytes after the checksum")
	}
	f.Snapshot = sb.Bytes()
	f.Size = uint64(len(pre) + len(hb) + len(f.Snapshot) + sha256.Size)
	return &f, nil
}
