package fsm

import (
	"bytes"
	"encoding/hex"
	"os"
	"testing"
)

// restoreGolden checks a committed golden snapshot: it is of version v,
// restores, snapshots again to its own bytes, and equals built, today's
// snapshot of the state it was written from (so a format change fails
// here). It returns the restored FSM.
func restoreGolden(t *testing.T, path string, v uint8, built []byte) *FSM {
	t.Helper()
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if img := fsmtImage(t, golden); img.Version != v {
		t.Fatalf("the golden snapshot %s is version %d, want %d", path, img.Version, v)
	}
	f, err := fsmtRestore(t, fsmtCell, golden)
	if err != nil {
		t.Fatal(err)
	}
	if again := fsmtSnapshotBytes(t, f); !bytes.Equal(again, golden) {
		t.Fatal("the restored golden snapshot snapshots to other bytes")
	}
	if !bytes.Equal(built, golden) {
		t.Fatalf("the golden state built today snapshots to other bytes: the version-%d format changed", v)
	}
	return f
}

// goldenEntry decodes a committed log entry (hex), checks it is of type
// want and re-encodes to its own bytes, and returns it with its bytes.
func goldenEntry(t *testing.T, hexEntry string, want CmdType) (*Command, []byte) {
	t.Helper()
	entry, err := hex.DecodeString(hexEntry)
	if err != nil || len(entry) == 0 {
		t.Fatalf("no golden %s entry (%v)", want, err)
	}
	c, err := DecodeCommand(entry)
	if err != nil || c.Type != want {
		t.Fatalf("the committed %s entry decodes to %+v (%v)", want, c, err)
	}
	if b, err := c.Encode(); err != nil || !bytes.Equal(b, entry) {
		t.Fatalf("the committed %s entry re-encodes to %x (%v)", want, b, err)
	}
	return c, entry
}
