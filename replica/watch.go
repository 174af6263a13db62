package replica

import (
	"slices"

	"lockcell/acl"
)

// watchSet is the index of the handles open on one name that asked for
// events: their ids in ascending order with each one's event mask. A
// handle's id is the command index of its Open, so a new handle's id is
// above every id in the set and joins it by an append; a closed handle
// leaves a hole (mask 0) until holes outnumber the live entries and the
// set is compacted, so a close costs O(log n) amortised. The order lets
// the master read the watchers of a name in pages of bounded size
// (View.WatchersAfter), each under a read lock of its own, instead of
// holding off applies for the whole list. Derived state: built as
// entries apply, rebuilt on restore, never in a snapshot.
type watchSet struct {
	ids   []uint64
	masks []uint32 // 0: a hole, the handle closed
	live  int
}

// minWatchHoles is the number of holes below which a set is never
// compacted, so a small set does not copy itself on every close.
const minWatchHoles = 64

// add indexes handle id with its event mask (never 0).
func (w *watchSet) add(id uint64, mask uint32) {
	if n := len(w.ids); n == 0 || w.ids[n-1] < id {
		w.ids, w.masks = append(w.ids, id), append(w.masks, mask)
		w.live++
		return
	}
	// Out of order: only a restore from a snapshot whose handles are not
	// sorted by id could get here.
	i, found := slices.BinarySearch(w.ids, id)
	if found {
		if w.masks[i] == 0 {
			w.live++
		}
		w.masks[i] = mask
		return
	}
	w.ids, w.masks = slices.Insert(w.ids, i, id), slices.Insert(w.masks, i, mask)
	w.live++
}

// remove forgets handle id.
func (w *watchSet) remove(id uint64) {
	i, found := slices.BinarySearch(w.ids, id)
	if !found || w.masks[i] == 0 {
		return
	}
	w.masks[i] = 0
	w.live--
	if holes := len(w.ids) - w.live; holes > minWatchHoles && holes > w.live {
		w.compact()
	}
}

// compact drops the holes.
func (w *watchSet) compact() {
	n := 0
	for i, m := range w.masks {
		if m != 0 {
			w.ids[n], w.masks[n] = w.ids[i], m
			n++
		}
	}
	w.ids, w.masks = slices.Clip(w.ids[:n]), slices.Clip(w.masks[:n])
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
	w.add(h.ID, h.EventMask)
}

// dropWatch forgets h, being closed, from the index.
func (f *FSM) dropWatch(h *Handle) {
	w := f.watch[h.Path]
	if w == nil {
		return
	}
	w.remove(h.ID)
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
// with mask, in handle order, leaving out those on an earlier incarnation
// of the name than the node that has it now. It costs O(handles watching
// name): the master reads them in pages instead (WatchersAfter).
func (v View) Watchers(name string, mask uint32) []Watcher {
	f := v.f
	w := f.watch[name]
	if w == nil {
		return nil
	}
	n := f.nodes[name]
	var out []Watcher
	for i, id := range w.ids {
		if w.masks[i]&mask == 0 {
			continue
		}
		if h := f.handles[id]; h != nil && (n == nil || n.Instance == h.Instance) {
			out = append(out, Watcher{Session: h.Session, Handle: id, Mask: w.masks[i], Instance: h.Instance})
		}
	}
	return out
}

// WatchersAfter appends to dst the handles open on name whose event mask
// shares a bit with mask and whose id is in (after, through], in id
// order, looking at no more than limit entries of the index. It returns
// the extended dst, the id to pass as after for the next page, and
// whether entries may be left. Every handle is listed whatever its node
// instance (Watcher.Instance says it), so a caller can filter by the
// instance the name had at an earlier index. A page costs
// O(log n + limit), so a caller paging through a name's watchers holds
// the read lock for a bounded time at each page.
func (v View) WatchersAfter(dst []Watcher, name string, mask uint32, after, through uint64, limit int) ([]Watcher, uint64, bool) {
	f := v.f
	w := f.watch[name]
	if w == nil {
		return dst, after, false
	}
	i, found := slices.BinarySearch(w.ids, after)
	if found {
		i++
	}
	for n := 0; i < len(w.ids); i, n = i+1, n+1 {
		id := w.ids[i]
		if id > through {
			return dst, after, false
		}
		if n == limit {
			return dst, after, true
		}
		after = id
		if w.masks[i]&mask == 0 {
			continue
		}
		if h := f.handles[id]; h != nil {
			dst = append(dst, Watcher{Session: h.Session, Handle: id, Mask: w.masks[i], Instance: h.Instance})
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
