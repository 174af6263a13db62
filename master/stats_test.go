package master

import (
	"strconv"
	"testing"
)

// grantCounts remembers a bounded number of names however many are
// locked, and a lock granted often stays on top through a flood of names
// granted once.
func TestGrantCountsBounded(t *testing.T) {
	var g grantCounts
	for i := range 500 {
		g.note("/ls/t/hot")
		g.note("/ls/t/warm" + strconv.Itoa(i%2))
	}
	for i := range 5 * maxCountedLocks {
		g.note("/ls/t/once" + strconv.Itoa(i))
		if i%100 == 0 {
			g.note("/ls/t/hot")
		}
	}
	if n := len(g.n); n > maxCountedLocks {
		t.Fatalf("%d names remembered, bound %d", n, maxCountedLocks)
	}
	top := g.top(3)
	if len(top) != 3 || top[0].Name != "/ls/t/hot" || top[0].Grants < 2 {
		t.Fatalf("top grants: %+v", top)
	}
}
