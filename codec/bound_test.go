package codec

import (
	"bytes"
	"testing"
)

func TestCheckBounds(t *testing.T) {
	arr32 := func(n int, elem []byte) []byte {
		b := []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		return append(b, bytes.Repeat(elem, n)...)
	}
	for _, c := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"fixint", []byte{0x05}, true},
		{"empty", nil, false},
		{"unused type byte", []byte{0xc1}, false},
		{"str32 claiming 4 GiB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff}, false},
		{"bin32 claiming 4 GiB", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, false},
		{"map32 claiming 4 billion", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, false},
		{"array16 chain", bytes.Repeat([]byte{0xdc, 0xff, 0xff}, 100), false},
		{"str8 exact", []byte{0xd9, 3, 'a', 'b', 'c'}, true},
		{"str8 short", []byte{0xd9, 4, 'a', 'b', 'c'}, false},
		{"trailing byte", []byte{0x01, 0x02}, false},
		{"16 one-byte elements", arr32(16, []byte{0x01}), true},
		{"17 one-byte elements", arr32(17, []byte{0x01}), false},
		{"17 two-byte elements", arr32(17, []byte{0xcc, 0x01}), true},
		{"fixext4", []byte{0xd6, 1, 1, 2, 3, 4}, true},
		{"ext8 short", []byte{0xc7, 5, 1, 1, 2}, false},
		{"depth 32", append(bytes.Repeat([]byte{0x91}, 32), 0x01), true},
		{"depth 33", append(bytes.Repeat([]byte{0x91}, 33), 0x01), false},
	} {
		if err := CheckBounds(c.b); (err == nil) != c.ok {
			t.Errorf("%s: CheckBounds(% x) = %v, want ok=%v", c.name, c.b[:min(len(c.b), 12)], err, c.ok)
		}
	}
}
