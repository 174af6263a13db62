package codec

// The bounds check on untrusted msgpack bytes, run before they are
// decoded. msgpack v5.4.1 allocates a claimed str/bin/array size before it
// notices the input is short (8 hostile bytes can cost 4 GiB even when
// decoding into typed fields), so every decoder of bytes that crossed a
// trust boundary runs CheckBounds first (Decode does).

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth bounds msgpack nesting.
const MaxDepth = 32

// MinArrayElem is the fewest bytes, on average, an element of an array of
// more than 16 elements may take. lockcell's
// messages put only structs (maps with at least one required field) and
// strings in arrays, and msgpack allocates two slices of the claimed count
// of elements, so a floor of two bytes each keeps a dense array's
// allocation within a small multiple of the input.
const MinArrayElem = 2

// CheckBounds walks the single msgpack value that must fill b and rejects any
// length or count that claims more than the bytes left in b, any array
// whose elements would average under MinArrayElem bytes, nesting deeper
// than MaxDepth, and trailing bytes. After it, decoding b into concrete
// types allocates at most a small multiple of len(b).
func CheckBounds(b []byte) error {
	n, err := skipValue(b, 0, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d trailing bytes after the value", len(b)-n)
	}
	return nil
}

func need(b []byte, i, n int) error {
	if n < 0 || i > len(b) || n > len(b)-i {
		return fmt.Errorf("value at offset %d claims %d bytes, %d remain", i, n, max(len(b)-i, 0))
	}
	return nil
}

func uintAt(b []byte, i, size int) (int, error) {
	if err := need(b, i, size); err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(b[i]), nil
	case 2:
		return int(binary.BigEndian.Uint16(b[i:])), nil
	default:
		v := binary.BigEndian.Uint32(b[i:])
		if uint64(v) > uint64(len(b)) {
			return 0, fmt.Errorf("length %d at offset %d exceeds the frame", v, i)
		}
		return int(v), nil
	}
}

// skipValue returns the offset just past the value starting at i.
func skipValue(b []byte, i, depth int) (int, error) {
	if depth > MaxDepth {
		return 0, fmt.Errorf("nesting deeper than %d", MaxDepth)
	}
	if err := need(b, i, 1); err != nil {
		return 0, err
	}
	c := b[i]
	i++
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return i, nil
	case c >= 0x80 && c <= 0x8f:
		return skipN(b, i, 2*int(c&0x0f), depth)
	case c >= 0x90 && c <= 0x9f:
		return skipArray(b, i, int(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf:
		n := int(c & 0x1f)
		return i + n, need(b, i, n)
	}
	switch c {
	case 0xcc, 0xd0:
		return i + 1, need(b, i, 1)
	case 0xcd, 0xd1:
		return i + 2, need(b, i, 2)
	case 0xca, 0xce, 0xd2:
		return i + 4, need(b, i, 4)
	case 0xcb, 0xcf, 0xd3:
		return i + 8, need(b, i, 8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type byte + 1,2,4,8,16
		n := 1 + 1<<(c-0xd4)
		return i + n, need(b, i, n)
	case 0xc4, 0xd9, 0xc5, 0xda, 0xc6, 0xdb: // bin/str 8,16,32
		size := map[byte]int{0xc4: 1, 0xd9: 1, 0xc5: 2, 0xda: 2, 0xc6: 4, 0xdb: 4}[c]
		n, err := uintAt(b, i, size)
		if err != nil {
			return 0, err
		}
		i += size
		return i + n, need(b, i, n)
	case 0xc7, 0xc8, 0xc9: // ext 8,16,32: length, type byte, data
		size := map[byte]int{0xc7: 1, 0xc8: 2, 0xc9: 4}[c]
		n, err := uintAt(b, i, size)
		if err != nil {
			return 0, err
		}
		i += size
		return i + 1 + n, need(b, i, 1+n)
	case 0xdc, 0xdd, 0xde, 0xdf: // array 16,32, map 16,32
		size := 2
		if c == 0xdd || c == 0xdf {
			size = 4
		}
		n, err := uintAt(b, i, size)
		if err != nil {
			return 0, err
		}
		if c >= 0xde {
			return skipN(b, i+size, 2*n, depth)
		}
		return skipArray(b, i+size, n, depth)
	}
	return 0, fmt.Errorf("invalid msgpack type byte %#x at offset %d", c, i-1)
}

// smallArray is the element count below which the MinArrayElem floor does
// not apply: such arrays cost little whatever their elements, and a newer
// peer may send small arrays of tiny values in fields we skip.
const smallArray = 16

// skipArray skips an array of n elements; past smallArray elements they
// must average at least MinArrayElem bytes.
func skipArray(b []byte, i, n, depth int) (int, error) {
	if n <= smallArray {
		return skipN(b, i, n, depth)
	}
	if err := need(b, i, n*MinArrayElem); err != nil {
		return 0, fmt.Errorf("array of %d elements: %w", n, err)
	}
	start := i
	i, err := skipN(b, i, n, depth)
	if err == nil && i-start < n*MinArrayElem {
		err = fmt.Errorf("array at offset %d averages under %d bytes per element", start, MinArrayElem)
	}
	return i, err
}

// skipN skips n values; each takes at least one byte, so a count larger
// than the bytes left is rejected before looping.
func skipN(b []byte, i, n, depth int) (int, error) {
	if err := need(b, i, n); err != nil {
		return 0, err
	}
	var err error
	for range n {
		if i, err = skipValue(b, i, depth+1); err != nil {
			return 0, err
		}
	}
	return i, nil
}
