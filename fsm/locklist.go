package fsm

import (
	"sort"
	"strings"

	"lockcell/acl"
)

// LockWaiterView is one queued Acquire as a listing reports it, in queue
// order: its session, that session's principal and declared identity, the
// mode asked for, and Since, when it was queued (Unix ns; 0 when it was
// queued before waits were timed).
type LockWaiterView struct {
	Session   uint64
	Principal string
	Identity
	Mode  uint8
	Since int64
}

// LockListing is one lock as Locks reports it: the first perLock holders
// and waiters (HolderCount and WaiterCount count them all) and the end of
// its lock-delay (Unix ns; 0 when none was ever imposed).
type LockListing struct {
	Path           string
	Mode           uint8
	Gen            uint64
	Holders        []LockHolderView
	HolderCount    int
	Waiters        []LockWaiterView
	WaiterCount    int
	LockDelayUntil int64
	// SemLimit is a semaphore's permit count (0: a plain lock).
	SemLimit uint32
}

// Locks lists, in name order, every lock at prefix or below it that is
// held or waited for and that principal may read (the admin may read
// everything): at most max of them, and more reports that others matched.
// A lock the caller may not read is left out without a trace, as a read
// of it would be refused.
func (v View) Locks(prefix, principal string, admin bool, max, perLock int) (out []LockListing, more bool) {
	f := v.f
	var names []string
	for p, n := range f.nodes {
		if len(n.Holders) == 0 && len(n.Waiters) == 0 {
			continue
		}
		if p != prefix && !strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/") {
			continue
		}
		if f.check(principal, admin, n, acl.Read) != nil {
			continue
		}
		names = append(names, p)
	}
	sort.Strings(names)
	if len(names) > max {
		names, more = names[:max], true
	}
	out = make([]LockListing, 0, len(names))
	for _, p := range names {
		n := f.nodes[p]
		lv := LockListing{Path: p, Mode: n.LockMode, Gen: n.LockGen, Holders: v.LockHolders(p, perLock),
			HolderCount: len(n.Holders), WaiterCount: len(n.Waiters), LockDelayUntil: n.LockDelayUntil, SemLimit: n.SemLimit}
		lv.Waiters = v.LockWaiters(p, perLock)
		out = append(out, lv)
	}
	return out, more
}

// LockWaiters returns up to limit waiters for the lock on the node at
// path, in queue order, with their sessions' principals; nil when nobody
// waits or there is no such node. Like LockHolders it checks no
// permission: the caller decided, in the same View, that it may read the
// node.
func (v View) LockWaiters(path string, limit int) []LockWaiterView {
	n := v.f.nodes[path]
	if n == nil || len(n.Waiters) == 0 || limit <= 0 {
		return nil
	}
	out := make([]LockWaiterView, 0, min(len(n.Waiters), limit))
	for _, w := range n.Waiters[:min(len(n.Waiters), limit)] {
		wv := LockWaiterView{Session: w.Session, Mode: w.Mode, Since: w.Since}
		if s := v.f.sessions[w.Session]; s != nil {
			wv.Principal, wv.Identity = s.Principal, s.identity()
		}
		out = append(out, wv)
	}
	return out
}
