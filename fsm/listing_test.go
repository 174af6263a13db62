package fsm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"lockcell/acl"
)

// fsmtCheckKids checks every directory's listing index against its child
// set: the derived index must never drift from the state it indexes.
func fsmtCheckKids(t testing.TB, f *FSM) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	fsmtCheckKidsLocked(t, f)
}

// fsmtCheckKidsLocked is fsmtCheckKids under the caller's read lock
// (fsmtCheckInvariants runs it after every check it makes).
func fsmtCheckKidsLocked(t testing.TB, f *FSM) {
	t.Helper()
	for p, n := range f.nodes {
		var want []DirEntry
		for c, d := range n.children {
			want = append(want, DirEntry{c, d})
		}
		for _, ch := range n.kids.chunks {
			for _, k := range ch {
				if f.nodes[p+"/"+k.name] != k.node {
					t.Fatalf("%s: the index's node for %s is not the node of that name", p, k.name)
				}
			}
		}
		slices.SortFunc(want, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
		if err := checkDirIndex(&n.kids, want); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

// checkDirIndex checks x holds exactly want (sorted) in well-formed chunks.
func checkDirIndex(x *dirIndex, want []DirEntry) error {
	if got := x.entries(); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("index holds %v, want %v", got, want)
	}
	if x.Len() != len(want) {
		return fmt.Errorf("index counts %d, holds %d", x.Len(), len(want))
	}
	for i, ch := range x.chunks {
		if len(ch) == 0 || len(ch) > dirChunk {
			return fmt.Errorf("chunk %d of %d entries (at most %d)", i, len(ch), dirChunk)
		}
		if i > 0 && len(ch)+len(x.chunks[i-1]) < dirChunk/4 {
			return fmt.Errorf("chunks %d and %d hold %d entries: deletes left tiny chunks unmerged", i-1, i, len(ch)+len(x.chunks[i-1]))
		}
	}
	return nil
}

// The listing index stays exact through random inserts and deletes of a
// few thousand names, and seeks land on the first name after any cursor.
func TestDirIndexRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var x dirIndex
	ref := map[string]bool{}
	sorted := func() []DirEntry {
		var out []DirEntry
		for n, d := range ref {
			out = append(out, DirEntry{n, d})
		}
		slices.SortFunc(out, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	for step := range 20000 {
		name := fmt.Sprintf("n%04d", rng.IntN(3000))
		// Grow first, then mostly shrink, so chunks split and merge.
		if grow := step < 8000; grow == (rng.IntN(4) != 0) {
			if _, ok := ref[name]; !ok {
				ref[name] = rng.IntN(2) == 0
			}
			x.insert(kid{name, ref[name], &Node{Dir: ref[name]}})
		} else {
			delete(ref, name)
			x.remove(name)
		}
		if step%500 == 0 || step == 19999 {
			want := sorted()
			if err := checkDirIndex(&x, want); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for range 20 {
				cur := fmt.Sprintf("n%04d", rng.IntN(3100))[:1+rng.IntN(5)]
				c, i := x.after(cur)
				k := sort.Search(len(want), func(k int) bool { return want[k].Name > cur })
				if k == len(want) {
					if c != len(x.chunks) {
						t.Fatalf("after %q: position %d/%d, want the end", cur, c, i)
					}
				} else if c == len(x.chunks) || x.chunks[c][i].name != want[k].Name {
					t.Fatalf("after %q: position %d/%d, want %v", cur, c, i, want[k])
				}
			}
		}
	}
	t.Logf("%d names in %d chunks at the end", x.Len(), len(x.chunks))
}

// pageAll lists dir's handle page by page with q (its After is the start).
func pageAll(t *testing.T, f *FSM, s, dh uint64, q DirQuery) (names []string, pages int) {
	t.Helper()
	for {
		p, err := f.ReadDirPage(s, dh, q)
		if err != nil {
			t.Fatalf("ReadDirPage after %q: %v", q.After, err)
		}
		pages++
		for _, e := range p.Entries {
			names = append(names, e.Name)
		}
		if !p.More {
			return names, pages
		}
		if len(p.Entries) == 0 {
			t.Fatalf("page after %q says more but is empty", q.After)
		}
		q.After = p.Entries[len(p.Entries)-1].Name
	}
}

// Pages follow the cursor in name order, whatever order children were
// created and deleted in; limits and byte budgets end pages exactly, More
// is true only when a child follows, and the index survives a snapshot.
func TestFSMReadDirPages(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	dh := h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[string]bool{}
	for _, i := range rng.Perm(60) {
		name := fmt.Sprintf("c%02d", i)
		flags := uint32(fsmtRWC)
		if i%7 == 0 {
			flags |= FlagDirectory
		}
		hd := h.mustOpen(s, "d/"+name, flags)
		live[name] = true
		if i%3 == 0 { // delete every third again, out of order
			wantOK(t, "delete "+name, h.do(s, Command{Payload: &DeleteArgs{Handle: hd}}))
			delete(live, name)
		}
	}
	fsmtCheckKids(t, h.f)
	var want []string
	for n := range live {
		want = append(want, n)
	}
	slices.Sort(want)

	for _, limit := range []int{1, 7, len(want), len(want) + 1, 1000} {
		got, pages := pageAll(t, h.f, s, dh, DirQuery{Limit: limit})
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: %q, want %q", limit, got, want)
		}
		if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
			t.Fatalf("limit %d: %d pages, want %d (More only when a child follows)", limit, pages, wantPages)
		}
	}
	// Directory flags come through.
	all, _ := h.f.ReadDir(s, dh)
	for _, e := range all {
		var i int
		fmt.Sscanf(e.Name, "c%d", &i)
		if e.Dir != (i%7 == 0) {
			t.Fatalf("%s listed with dir %v", e.Name, e.Dir)
		}
	}
	// A cursor need not name a child; past the end is an empty last page.
	p, err := h.f.ReadDirPage(s, dh, DirQuery{After: "c30x", Limit: 1000})
	if err != nil || len(p.Entries) == 0 || p.Entries[0].Name <= "c30x" || p.More {
		t.Fatalf("after c30x: %+v %v", p, err)
	}
	if p, err := h.f.ReadDirPage(s, dh, DirQuery{After: "zzz", Limit: 10}); err != nil || len(p.Entries) != 0 || p.More {
		t.Fatalf("past the end: %+v %v", p, err)
	}
	// The byte budget: 3-byte names + 8 overhead = 11 bytes each; 35
	// bytes hold three. An entry larger than the budget still comes alone.
	got, pages := pageAll(t, h.f, s, dh, DirQuery{Limit: 1000, MaxBytes: 35, EntryOverhead: 8})
	if !slices.Equal(got, want) || pages != (len(want)+2)/3 {
		t.Fatalf("byte budget: %d names in %d pages, want %d in %d", len(got), pages, len(want), (len(want)+2)/3)
	}
	if got, pages := pageAll(t, h.f, s, dh, DirQuery{Limit: 1000, MaxBytes: 5, EntryOverhead: 8}); !slices.Equal(got, want) || pages != len(want) {
		t.Fatalf("budget below one entry: %d names in %d pages, want one a page", len(got), pages)
	}
	// A file is no directory.
	fh := h.mustOpen(s, "f", fsmtRWC)
	if _, err := h.f.ReadDirPage(s, fh, DirQuery{Limit: 1}); err == nil || err.(*Error).Kind != KindNotDir {
		t.Fatalf("listing a file: %v", err)
	}

	// A restore rebuilds the same index.
	f2, err := fsmtRestore(t, fsmtCell, fsmtSnapshotBytes(t, h.f))
	if err != nil {
		t.Fatal(err)
	}
	fsmtCheckKids(t, f2)
	if got, _ := pageAll(t, f2, s, dh, DirQuery{Limit: 7}); !slices.Equal(got, want) {
		t.Fatalf("after restore: %q, want %q", got, want)
	}
	// Emptying a directory leaves it as a restore would.
	for _, n := range want {
		hd := h.mustOpen(s, "d/"+n, fsmtRW)
		wantOK(t, "delete "+n, h.do(s, Command{Payload: &DeleteArgs{Handle: hd}}))
	}
	fsmtCheckKids(t, h.f)
	if got, pages := pageAll(t, h.f, s, dh, DirQuery{Limit: 7}); len(got) != 0 || pages != 1 {
		t.Fatalf("empty directory: %q in %d pages", got, pages)
	}
}

// Listings and child events name only children the caller may read or
// write (as Open reports the others absent); filtering happens after the
// cursor, so hidden children never end a page early or become a cursor.
// An ACL change of a child, or a create, rewrite or delete of an ACL file
// a child names, counts as a change of the parent's listing.
func TestFSMReadDirHidesChildren(t *testing.T) {
	h := newFSMT(t)
	root := h.sessionOf("root")
	bob := h.sessionOf("bob")
	mk := func(rel string, flags uint32, contents string) uint64 {
		t.Helper()
		r := h.aclDo(root, "root", Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC | flags, Contents: []byte(contents)}})
		aclWant(t, "create "+rel, r, KindNone)
		return r.Handle
	}
	setACL := func(hd uint64, a ACLNames) {
		t.Helper()
		aclWant(t, "SetACL", h.aclDo(root, "root", Command{Payload: &SetACLArgs{Handle: hd, ACL: &a}}), KindNone)
	}
	mk("acl", FlagDirectory, "")
	team := mk("acl/team", 0, "alice\n")
	mk("acl/bobw", 0, "bob\n")
	mk("acl/none", 0, "# nobody\n")
	mk("d", FlagDirectory, "")
	// Visible to bob: v*, w (write-only); hidden: h*.
	var hidden []uint64
	for _, n := range []string{"a-h", "b-v", "c-h", "d-h", "e-v", "f-w", "g-h"} {
		hd := mk("d/"+n, 0, "")
		switch n[2] {
		case 'h':
			setACL(hd, ACLNames{Read: "team", Write: "team"})
			hidden = append(hidden, hd)
		case 'w':
			setACL(hd, ACLNames{Read: "none", Write: "bobw"})
		}
	}
	dh := h.mustOpen(bob, "d", FlagRead)
	for _, limit := range []int{1, 2, 100} {
		got, pages := pageAll(t, h.f, bob, dh, DirQuery{Limit: limit, Principal: "bob"})
		if want := []string{"b-v", "e-v", "f-w"}; !slices.Equal(got, want) || pages != (3+limit-1)/limit {
			t.Fatalf("bob, limit %d: %q in %d pages, want %q", limit, got, pages, want)
		}
	}
	if got, _ := pageAll(t, h.f, bob, dh, DirQuery{Limit: 2, Principal: "admin", Admin: true}); len(got) != 7 {
		t.Fatalf("the admin lists %q, want all 7", got)
	}
	if got, _ := pageAll(t, h.f, bob, dh, DirQuery{Limit: 2, Principal: "alice"}); !slices.Equal(got, []string{"a-h", "b-v", "c-h", "d-h", "e-v", "g-h"}) {
		t.Fatalf("alice lists %q", got)
	}

	// Child events carry the child's ACL, also once it is gone.
	hd := hidden[0]
	aclWant(t, "delete a-h", h.aclDo(root, "root", Command{Payload: &DeleteArgs{Handle: hd}}), KindNone)
	removed := h.changesOf(ChangeChildRemoved)
	if len(removed) != 1 || removed[0].Child != "a-h" || removed[0].ChildACL.Names.Read != "team" {
		t.Fatalf("child removed: %+v", removed)
	}
	if h.f.ChildVisible(bob, removed[0].ChildACL, "root") {
		t.Fatal("bob may see the removed hidden child")
	}
	if !h.f.ChildVisible(root, removed[0].ChildACL, "root") {
		t.Fatal("the admin may not see the removed child")
	}
	visible := acl.NodeACL{Names: acl.Names{Read: "none", Write: "bobw"}}
	if !h.f.ChildVisible(bob, visible, "root") {
		t.Fatal("bob may not see a child he may write")
	}

	// What invalidates d's listing.
	affects := func(what string, c Command, want bool) {
		t.Helper()
		got := slices.Contains(h.f.AffectedPaths(&c), fsmtPath("d"))
		if got != want {
			t.Fatalf("%s: affects d's listing %v, want %v", what, got, want)
		}
	}
	affects("SetACL of a child", Command{Payload: &SetACLArgs{Handle: hidden[1], ACL: &ACLNames{}}}, true)
	affects("rewrite of an ACL file a child names", Command{Payload: &SetContentsArgs{Handle: team, Contents: []byte("bob\n")}}, true)
	affects("delete of an ACL file a child names", Command{Payload: &DeleteArgs{Handle: team}}, true)
	other := mk("acl/other", 0, "bob\n")
	affects("rewrite of an ACL file no child names", Command{Payload: &SetContentsArgs{Handle: other, Contents: []byte("x\n")}}, false)
	affects("create of an ACL file a child names", Command{Payload: &OpenArgs{Path: fsmtPath("acl/later"), Flags: fsmtRWC}}, false)
	setACL(hidden[1], ACLNames{Read: "later", Write: "later"})
	affects("create of an ACL file a child names", Command{Payload: &OpenArgs{Path: fsmtPath("acl/later"), Flags: fsmtRWC}}, true)
}

// fsmtBigDir builds an FSM with a directory of n children created in a
// random order, and returns the driver, the session and a handle on it.
// With hidden, the directory (so every child) names an ACL file that
// lists only alice, for read and write.
func fsmtBigDir(b *testing.B, n int, hidden bool) (*fsmtH, uint64, uint64) {
	h := newFSMT(b)
	s := h.session()
	dh := h.mustOpen(s, "d", fsmtRWC|FlagDirectory)
	if hidden {
		h.mustOpen(s, "acl", fsmtRWC|FlagDirectory)
		if r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("acl/team"), Flags: fsmtRWC, Contents: []byte("alice\n")}}); r.Err != nil {
			b.Fatal(r.Err)
		}
		if r := h.do(s, Command{Payload: &SetACLArgs{Handle: dh, ACL: &ACLNames{Read: "team", Write: "team"}}}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	for _, i := range rand.New(rand.NewPCG(3, 4)).Perm(n) {
		r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("d/job-%06d-%021d", i, i)), Flags: fsmtRWC | FlagDirectory}})
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	return h, s, dh
}

// BenchmarkFSMReadDirPage: one page of 4096 from a random cursor in a
// directory of 100,000 children (what the master does per ReadDir call),
// the whole listing in pages, one create into that directory at a random
// place in name order, and the worst page: a caller who may see none of
// the 100,000 children, so one page checks the ACLs of all of them.
func BenchmarkFSMReadDirPage(b *testing.B) {
	const n = 100_000
	b.Run("HiddenScan", func(b *testing.B) {
		h, s, dh := fsmtBigDir(b, n, true)
		b.ReportAllocs()
		for b.Loop() {
			p, err := h.f.ReadDirPage(s, dh, DirQuery{Limit: 4096, Principal: "bob"})
			if err != nil || len(p.Entries) != 0 || p.More {
				b.Fatal(p, err)
			}
		}
	})
	h, s, dh := fsmtBigDir(b, n, false)
	b.Run("Page4096", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(5, 6))
		b.ReportAllocs()
		for b.Loop() {
			i := rng.IntN(n)
			p, err := h.f.ReadDirPage(s, dh, DirQuery{After: fmt.Sprintf("job-%06d", i), Limit: 4096, MaxBytes: 512 << 10, EntryOverhead: 8})
			if err != nil || len(p.Entries) == 0 {
				b.Fatal(p, err)
			}
		}
	})
	b.Run("WholeListing", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ents, err := h.f.ReadDir(s, dh); err != nil || len(ents) != n {
				b.Fatal(len(ents), err)
			}
		}
	})
	b.Run("CreateChild", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(7, 8))
		b.ReportAllocs()
		for b.Loop() {
			i := rng.IntN(1 << 30)
			r := h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath(fmt.Sprintf("d/job-%06d-x%d", i%n, i)), Flags: fsmtRWC}})
			if r.Err != nil && r.Err.Kind != KindExists {
				b.Fatal(r.Err)
			}
		}
	})
}
