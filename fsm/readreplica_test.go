package fsm

import (
	"slices"
	"testing"
)

// The read-replica role is replicated state: recorded by its own command
// (30), kept by snapshot and restore, written as snapshot version 9 only
// while a read replica is in the member table (so a cell without one
// still writes what the version before reads), and ended by MemberRemove.
func TestReadReplicaRoleIsReplicated(t *testing.T) {
	h := newFSMT(t)
	seed := []MemberAddrs{{ID: "1", ClientAddr: "h:1", RaftAddr: "h:2"}}
	if r := h.raw(Command{Payload: &MembersSeedArgs{Members: seed, ConfiguredSize: 1}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if img := fsmtImage(t, h.snapshot()); img.Version > snapshotV8 || img.ReadReplicas != nil {
		t.Fatalf("no read replica: snapshot version %d, read replicas %v", img.Version, img.ReadReplicas)
	}
	rr := MemberAddrs{ID: "r1", ClientAddr: "h:3", RaftAddr: "h:4"}
	if r := h.raw(Command{Payload: &ReadReplicaPutArgs{Members: []MemberAddrs{rr}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	check := func(f *FSM, want bool) {
		t.Helper()
		f.Read(func(v View) error {
			ms, _ := v.MemberTable()
			if got := v.IsReadReplica("r1"); got != want || v.IsReadReplica("1") {
				t.Errorf("r1 a read replica: %v, want %v; 1: %v", got, want, v.IsReadReplica("1"))
			}
			if in := slices.Contains(ms, rr); in != want {
				t.Errorf("r1 in the member table %v: %v, want %v", ms, in, want)
			}
			return nil
		})
	}
	check(h.f, true)
	img := fsmtImage(t, h.snapshot())
	if img.Version != snapshotVersion || !slices.Equal(img.ReadReplicas, []string{"r1"}) {
		t.Fatalf("with a read replica: snapshot version %d, read replicas %v", img.Version, img.ReadReplicas)
	}
	f, err := fsmtRestore(t, fsmtCell, h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	check(f, true)
	if r := h.raw(Command{Payload: &MemberRemoveArgs{Members: []MemberAddrs{{ID: "r1"}}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	check(h.f, false)
	if img := fsmtImage(t, h.snapshot()); img.Version > snapshotV8 || img.ReadReplicas != nil {
		t.Fatalf("read replica removed: snapshot version %d, read replicas %v", img.Version, img.ReadReplicas)
	}
}
