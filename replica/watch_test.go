package replica

import (
	"math/rand"
	"slices"
	"testing"
)

// The watch index lists a name's watchers in handle order, in pages of
// bounded size that together list exactly what Watchers lists, whatever
// handles closed in between; pages stop at the id bound (handles opened
// later), a closed handle leaves the index for good, and the index
// shrinks back as handles close. It is rebuilt the same by a restore.
func TestWatchIndexPagesInHandleOrder(t *testing.T) {
	h := newFSMT(t)
	const mask = 1
	var sessions []uint64
	for range 4 {
		sessions = append(sessions, h.session())
	}
	type open struct{ s, id uint64 }
	var handles []open
	for i := range 600 {
		s := sessions[i%len(sessions)]
		r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC, EventMask: mask | uint32(i%2)<<1}})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		handles = append(handles, open{s, r.Handle})
	}
	through := h.f.lastIndex
	late := h.do(sessions[0], Command{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRW, EventMask: mask}}).Handle

	rng := rand.New(rand.NewSource(1))
	closed := map[uint64]bool{}
	for _, i := range rng.Perm(len(handles))[:450] {
		wantOK(t, "close", h.closeH(handles[i].s, handles[i].id))
		closed[handles[i].id] = true
	}
	var want []uint64
	for _, o := range handles {
		if !closed[o.id] {
			want = append(want, o.id)
		}
	}

	paged := func(f *FSM, m uint32, limit int) []uint64 {
		var got []uint64
		var after uint64
		for more, pages := true, 0; more; pages++ {
			var ws []Watcher
			_ = f.Read(func(v View) error {
				ws, after, more = v.WatchersAfter(nil, fsmtPath("f"), m, after, through, limit)
				return nil
			})
			if len(ws) > limit {
				t.Fatalf("a page of %d watchers; the limit is %d", len(ws), limit)
			}
			for _, w := range ws {
				got = append(got, w.Handle)
			}
			if pages > len(handles) {
				t.Fatal("paging does not end")
			}
		}
		return got
	}
	for _, limit := range []int{1, 7, 256, 10000} {
		if got := paged(h.f, mask, limit); !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %d handles %v...; want the %d open ones opened by %d, in order", limit, len(got), got[:min(5, len(got))], len(want), through)
		}
	}
	var want2 []uint64
	for _, id := range want {
		if h.f.handles[id].EventMask&2 != 0 {
			want2 = append(want2, id)
		}
	}
	if got := paged(h.f, 2, 10); !slices.Equal(got, want2) {
		t.Fatalf("by mask: %v; want %v", got, want2)
	}
	all := h.f.Watchers(fsmtPath("f"), mask)
	if len(all) != len(want)+1 || all[len(all)-1].Handle != late {
		t.Fatalf("Watchers lists %d, last %+v; want %d ending with the later handle %d", len(all), all[len(all)-1], len(want)+1, late)
	}
	w := h.f.watch[fsmtPath("f")]
	if holes := len(w.ids) - w.live; holes > minWatchHoles && holes > w.live {
		t.Fatalf("%d holes for %d live entries: never compacted", holes, w.live)
	}

	b := fsmtSnapshotBytes(t, h.f)
	g, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := paged(g, mask, 13); !slices.Equal(got, want) {
		t.Fatalf("after a restore: %v; want %v", got, want)
	}

	for _, o := range handles {
		if !closed[o.id] {
			wantOK(t, "close", h.closeH(o.s, o.id))
		}
	}
	wantOK(t, "close", h.closeH(sessions[0], late))
	if h.f.watch[fsmtPath("f")] != nil {
		t.Fatal("the index keeps a name no handle watches")
	}
}

// WatchSite reads what the events of a change need in O(1): whether any
// handle watches the name, the node's position and ACL, and the last
// command index, above which every handle was opened later.
func TestWatchSite(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	plain := h.mustOpen(s, "f", fsmtRWC)
	wantOK(t, "write", h.set(s, plain, "x"))
	var site WatchSite
	read := func() {
		_ = h.f.Read(func(v View) error { site = v.WatchSite(fsmtPath("f")); return nil })
	}
	read()
	n := h.node("f")
	if site.Watched || !site.Exists || site.Instance != n.Instance || site.ContentGen != n.ContentGen || site.LastHandle != h.f.lastIndex {
		t.Fatalf("site %+v of an unwatched node %+v", site, n)
	}
	r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRW, EventMask: 1}})
	read()
	if !site.Watched || site.LastHandle < r.Handle {
		t.Fatalf("site %+v with handle %d watching", site, r.Handle)
	}
}
