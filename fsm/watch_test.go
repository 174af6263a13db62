package fsm

import (
	"math/rand"
	"slices"
	"testing"
)

// The watch index lists a name's watchers by session and then handle, in
// pages of bounded size that together list exactly what Watchers lists,
// whatever handles closed in between; pages stop at the id bound (handles
// opened later), a session the caller skips is passed over whole as one
// entry of a page, a closed handle leaves the index for good, and the
// index shrinks back as handles close. It is rebuilt the same by a
// restore.
func TestWatchIndexPagesBySession(t *testing.T) {
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
	// The open ones, by session (sessions are in ascending id) and then
	// handle.
	var want []uint64
	for _, s := range sessions {
		for _, o := range handles {
			if o.s == s && !closed[o.id] {
				want = append(want, o.id)
			}
		}
	}

	paged := func(f *FSM, m uint32, limit int, skip func(uint64) bool) (got []uint64, pages int) {
		var after WatchCursor
		for more := true; more; pages++ {
			var ws []Watcher
			_ = f.Read(func(v View) error {
				ws, after, more = v.WatchersAfter(nil, fsmtPath("f"), m, after, through, limit, skip)
				return nil
			})
			if len(ws) > limit {
				t.Fatalf("a page of %d watchers; the limit is %d", len(ws), limit)
			}
			for _, w := range ws {
				if f.handles[w.Handle] == nil || f.handles[w.Handle].Session != w.Session {
					t.Fatalf("watcher %+v is not an open handle of its session", w)
				}
				got = append(got, w.Handle)
			}
			if pages > len(handles) {
				t.Fatal("paging does not end")
			}
		}
		return got, pages
	}
	for _, limit := range []int{1, 7, 256, 10000} {
		if got, _ := paged(h.f, mask, limit, nil); !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %d handles %v...; want the %d open ones opened by %d, in order", limit, len(got), got[:min(5, len(got))], len(want), through)
		}
	}
	var want2 []uint64
	for _, id := range want {
		if h.f.handles[id].EventMask&2 != 0 {
			want2 = append(want2, id)
		}
	}
	if got, _ := paged(h.f, 2, 10, nil); !slices.Equal(got, want2) {
		t.Fatalf("by mask: %v; want %v", got, want2)
	}

	// Skipping: the skipped session's handles are not listed, and a
	// skipped session is one entry of a page however many handles it has.
	skipped := sessions[1]
	var wantSkip []uint64
	for _, id := range want {
		if h.f.handles[id].Session != skipped {
			wantSkip = append(wantSkip, id)
		}
	}
	asked := map[uint64]int{}
	got, _ := paged(h.f, mask, 5, func(s uint64) bool { asked[s]++; return s == skipped })
	if !slices.Equal(got, wantSkip) {
		t.Fatalf("skipping session %d: %v; want %v", skipped, got, wantSkip)
	}
	for _, s := range sessions {
		if asked[s] != 1 {
			t.Fatalf("session %d was asked about %d times in one reading; want once", s, asked[s])
		}
	}
	if _, pages := paged(h.f, mask, 1, func(uint64) bool { return true }); pages != len(sessions) {
		t.Fatalf("every session skipped: %d pages of one entry; want one page a session (%d)", pages, len(sessions))
	}

	all := h.f.Watchers(fsmtPath("f"), mask)
	var withLate []uint64
	for _, w := range all {
		withLate = append(withLate, w.Handle)
	}
	if !slices.Contains(withLate, late) || len(all) != len(want)+1 {
		t.Fatalf("Watchers lists %d; want %d with the later handle %d", len(all), len(want)+1, late)
	}
	w := h.f.watch[fsmtPath("f")]
	for i, g := range w.groups {
		if holes := len(g.ids) - g.live; holes > minWatchHoles && holes > g.live {
			t.Fatalf("session %d: %d holes for %d live entries: never compacted", w.sessions[i], holes, g.live)
		}
	}

	b := fsmtSnapshotBytes(t, h.f)
	g, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := paged(g, mask, 13, nil); !slices.Equal(got, want) {
		t.Fatalf("after a restore: %v; want %v", got, want)
	}

	for _, o := range handles {
		if !closed[o.id] {
			wantOK(t, "close", h.closeH(o.s, o.id))
		}
	}
	if w := h.f.watch[fsmtPath("f")]; w == nil || !slices.Equal(w.sessions, sessions[:1]) {
		t.Fatal("the index does not drop sessions left with no watching handle")
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

// BenchmarkWatchersOfACrowd reads, page by page as the master's fan-out
// does, the watchers of a name that 160 sessions watch with 256 handles
// each: every handle listed, or every session passed over whole (the
// master's case for sessions whose queue already holds an overflow).
func BenchmarkWatchersOfACrowd(b *testing.B) {
	h := newFSMT(b)
	const sessions, per = 160, 256
	for range sessions {
		s := h.session()
		for range per {
			if r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC, EventMask: 1}}); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	for _, c := range []struct {
		name string
		skip func(uint64) bool
	}{{"every-handle", nil}, {"sessions-passed-over", func(uint64) bool { return true }}} {
		b.Run(c.name, func(b *testing.B) {
			var dst []Watcher
			for b.Loop() {
				var after WatchCursor
				for more := true; more; {
					_ = h.f.Read(func(v View) error {
						dst, after, more = v.WatchersAfter(dst[:0], fsmtPath("f"), 1, after, ^uint64(0), 256, c.skip)
						return nil
					})
				}
			}
		})
	}
}
