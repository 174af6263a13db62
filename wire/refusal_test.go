package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"lockcell/wire"
)

// A refusal reads back as the typed error it was written with; one that
// claims more than MaxRefusalSize, or is cut short, is an error of its
// own and never a refusal.
func TestRefusalRoundTrip(t *testing.T) {
	var b bytes.Buffer
	if err := wire.WriteRefusal(&b, "more than 64 connections"); err != nil {
		t.Fatal(err)
	}
	if first, _ := b.ReadByte(); first != wire.RPCRefused {
		t.Fatalf("first byte %#x, want RPCRefused", first)
	}
	rest := bytes.Clone(b.Bytes())
	rej, err := wire.ReadRefusal(&b)
	if err != nil || !errors.Is(rej, wire.ErrTooMany) || rej.Msg != "more than 64 connections" {
		t.Fatalf("read back %v, %v", rej, err)
	}
	if _, err := wire.ReadRefusal(bytes.NewReader(rest[:len(rest)-1])); err == nil {
		t.Fatal("a truncated refusal was read")
	}
	var long [4]byte
	binary.BigEndian.PutUint32(long[:], wire.MaxRefusalSize+1)
	if _, err := wire.ReadRefusal(bytes.NewReader(long[:])); err == nil {
		t.Fatal("an over-long refusal was read")
	}
	if err := wire.WriteRefusal(&b, string(make([]byte, wire.MaxRefusalSize))); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("an over-long refusal was written: %v", err)
	}
}
