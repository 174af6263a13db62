package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The member table: the first seed wins, puts and removes apply, and it
// travels in snapshots exactly; a snapshot from before the table existed
// restores with none, and a backup seeded into a new cell leaves it behind.
func TestMemberTableAppliesAndSnapshots(t *testing.T) {
	h := newFSMT(t)
	before := h.snapshot()
	a := MemberAddrs{ID: "1", ClientAddr: "h1:7001", RaftAddr: "h1:7101"}
	b := MemberAddrs{ID: "2", ClientAddr: "h2:7001", RaftAddr: "h2:7101"}
	c := MemberAddrs{ID: "6", ClientAddr: "h6:7001", RaftAddr: "h6:7101"}
	wantOK(t, "seed", h.raw(Command{Payload: &MembersSeedArgs{Members: []MemberAddrs{b, a}, ConfiguredSize: 5}}))
	wantOK(t, "second seed", h.raw(Command{Payload: &MembersSeedArgs{Members: []MemberAddrs{c}, ConfiguredSize: 3}}))
	wantOK(t, "put", h.raw(Command{Payload: &MemberPutArgs{Members: []MemberAddrs{c}}}))
	wantOK(t, "remove", h.raw(Command{Payload: &MemberRemoveArgs{Members: []MemberAddrs{{ID: "2"}}}}))
	wantOK(t, "remove again", h.raw(Command{Payload: &MemberRemoveArgs{Members: []MemberAddrs{{ID: "2"}}}}))
	ms, size := h.f.MemberTable()
	if want := []MemberAddrs{a, c}; !reflect.DeepEqual(ms, want) || size != 5 {
		t.Fatalf("table %+v size %d, want %+v size 5 (the first seed wins)", ms, size, want)
	}

	snap := h.snapshot()
	g := NewFSM(fsmtCell, fsmtLogger())
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if gm, gs := g.MemberTable(); !reflect.DeepEqual(gm, ms) || gs != size {
		t.Fatalf("restored table %+v size %d, want %+v size %d", gm, gs, ms, size)
	}
	if again := fsmtSnapshotBytes(t, g); !bytes.Equal(again, snap) {
		t.Fatal("a restored table does not snapshot to the same bytes")
	}

	// No table before the first seed: not even its keys in the snapshot,
	// so older snapshots and states without one are alike.
	var img map[string]any
	if err := msgpack.Unmarshal(before, &img); err != nil {
		t.Fatal(err)
	}
	if _, ok := img["mb"]; ok {
		t.Fatal("a snapshot of a state without a member table names one")
	}
	if _, ok := img["ms"]; ok {
		t.Fatal("a snapshot of a state without a member table has a configured size")
	}

	// A backup carries the table; seeding a new cell from it drops it (the
	// new cell's first master seeds its own).
	bk, err := h.f.Backup(1, time.Unix(0, fsmtBase))
	if err != nil {
		t.Fatal(err)
	}
	bc, err := ReadBackup(bytes.NewReader(backupBytes(t, bk)))
	if err != nil {
		t.Fatal(err)
	}
	if got := bc.img.Members; !reflect.DeepEqual(got, ms) {
		t.Fatalf("backup's table %+v, want %+v", got, ms)
	}
	if out, _ := stripSessions(bc.img); out.Members != nil || out.MemberSize != 0 {
		t.Fatalf("a seeded cell keeps the backup's table: %+v size %d", out.Members, out.MemberSize)
	}
}

// A snapshot whose member table names an id twice, or none, or a negative
// size is refused as malformed.
func TestMemberTableMalformedSnapshots(t *testing.T) {
	for name, img := range map[string]*snapshotImage{
		"repeated id": {Members: []MemberAddrs{{ID: "1"}, {ID: "1", ClientAddr: "x:1"}}},
		"empty id":    {Members: []MemberAddrs{{ClientAddr: "x:1"}}},
		"negative":    {MemberSize: -1},
	} {
		var tbl memberTable
		if err := tbl.restore(img); !errors.Is(err, ErrMalformedSnapshot) {
			t.Errorf("%s: %v, want ErrMalformedSnapshot", name, err)
		}
	}
}

// minMemberBytes is the encoding of a zero MemberAddrs, as
// checkSnapshotShape charges each element of the member array.
func TestMemberElementSize(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(&MemberAddrs{}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != minMemberBytes {
		t.Fatalf("a zero MemberAddrs encodes to %d bytes; its least size is %d", buf.Len(), minMemberBytes)
	}
}
