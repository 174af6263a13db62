package fsm

import (
	"slices"
	"sort"
	"strings"
)

// dirIndex keeps a directory's children in name order for listings, so a
// page costs O(log n + page) and a create or delete O(log n + dirChunk):
// the names live in sorted chunks of at most dirChunk entries, every name
// of a chunk below every name of the next. One flat sorted slice would
// cost a copy of half the directory per create in random order (~50 µs at
// 100,000 children, on the FSM's single apply goroutine); a sort per page
// would make a whole listing O(n² log n). It is derived state: built as
// entries apply, rebuilt on restore, never in a snapshot.
type dirIndex struct {
	chunks [][]kid // each non-empty and sorted by name
	n      int
}

// kid is one child: its name, whether it is a directory (which never
// changes while it exists, so an unfiltered page touches no child node),
// and its node, so a listing that filters by ACL reaches the child
// without building its path and looking it up.
type kid struct {
	name string
	dir  bool
	node *Node
}

// dirChunk bounds a chunk: small enough that an insert's copy is a few KiB,
// large enough that the chunk list of a million children is ~4,000 long.
const dirChunk = 256

// Len is the number of children.
func (x *dirIndex) Len() int { return x.n }

// chunkFor returns the index of the chunk that holds name or, if absent,
// where it belongs: the first chunk whose last name is >= name (the last
// chunk for a name above all).
func (x *dirIndex) chunkFor(name string) int {
	c := sort.Search(len(x.chunks), func(i int) bool {
		ch := x.chunks[i]
		return ch[len(ch)-1].name >= name
	})
	return min(c, len(x.chunks)-1)
}

func kidCmp(k kid, name string) int { return strings.Compare(k.name, name) }

// insert adds e unless a child of that name is there already.
func (x *dirIndex) insert(e kid) {
	if len(x.chunks) == 0 {
		x.chunks = [][]kid{{e}}
		x.n = 1
		return
	}
	c := x.chunkFor(e.name)
	ch := x.chunks[c]
	i, found := slices.BinarySearchFunc(ch, e.name, kidCmp)
	if found {
		return
	}
	ch = slices.Insert(ch, i, e)
	x.n++
	if len(ch) <= dirChunk {
		x.chunks[c] = ch
		return
	}
	// Split in halves, each with a backing array of its own, so neither
	// half's growth writes into the other.
	half := len(ch) / 2
	lo := append(make([]kid, 0, dirChunk), ch[:half]...)
	hi := append(make([]kid, 0, dirChunk), ch[half:]...)
	x.chunks[c] = lo
	x.chunks = slices.Insert(x.chunks, c+1, hi)
}

// remove deletes the child called name, if there is one. A chunk left
// under a quarter full merges with a neighbour that has room, so deletes
// cannot leave a long list of tiny chunks.
func (x *dirIndex) remove(name string) {
	if len(x.chunks) == 0 {
		return
	}
	c := x.chunkFor(name)
	ch := x.chunks[c]
	i, found := slices.BinarySearchFunc(ch, name, kidCmp)
	if !found {
		return
	}
	ch = slices.Delete(ch, i, i+1)
	x.n--
	switch {
	case len(ch) == 0:
		x.chunks = slices.Delete(x.chunks, c, c+1)
	case len(ch) < dirChunk/4 && c+1 < len(x.chunks) && len(ch)+len(x.chunks[c+1]) <= dirChunk:
		x.chunks[c] = append(ch, x.chunks[c+1]...)
		x.chunks = slices.Delete(x.chunks, c+1, c+2)
	case len(ch) < dirChunk/4 && c > 0 && len(ch)+len(x.chunks[c-1]) <= dirChunk:
		x.chunks[c-1] = append(x.chunks[c-1], ch...)
		x.chunks = slices.Delete(x.chunks, c, c+1)
	default:
		x.chunks[c] = ch
	}
	if x.n == 0 {
		x.chunks = nil
	}
}

// after returns the position of the first child whose name sorts strictly
// after name: chunk c, offset i (c == len(chunks) when there is none).
func (x *dirIndex) after(name string) (c, i int) {
	c = sort.Search(len(x.chunks), func(i int) bool {
		ch := x.chunks[i]
		return ch[len(ch)-1].name > name
	})
	if c == len(x.chunks) {
		return c, 0
	}
	i = sort.Search(len(x.chunks[c]), func(i int) bool { return x.chunks[c][i].name > name })
	return c, i
}

// entries returns every child in name order (tests and checks).
func (x *dirIndex) entries() []DirEntry {
	var out []DirEntry
	for _, ch := range x.chunks {
		for _, k := range ch {
			out = append(out, DirEntry{Name: k.name, Dir: k.dir})
		}
	}
	return out
}

// addKid records child, called name, in n's listing index.
func (n *Node) addKid(name string, child *Node) {
	n.kids.insert(kid{name: name, dir: child.Dir, node: child})
}

// removeKid drops a deleted child from n's listing index.
func (n *Node) removeKid(name string) { n.kids.remove(name) }
