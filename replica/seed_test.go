package replica

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockcell/fsm"
)

// Seeding a replica from a backup: the data folder, Raft's snapshot and
// term, and a replica that opens on them. What the seeded state holds (and
// drops) is fsm's TestBackupReadBackAndSeed.

// seedBackup returns a checked backup of a cell "c" with a cell key, a
// directory, a file with contents, a session and an ephemeral file of it,
// taken in term 3, built through the state machine's public API as
// committed entries would.
func seedBackup(t testing.TB) *fsm.BackupContents {
	t.Helper()
	f := fsm.NewFSM("c", quietLogger())
	var idx uint64
	apply := func(c fsm.Command) *fsm.Result {
		t.Helper()
		idx++
		c.Time = int64(1_700_000_000) * int64(time.Second)
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		r := f.ApplyEntry(idx, b).(*fsm.Result)
		if r.Err != nil {
			t.Fatalf("entry %d %T: %v", idx, c.Payload, r.Err)
		}
		return r
	}
	apply(fsm.Command{Payload: &fsm.CellKeyArgs{Key: bytes.Repeat([]byte{7}, 32)}})
	s := apply(fsm.Command{Client: "test", Principal: "p", Payload: &fsm.CreateSessionArgs{}}).Session
	rwc := fsm.FlagRead | fsm.FlagWrite | fsm.FlagCreate
	seq := uint64(0)
	open := func(rel string, flags uint32) uint64 {
		seq++
		return apply(fsm.Command{Session: s, Seq: seq, Ack: seq - 1, Payload: &fsm.OpenArgs{Path: "/ls/c/" + rel, Flags: flags}}).Handle
	}
	open("dir", rwc|fsm.FlagDirectory)
	fh := open("dir/file", rwc)
	seq++
	apply(fsm.Command{Session: s, Seq: seq, Ack: seq - 1, Payload: &fsm.SetContentsArgs{Handle: fh, Contents: []byte("contents")}})
	open("eph", rwc|fsm.FlagEphemeral)
	b, err := f.Backup(3, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	file, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size))
	if err != nil {
		t.Fatal(err)
	}
	got, err := fsm.ReadBackup(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSeedOpensAtTheBackup: a replica opened on a seeded folder restores
// the seeded state at the backup's index (the hash Seed reported), with no
// session, and goes on from there: it leads its one-member cell, and a new
// entry comes after the backup's, in a later term.
func TestSeedOpensAtTheBackup(t *testing.T) {
	got := seedBackup(t)
	hd := got.Header
	dir := filepath.Join(t.TempDir(), "r1")
	addr := freeAddrs(t, 1)[0]
	peers := []Peer{{ID: "1", RaftAddr: addr}}
	res, err := Seed(got, SeedConfig{Dir: dir, ID: "1", Peers: peers, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Nodes != 3 || res.DroppedEphemeral != 1 || res.Sessions != 1 {
		t.Fatalf("seed result %+v", res)
	}
	r, err := Open(Config{ID: "1", Cell: "c", Dir: dir, RaftAddr: addr, Peers: peers, Timings: testTimings(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := r.FSM()
	idx, sum, err := f.StateHash()
	if err != nil || idx != hd.Applied || sum != res.StateHash {
		t.Fatalf("restored replica at %d hash %x (%v), seeded %d %x", idx, sum[:4], err, hd.Applied, res.StateHash[:4])
	}
	if !bytes.Equal(f.CellKey(), bytes.Repeat([]byte{7}, 32)) {
		t.Fatal("the cell key did not come along")
	}
	if n := len(f.Sessions()); n != 0 {
		t.Fatalf("%d sessions restored", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var res2 *fsm.Result
	for {
		res2, err = r.Apply(ctx, &fsm.Command{Client: "after", Time: time.Now().UnixNano(), Payload: &fsm.CreateSessionArgs{}})
		if err == nil || !errors.Is(err, fsm.ErrNotLeader) || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // waiting for the election, with the context's deadline
	}
	if err != nil || res2.Err != nil || res2.Session <= hd.Applied {
		t.Fatalf("apply after restore: %+v %v; the backup was at index %d", res2, err, hd.Applied)
	}
	if st := r.Status(); st.Term <= 3 {
		t.Fatalf("status after restore %+v, backup in term 3", st)
	}
}

func TestSeedRefuses(t *testing.T) {
	got := seedBackup(t)
	peers := []Peer{{ID: "1", RaftAddr: "127.0.0.1:1"}}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Seed(got, SeedConfig{Dir: full, ID: "1", Peers: peers}); !errors.Is(err, ErrDirNotEmpty) {
		t.Fatalf("non-empty folder: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "new")
	if _, err := Seed(got, SeedConfig{Dir: empty, ID: "1", Cell: "other", Peers: peers}); !errors.Is(err, ErrCellMismatch) {
		t.Fatalf("another cell: %v", err)
	}
	if _, err := Seed(got, SeedConfig{Dir: empty, ID: "9", Peers: peers}); err == nil {
		t.Fatal("an id outside the peers was seeded")
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore left %s behind: %v", empty, err)
	}
}
