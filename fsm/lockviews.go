package fsm

import "sort"

// Operators' view of the busiest locks (the status page and the metrics).

// LockView describes one lock in use, for operators.
type LockView struct {
	Path    string
	Mode    uint8 // LockFree, LockExclusive or LockShared
	Holders int
	Waiters int
	// LockGen is the command index of the last grant of the free lock.
	LockGen uint64
	// LockDelayUntil (Unix ns) is when the lock may next be granted, if
	// a failed holder left it under lock-delay.
	LockDelayUntil int64
}

// BusiestLocks returns up to n locks that are held or waited for, most
// waiters first, then most holders, then by name. It looks at every node
// under the state machine's read lock, so callers ration it.
func (f *FSM) BusiestLocks(n int) []LockView {
	f.mu.RLock()
	var out []LockView
	for p, nd := range f.nodes {
		if len(nd.Holders) == 0 && len(nd.Waiters) == 0 {
			continue
		}
		out = append(out, LockView{Path: p, Mode: nd.LockMode, Holders: len(nd.Holders), Waiters: len(nd.Waiters),
			LockGen: nd.LockGen, LockDelayUntil: nd.LockDelayUntil})
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Waiters != b.Waiters {
			return a.Waiters > b.Waiters
		}
		if a.Holders != b.Holders {
			return a.Holders > b.Holders
		}
		return a.Path < b.Path
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// LockViews describes the locks of the named nodes that exist, in the
// order given.
func (f *FSM) LockViews(names []string) []LockView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []LockView
	for _, p := range names {
		if nd := f.nodes[p]; nd != nil {
			out = append(out, LockView{Path: p, Mode: nd.LockMode, Holders: len(nd.Holders), Waiters: len(nd.Waiters),
				LockGen: nd.LockGen, LockDelayUntil: nd.LockDelayUntil})
		}
	}
	return out
}
