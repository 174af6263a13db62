package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TopCreators picks, from any counts, exactly the first k principals of a
// full sort (most first, ties by name), leaving out nodes with no creator:
// what QuotaUsage shows the admin as the cell's biggest principals.
func TestTopCreatorsMatchesASort(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := NewFSM("c", nil)
		names := rapid.SliceOfDistinct(rapid.StringMatching(`[a-e]{0,2}`), rapid.ID[string]).Draw(t, "principals")
		var all []CreatorUsage
		for _, p := range names {
			o := owned{nodes: rapid.Int64Range(1, 5).Draw(t, "nodes"), bytes: rapid.Int64Range(0, 5).Draw(t, "bytes")}
			f.usage.byCreator[p] = o
			if p != "" {
				all = append(all, CreatorUsage{Principal: p, Usage: Usage{Nodes: o.nodes, ContentBytes: o.bytes}})
			}
		}
		k := rapid.IntRange(0, 7).Draw(t, "k")
		byNodes, byBytes := View{f}.TopCreators(k)
		sorted := func(by func(CreatorUsage) int64) []CreatorUsage {
			s := slices.Clone(all)
			slices.SortFunc(s, func(a, b CreatorUsage) int {
				return cmp.Or(cmp.Compare(by(b), by(a)), cmp.Compare(a.Principal, b.Principal))
			})
			return s[:min(k, len(s))]
		}
		if want := sorted(func(u CreatorUsage) int64 { return u.Nodes }); !slices.Equal(byNodes, want) && len(want)+len(byNodes) > 0 {
			t.Fatalf("top %d by nodes: %+v, want %+v", k, byNodes, want)
		}
		if want := sorted(func(u CreatorUsage) int64 { return u.ContentBytes }); !slices.Equal(byBytes, want) && len(want)+len(byBytes) > 0 {
			t.Fatalf("top %d by bytes: %+v, want %+v", k, byBytes, want)
		}
	})
}

// BenchmarkTopCreators measures the admin's QuotaUsage top lists, which
// hold the state's read lock (so hold off applies) for one step per
// principal that created nodes: here 100,000 of them (a cell at the
// default node quota can have up to a million, each with one node).
func BenchmarkTopCreators(b *testing.B) {
	f := NewFSM("c", nil)
	for i := range 100_000 {
		f.usage.byCreator[fmt.Sprintf("principal-%06d", i)] = owned{nodes: int64(i%97 + 1), bytes: int64(i % 1013)}
	}
	b.ReportAllocs()
	for b.Loop() {
		View{f}.TopCreators(5)
	}
}
