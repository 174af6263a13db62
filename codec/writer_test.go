package codec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// sample has one field of each kind Writer writes, required and omitempty.
type sample struct {
	S   string `msgpack:"s"`
	SO  string `msgpack:"so,omitempty"`
	B   []byte `msgpack:"b"`
	BO  []byte `msgpack:"bo,omitempty"`
	T   bool   `msgpack:"t,omitempty"`
	U   uint64 `msgpack:"u"`
	UO  uint64 `msgpack:"uo,omitempty"`
	U32 uint32 `msgpack:"u32,omitempty"`
	U8  uint8  `msgpack:"u8"`
	I   int64  `msgpack:"i"`
	IO  int64  `msgpack:"io,omitempty"`
}

const sampleTags = "S:s SO:so,omitempty B:b BO:bo,omitempty T:t,omitempty U:u UO:uo,omitempty " +
	"U32:u32,omitempty U8:u8 I:i IO:io,omitempty"

func writeSample(w *Writer, v *sample) {
	w.MapLen(5, v.SO != "", len(v.BO) != 0, v.T, v.UO != 0, v.U32 != 0, v.IO != 0)
	w.Str("s", v.S, true)
	w.Str("so", v.SO, false)
	w.Bytes("b", v.B, true)
	w.Bytes("bo", v.BO, false)
	w.Bool("t", v.T)
	w.Uint("u", v.U, true)
	w.Uint("uo", v.UO, false)
	w.Uint32("u32", v.U32, false)
	w.Uint8("u8", v.U8, true)
	w.Int("i", v.I, true)
	w.Int("io", v.IO, false)
}

// A hand encoder written with Writer gives reflection's bytes to the
// letter, on a compact encoder (the wire's) and a full-width one (the
// log's and the snapshot's), for empty, small and extreme values: the
// formats written with it are forever, so one byte off would be a new
// format.
func TestWriterMatchesReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(vals ...uint64) uint64 {
		if r.IntN(4) == 0 {
			return r.Uint64() >> r.IntN(64)
		}
		return vals[r.IntN(len(vals))]
	}
	edges := []uint64{0, 1, 127, 128, 255, 256, math.MaxUint16, math.MaxUint16 + 1, math.MaxUint32, math.MaxUint64}
	lens := []int{0, 1, 31, 32, 255, 256, 70000} // the string and bin size classes
	str := func() string { return string(bytes.Repeat([]byte("x"), lens[r.IntN(len(lens))])) }
	for i := range 500 {
		v := sample{S: str(), SO: str(), T: r.IntN(2) == 0, U: pick(edges...), UO: pick(edges...),
			U32: uint32(pick(edges...)), U8: uint8(pick(edges...)), I: int64(pick(edges...)), IO: -int64(pick(edges...))}
		if r.IntN(2) == 0 {
			v.B, v.BO = []byte(str()), []byte(str())
		}
		for _, compact := range []bool{false, true} {
			var want, got bytes.Buffer
			re := msgpack.NewEncoder(&want)
			re.UseCompactInts(compact)
			if err := re.Encode(&v); err != nil {
				t.Fatal(err)
			}
			he := msgpack.NewEncoder(&got)
			he.UseCompactInts(compact)
			w := Writer{E: he, Compact: compact}
			writeSample(&w, &v)
			if w.Err != nil {
				t.Fatal(w.Err)
			}
			if g, w := got.Bytes(), want.Bytes(); !bytes.Equal(g, w) {
				at := 0
				for at < min(len(g), len(w)) && g[at] == w[at] {
					at++
				}
				t.Fatalf("value %d (compact %v): hand %d bytes, reflection %d, first difference at %d:\nhand       % x\nreflection % x",
					i, compact, len(g), len(w), at, g[at:min(at+16, len(g))], w[at:min(at+16, len(w))])
			}
		}
	}
}

// The tag guard holds a type whose fields are those its encoder was
// written for, and drops one whose fields changed since.
func TestTagGuard(t *testing.T) {
	type renamed struct {
		S string `msgpack:"s2"`
	}
	if got := FieldTags(reflect.TypeFor[sample]()); got != sampleTags {
		t.Fatalf("FieldTags(sample) = %q, want %q", got, sampleTags)
	}
	g := TagGuard(map[reflect.Type]string{reflect.TypeFor[sample](): sampleTags, reflect.TypeFor[renamed](): "S:s"})
	if !g[reflect.TypeFor[sample]()] || g[reflect.TypeFor[renamed]()] {
		t.Fatalf("TagGuard = %v, want sample kept and renamed dropped", g)
	}
}

// Decode refuses bytes the bounds check refuses, with the check's own
// error, and decodes into a fresh copy: nothing decoded points into the
// input, so a pooled frame may be reused at once.
func TestDecodeIsBoundedAndCopies(t *testing.T) {
	bomb := []byte{0xdd, 0xff, 0xff, 0xff, 0xff} // an array claiming 4 Gi elements
	var s []string
	if err, want := Decode(bomb, &s), CheckBounds(bomb); err == nil || want == nil || err.Error() != want.Error() {
		t.Fatalf("Decode(bomb) = %v, want the check's error %v", err, want)
	}
	in, err := msgpack.Marshal(&sample{S: "abc", B: []byte("def")})
	if err != nil {
		t.Fatal(err)
	}
	var got sample
	if err := Decode(in, &got); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 0
	}
	if got.S != "abc" || string(got.B) != "def" {
		t.Fatalf("decoded %+v changed with its input", got)
	}
}
