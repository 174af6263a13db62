package wire

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestHandEncodingMatchesReflection: every message WriteMessage encodes by
// hand is, byte for byte, what msgpack's reflection writes for it with
// WriteMessage's encoder, over random values (each field zero or not, and
// integers of every width), and decodes back to the same value.
func TestHandEncodingMatchesReflection(t *testing.T) {
	for typ, ok := range byHand {
		if !ok {
			t.Errorf("%v's fields are no longer those encodeByHand writes (handTags): update its encoder", typ)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for typ := range handTags {
		if typ == reflect.TypeFor[Stat]() {
			continue // written inside ContentsResponse and StatResponse
		}
		for range 2000 {
			v := reflect.New(typ)
			fillRandom(rng, v.Elem(), 0)
			var got bytes.Buffer
			if err := WriteMessage(&got, v.Interface()); err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			enc := msgpack.NewEncoder(&want)
			enc.UseCompactInts(true)
			if err := enc.Encode(v.Interface()); err != nil {
				t.Fatal(err)
			}
			frame := got.Bytes()[frameHeader:]
			if int(binary.BigEndian.Uint32(got.Bytes())) != len(frame) || !bytes.Equal(frame, want.Bytes()) {
				t.Fatalf("%v %+v:\nby hand    %x\nreflection %x", typ, v.Elem().Interface(), frame, want.Bytes())
			}
			back := reflect.New(typ)
			if err := Decode(frame, back.Interface()); err != nil {
				t.Fatal(err)
			}
			var again bytes.Buffer
			if err := WriteMessage(&again, back.Interface()); err != nil || !bytes.Equal(again.Bytes(), got.Bytes()) {
				t.Fatalf("%v: decoded and written again it differs (%v)", typ, err)
			}
		}
	}
}

// fillRandom sets v's fields at random: each one zero half the time, else
// a value of a random width.
func fillRandom(rng *rand.Rand, v reflect.Value, depth int) {
	if rng.IntN(2) == 0 && depth > 0 {
		return // zero
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rng.Uint64() >> rng.IntN(64))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := int64(rng.Uint64()>>rng.IntN(64)) >> 1
		if rng.IntN(2) == 0 {
			n = -n
		}
		v.SetInt(n)
	case reflect.String:
		v.SetString(string(make([]byte, rng.IntN(300))))
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if rng.IntN(4) == 0 {
				v.SetBytes([]byte{}) // empty but not nil
			} else {
				v.SetBytes(make([]byte, rng.IntN(70000)>>rng.IntN(16)))
			}
			return
		}
		s := reflect.MakeSlice(v.Type(), rng.IntN(3), 3)
		for i := range s.Len() {
			fillRandom(rng, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillRandom(rng, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillRandom(rng, v.Field(i), depth+1)
			}
		}
	}
}

// TestDecodedValuesDoNotAliasTheFrame: Decode copies every byte slice and
// string out of the frame, so the frame (and ReadMessage's pooled buffer)
// may be reused at once: overwriting them changes nothing decoded.
func TestDecodedValuesDoNotAliasTheFrame(t *testing.T) {
	var buf bytes.Buffer
	in := &SetContentsRequest{Handle: 7, Contents: []byte("contents"), Sequencer: []byte("sequencer")}
	if err := WriteMessage(&buf, in); err != nil {
		t.Fatal(err)
	}
	frame := bytes.Clone(buf.Bytes()[frameHeader:])
	var got SetContentsRequest
	if err := Decode(frame, &got); err != nil {
		t.Fatal(err)
	}
	clear(frame)
	if string(got.Contents) != "contents" || string(got.Sequencer) != "sequencer" {
		t.Fatalf("decoded values changed with the frame: %q %q", got.Contents, got.Sequencer)
	}

	// Two messages through ReadMessage's pooled buffer: the first's
	// strings survive the second's read.
	buf.Reset()
	if err := WriteMessage(&buf, &Status{Code: CodeNotFound, Msg: "first", Leader: "a:1"},
		&Status{Code: CodeExists, Msg: "XXXXX", Leader: "b:2"}); err != nil {
		t.Fatal(err)
	}
	var first, second Status
	if err := ReadMessage(&buf, &first); err != nil {
		t.Fatal(err)
	}
	if err := ReadMessage(&buf, &second); err != nil {
		t.Fatal(err)
	}
	if first.Msg != "first" || first.Leader != "a:1" || second.Msg != "XXXXX" {
		t.Fatalf("read %+v then %+v", first, second)
	}
}
