package sequencer

// FuzzSequencer (docs/testplan.md#fuzzing): Parse and Verify of arbitrary bytes
// never panic, reject with errors wrapping ErrMalformed or ErrForged,
// allocate at most 64 x input + 1 MiB, and everything they accept
// round-trips through Sign; FuzzSequencerSign: Sign of arbitrary fields
// parses back to them (or is rejected as malformed when a field is over
// the limit), verifies under its key only, and any one-bit change is
// caught.

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"lockcell/fixtures/fuzzbound"
)

var fzKey = []byte("fuzz-key-0123456789abcdef0123456")

// fzWantErr fails unless err wraps one of the sentinels.
func fzWantErr(t *testing.T, what string, err error, sentinels ...error) {
	t.Helper()
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("%s: error %v wraps none of %v", what, err, sentinels)
}

func FuzzSequencer(f *testing.F) {
	f.Add(Sign(fzKey, Sequencer{Cell: "c", Path: "/ls/c/x", Mode: Exclusive, Generation: 7}))
	f.Add(Sign(fzKey, Sequencer{Cell: "c", Path: "/ls/c/" + strings.Repeat("p", 1018), Mode: Shared, Generation: 1<<64 - 1}))
	f.Add(Sign([]byte("other"), Sequencer{Cell: "c", Path: "/ls/c/x", Mode: Exclusive, Generation: 7}))
	f.Add(Sign(fzKey, Sequencer{Cell: "c", Path: "/ls/c/sem", Mode: Permit, Generation: 12}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Sequencer
		var err error
		alloc := fuzzbound.Alloc(func() { s, err = Parse(b) })
		if limit := fuzzbound.Limit(len(b)); alloc > limit {
			t.Fatalf("Parse of %d bytes allocated %d, limit %d", len(b), alloc, limit)
		}
		vs, verr := Verify(fzKey, b)
		if err != nil {
			fzWantErr(t, "Parse", err, ErrMalformed)
			if s != (Sequencer{}) {
				t.Fatalf("Parse returned %+v with %v", s, err)
			}
			if verr == nil || !errors.Is(verr, ErrMalformed) {
				t.Fatalf("Verify accepted what Parse rejects (%v): %v", err, verr)
			}
			return
		}
		if len(s.Cell) > maxField || len(s.Path) > maxField {
			t.Fatalf("accepted over-long fields: %d, %d bytes", len(s.Cell), len(s.Path))
		}
		if s.Mode != Exclusive && s.Mode != Shared && s.Mode != Permit {
			t.Fatalf("accepted mode %d", s.Mode)
		}
		// Sign(Parse(b)) parses back to the same fields.
		again := Sign(fzKey, s)
		s2, err := Verify(fzKey, again)
		if err != nil || s2 != s {
			t.Fatalf("Verify(Sign(Parse(b))) = %+v, %v; want %+v", s2, err, s)
		}
		// b verifies iff its tag is the key's tag over its own body
		// (which need not be canonical: Parse takes non-minimal uvarints,
		// but only the key holder can sign such bytes).
		body := b[:len(b)-TagSize]
		if want := bytes.Equal(tag(fzKey, body), b[len(b)-TagSize:]); want != (verr == nil) {
			t.Fatalf("Verify = %v, but the tag matches = %v", verr, want)
		}
		if verr != nil {
			fzWantErr(t, "Verify", verr, ErrForged)
		} else if vs != s {
			t.Fatalf("Verify %+v != Parse %+v", vs, s)
		}
		// The text form round-trips.
		if tb, err := DecodeText(" " + EncodeText(b) + "\n"); err != nil || !bytes.Equal(tb, b) {
			t.Fatalf("DecodeText(EncodeText(b)) = %x, %v", tb, err)
		}
	})
}

func FuzzSequencerSign(f *testing.F) {
	f.Add([]byte("k"), "c", "/ls/c/a", uint8(1), uint64(1), uint16(0))
	f.Add([]byte{}, "", "", uint8(2), uint64(1<<64-1), uint16(3))
	f.Add(fzKey, "c", strings.Repeat("x", 1025), uint8(1), uint64(0), uint16(9))
	f.Add(fzKey, "c\x00", "/ls/c/\xff", uint8(3), uint64(1<<63), uint16(100))
	f.Add(fzKey, "c", "/ls/c/sem", uint8(4), uint64(9), uint16(7))
	f.Fuzz(func(t *testing.T, k []byte, cell, path string, mode uint8, gen uint64, flip uint16) {
		s := Sequencer{Cell: cell, Path: path, Mode: Mode(mode), Generation: gen}
		b := Sign(k, s)
		got, err := Verify(k, b)
		valid := len(cell) <= maxField && len(path) <= maxField && (s.Mode == Exclusive || s.Mode == Shared || s.Mode == Permit)
		if !valid {
			fzWantErr(t, "Verify of an out-of-range sequencer", err, ErrMalformed)
			return
		}
		if err != nil || got != s {
			t.Fatalf("Verify(Sign(%+v)) = %+v, %v", s, got, err)
		}
		if p, err := Parse(b); err != nil || p != s {
			t.Fatalf("Parse(Sign(%+v)) = %+v, %v", s, p, err)
		}
		// Another key does not verify it.
		other := append([]byte{0x55}, k...)
		if _, err := Verify(other, b); !errors.Is(err, ErrForged) {
			t.Fatalf("verified under another key: %v", err)
		}
		// Any one bit flipped: rejected (malformed or forged), never
		// accepted as some other sequencer.
		bit := int(flip) % (8 * len(b))
		bad := append([]byte(nil), b...)
		bad[bit/8] ^= 1 << (bit % 8)
		if got, err := Verify(k, bad); err == nil {
			t.Fatalf("bit %d flipped still verifies, as %+v", bit, got)
		} else {
			fzWantErr(t, "Verify of a flipped bit", err, ErrMalformed, ErrForged)
		}
	})
}
