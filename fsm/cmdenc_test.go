package fsm

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestCommandEncodingMatchesReflection: Encode, which writes commands by
// hand, writes byte for byte what msgpack's reflection writes for them
// (Command.EncodeMsgpack with a default encoder), over random commands of
// every type: each envelope and payload field zero or not, integers of
// every width, with and without a fence and a quota.
func TestCommandEncodingMatchesReflection(t *testing.T) {
	for typ, ok := range cmdByHand {
		if !ok {
			t.Errorf("%v's fields are no longer those encodeByHand writes (cmdTags): update its encoder", typ)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for ct := CmdEpoch; ct <= CmdNote; ct++ {
		for range 1000 {
			var c Command
			fillCommand(rng, reflect.ValueOf(&c).Elem())
			c.Payload = newPayload(ct)
			fillCommand(rng, reflect.ValueOf(c.Payload).Elem())
			got, err := c.Encode()
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			want.WriteByte(commandVersion)
			if err := msgpack.NewEncoder(&want).Encode(&c); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("%s %+v %+v:\nby hand    %x\nreflection %x", ct, c, c.Payload, got, want.Bytes())
			}
		}
	}
}

// TestCommittedLogV2EncodesAlike: every entry of the committed version-2
// log, decoded and encoded again today, is the same bytes.
func TestCommittedLogV2EncodesAlike(t *testing.T) {
	for _, e := range readCommittedLog(t, committedLogV2) {
		c, err := DecodeCommand(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, e.Data) {
			t.Fatalf("entry %d (%s) encodes differently:\nlog   %x\ntoday %x", e.Index, c.Type, e.Data, again)
		}
	}
}

// fillCommand sets v's exported fields at random, each zero half the
// time; the Type, the Payload and batches' Commands are left alone.
func fillCommand(rng *rand.Rand, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Name == "Type" || f.Name == "Payload" || rng.IntN(2) == 0 {
			continue
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Bool:
			fv.SetBool(true)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			fv.SetUint(rng.Uint64() >> rng.IntN(64))
		case reflect.Int, reflect.Int64:
			n := int64(rng.Uint64()>>rng.IntN(64)) >> 1
			if rng.IntN(2) == 0 {
				n = -n
			}
			fv.SetInt(n)
		case reflect.String:
			fv.SetString(string(make([]byte, rng.IntN(300))))
		case reflect.Slice:
			if fv.Type().Elem().Kind() == reflect.Uint8 {
				fv.SetBytes(make([]byte, rng.IntN(70000)>>rng.IntN(16)))
			}
		case reflect.Pointer:
			p := reflect.New(fv.Type().Elem())
			fillCommand(rng, p.Elem())
			fv.Set(p)
		}
	}
}
