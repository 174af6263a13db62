package fsm

import (
	"slices"

	"lockcell/acl"
)

// watchSet is the index of the handles open on one name that asked for
// events, grouped by session: the sessions in ascending id, each with its
// handles (handleWatch). The order lets the master read a name's watchers
// in pages of bounded size (View.WatchersAfter), each under a read lock of
// its own, instead of holding off applies for the whole list; the
// grouping lets it pass over a session it has nothing to tell (one whose
// queue already ends in an overflow) in O(1) instead of once per handle,
// so a crowd of handles in sessions that never read their events costs a
// write O(sessions), not O(handles). Derived state: built as entries
// apply, rebuilt on restore, never in a snapshot.
//
// The sessions are a sorted slice: a session's first watch on a name, or
// its last close there, moves the entries after it, up to 16 bytes per
// session watching the name (1.6 MB at the cell's 100,000-session cap,
// tens of microseconds on the apply path). A map with an append-ordered
// list would make both O(1).
type watchSet struct {
	sessions []uint64
	groups   []*handleWatch // parallel to sessions; never empty
	live     int            // handles, over every group
}

// handleWatch is one session's handles in a watchSet: their ids in
// ascending order with each one's event mask and the instance of the node
// it opened. A handle's id is the command index of its Open, so a new
// handle's id is above every id in the group and joins it by an append; a
// closed handle leaves a hole (mask 0) until holes outnumber the live
// entries and the group is compacted, so a close costs O(log n) amortised.
type handleWatch struct {
	ids   []uint64
	masks []uint32 // 0: a hole, the handle closed
	inst  []uint64
	live  int
}

// minWatchHoles is the number of holes below which a group is never
// compacted, so a small group does not copy itself on every close.
const minWatchHoles = 64

// add indexes handle id with its event mask (never 0) and node instance,
// and reports whether it was not indexed already.
func (w *handleWatch) add(id uint64, mask uint32, inst uint64) bool {
	if n := len(w.ids); n == 0 || w.ids[n-1] < id {
		w.ids, w.masks, w.inst = append(w.ids, id), append(w.masks, mask), append(w.inst, inst)
		w.live++
		return true
	}
	// Out of order: only a restore from a snapshot whose handles are not
	// sorted by id could get here.
	i, found := slices.BinarySearch(w.ids, id)
	if found {
		added := w.masks[i] == 0
		if added {
			w.live++
		}
		w.masks[i], w.inst[i] = mask, inst
		return added
	}
	w.ids, w.masks, w.inst = slices.Insert(w.ids, i, id), slices.Insert(w.masks, i, mask), slices.Insert(w.inst, i, inst)
	w.live++
	return true
}

// remove forgets handle id and reports whether it was indexed.
func (w *handleWatch) remove(id uint64) bool {
	i, found := slices.BinarySearch(w.ids, id)
	if !found || w.masks[i] == 0 {
		return false
	}
	w.masks[i] = 0
	w.live--
	if holes := len(w.ids) - w.live; holes > minWatchHoles && holes > w.live {
		w.compact()
	}
	return true
}

// compact drops the holes.
func (w *handleWatch) compact() {
	n := 0
	for i, m := range w.masks {
		if m != 0 {
			w.ids[n], w.masks[n], w.inst[n] = w.ids[i], m, w.inst[i]
			n++
		}
	}
	w.ids, w.masks, w.inst = slices.Clip(w.ids[:n]), slices.Clip(w.masks[:n]), slices.Clip(w.inst[:n])
}

// add indexes handle id of session.
func (w *watchSet) add(session, id uint64, mask uint32, inst uint64) {
	i, found := slices.BinarySearch(w.sessions, session)
	if !found {
		w.sessions, w.groups = slices.Insert(w.sessions, i, session), slices.Insert(w.groups, i, &handleWatch{})
	}
	if w.groups[i].add(id, mask, inst) {
		w.live++
	}
}

// remove forgets handle id of session; a session left with no handle
// leaves the set.
func (w *watchSet) remove(session, id uint64) {
	i, found := slices.BinarySearch(w.sessions, session)
	if !found || !w.groups[i].remove(id) {
		return
	}
	w.live--
	if w.groups[i].live == 0 {
		w.sessions, w.groups = slices.Delete(w.sessions, i, i+1), slices.Delete(w.groups, i, i+1)
	}
}

// addWatch indexes h under its name when it asked for events.
func (f *FSM) addWatch(h *Handle) {
	if h.EventMask == 0 {
		return
	}
	w := f.watch[h.Path]
	if w == nil {
		w = &watchSet{}
		f.watch[h.Path] = w
	}
	w.add(h.Session, h.ID, h.EventMask, h.Instance)
}

// dropWatch forgets h, being closed, from the index.
func (f *FSM) dropWatch(h *Handle) {
	w := f.watch[h.Path]
	if w == nil {
		return
	}
	w.remove(h.Session, h.ID)
	if w.live == 0 {
		delete(f.watch, h.Path)
	}
}

// Watcher is a handle that asked for events on a name.
type Watcher struct {
	Session, Handle uint64
	Mask            uint32
	// Instance is the instance of the node the handle opened: a handle
	// on an earlier incarnation of the name hears nothing of a later one.
	Instance uint64
}

// Watchers lists the handles open on name whose event mask shares a bit
// with mask, by session and then handle, leaving out those on an earlier
// incarnation of the name than the node that has it now. It costs
// O(handles watching name): the master reads them in pages instead
// (WatchersAfter).
func (v View) Watchers(name string, mask uint32) []Watcher {
	f := v.f
	w := f.watch[name]
	if w == nil {
		return nil
	}
	n := f.nodes[name]
	var out []Watcher
	for gi, g := range w.groups {
		for i, id := range g.ids {
			if g.masks[i]&mask != 0 && (n == nil || n.Instance == g.inst[i]) {
				out = append(out, Watcher{Session: w.sessions[gi], Handle: id, Mask: g.masks[i], Instance: g.inst[i]})
			}
		}
	}
	return out
}

// WatchCursor is where a reading of a name's watchers in pages stopped:
// the last session and handle looked at. The zero cursor starts at the
// beginning.
type WatchCursor struct{ Session, Handle uint64 }

// WatchersAfter appends to dst the handles open on name whose event mask
// shares a bit with mask and whose id is at most through, after the
// cursor, by session and then handle, looking at no more than limit
// entries of the index. It returns the extended dst, the cursor to pass
// for the next page, and whether entries may be left.
//
// skip, if not nil, is asked about each session as the page reaches it;
// a session it reports is passed over whole, counting as one entry. It is
// called under the state's read lock: it must not take a lock ordered
// before the state's.
//
// Every handle is listed whatever its node instance (Watcher.Instance says
// it), so a caller can filter by the instance the name had at an earlier
// index. A page costs O(log n + limit), so a caller paging through a
// name's watchers holds the read lock for a bounded time at each page.
func (v View) WatchersAfter(dst []Watcher, name string, mask uint32, after WatchCursor, through uint64, limit int, skip func(session uint64) bool) ([]Watcher, WatchCursor, bool) {
	w := v.f.watch[name]
	if w == nil {
		return dst, after, false
	}
	gi, resume := slices.BinarySearch(w.sessions, after.Session)
	seen := 0
	for ; gi < len(w.sessions); gi++ {
		s, g := w.sessions[gi], w.groups[gi]
		from := uint64(0)
		if resume {
			from, resume = after.Handle, false
		}
		if from == 0 {
			if seen == limit {
				return dst, after, true
			}
			if skip != nil && skip(s) {
				seen++
				after = WatchCursor{s, ^uint64(0)}
				continue
			}
		}
		i, found := slices.BinarySearch(g.ids, from)
		if found {
			i++
		}
		for ; i < len(g.ids); i++ {
			id := g.ids[i]
			if id > through {
				break
			}
			if seen == limit {
				return dst, after, true
			}
			seen++
			after = WatchCursor{s, id}
			if g.masks[i]&mask != 0 {
				dst = append(dst, Watcher{Session: s, Handle: id, Mask: g.masks[i], Instance: g.inst[i]})
			}
		}
	}
	return dst, after, false
}

// WatchSite is a node as its handle events tell of it, read in the state
// just after the entry that changed it: what the master records on the
// apply goroutine so that it can fan the events out later.
type WatchSite struct {
	// Watched: some open handle on the name asked for events.
	Watched bool
	// Exists: a node has the name. Its instance and generations are
	// then the events' position, and ACL its ACL.
	Exists                        bool
	Instance, ContentGen, LockGen uint64
	ACL                           acl.NodeACL
	// LastHandle is the greatest id an open handle can have: the last
	// command index applied. A handle with a greater id was opened later.
	LastHandle uint64
}

// WatchSite returns what handle events about name need of the state now,
// in O(1).
func (v View) WatchSite(name string) WatchSite {
	f := v.f
	s := WatchSite{Watched: f.watch[name] != nil, LastHandle: f.lastIndex}
	if n := f.nodes[name]; n != nil {
		s.Exists, s.Instance, s.ContentGen, s.LockGen, s.ACL = true, n.Instance, n.ContentGen, n.LockGen, nodeACL(n)
	}
	return s
}

// ReadableBy reports whether principal (admin: it is the cell's admin)
// may read a node whose ACL is a. The empty principal, the master's own,
// may read everything. It is View.CanRead for a node's ACL recorded
// earlier (WatchSite.ACL), checked against the ACL files as they are now.
func (v View) ReadableBy(principal string, admin bool, a acl.NodeACL) bool {
	if principal == "" {
		return true
	}
	return acl.Check(aclSource{v.f}, principal, a, acl.Read, policyOf(principal, admin)) == nil
}

// VisibleTo reports whether principal (admin: it is the cell's admin)
// may see a node whose ACL is a, that is read or write it: View.ChildVisible
// by principal rather than session.
func (v View) VisibleTo(principal string, admin bool, a acl.NodeACL) bool {
	if principal == "" {
		return true
	}
	pol := policyOf(principal, admin)
	src := aclSource{v.f}
	return acl.Check(src, principal, a, acl.Read, pol) == nil || acl.Check(src, principal, a, acl.Write, pol) == nil
}
