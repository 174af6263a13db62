package master

import (
	"strings"
	"testing"

	"lockcell/fsm"
	"lockcell/wire"
)

// The most a ListLocks reply can hold — a thousand locks, each naming 64
// holders and 64 waiters with the longest principals, hosts and programs
// the cell takes — is cut short, says so, and still fits a frame; a
// listing of ordinary size is left whole.
func TestLockInfosFitAFrame(t *testing.T) {
	long := strings.Repeat("x", wire.MaxIdentityLen)
	id := fsm.Identity{Host: long, PID: 1 << 40, Program: long}
	var locks []fsm.LockListing
	for i := range wire.MaxListedLocks {
		l := fsm.LockListing{Path: "/ls/t/" + strings.Repeat("n", 200) + string(rune('a'+i%26)), Mode: wire.LockShared,
			Gen: 1 << 40, HolderCount: 1000, WaiterCount: 1000, LockDelayUntil: 1 << 62}
		for j := range wire.MaxStatHolders {
			l.Holders = append(l.Holders, fsm.LockHolderView{Session: uint64(j) << 40, Principal: long, Identity: id, Since: 1 << 62})
			l.Waiters = append(l.Waiters, fsm.LockWaiterView{Session: uint64(j) << 40, Principal: long, Identity: id, Mode: 1, Since: 1 << 62})
		}
		locks = append(locks, l)
	}
	infos, short := lockInfos(locks, listLocksBytes)
	if !short || len(infos) == 0 || len(infos) == len(locks) {
		t.Fatalf("listed %d of %d huge locks, short %v", len(infos), len(locks), short)
	}
	var buf strings.Builder
	if err := wire.WriteMessage(&buf, &wire.ListLocksResponse{Locks: infos, Truncated: true}); err != nil {
		t.Fatalf("the cut listing does not encode in a frame: %v", err)
	}
	if n := buf.Len(); n > wire.MaxFrameSize {
		t.Fatalf("the cut listing is %d bytes, over the frame limit %d", n, wire.MaxFrameSize)
	}

	// Ordinary locks: all of them.
	small := make([]fsm.LockListing, wire.MaxListedLocks)
	for i := range small {
		small[i] = fsm.LockListing{Path: "/ls/t/job", HolderCount: 1,
			Holders: []fsm.LockHolderView{{Session: 7, Principal: "alice", Identity: fsm.Identity{Host: "h", PID: 1, Program: "p"}}}}
	}
	if infos, short := lockInfos(small, listLocksBytes); short || len(infos) != len(small) {
		t.Fatalf("listed %d of %d ordinary locks, short %v", len(infos), len(small), short)
	}
}
