package fsm

import (
	"lockcell/acl"
)

// HandleView is what a read needs to know about an open handle and its
// node, copied out under the FSM's read lock. Contents alias the stored
// slice, which is never mutated in place.
type HandleView struct {
	Handle   Handle
	Contents []byte
	Stat     Stat
}

// DirEntry is one child in a directory listing.
type DirEntry struct {
	Name string
	Dir  bool
}

// LookupHandle is View.LookupHandle under a read lock of its own.
func (f *FSM) LookupHandle(session, handle uint64) (HandleView, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.LookupHandle(session, handle)
}

// ReadDir lists every child of the directory the handle names, in name
// order, as the admin sees them (no child is left out). The master lists
// through ReadDirPage, which pages and hides what a caller may not see.
func (f *FSM) ReadDir(session, handle uint64) ([]DirEntry, error) {
	var out []DirEntry
	q := DirQuery{Limit: 1 << 16}
	for {
		p, err := f.ReadDirPage(session, handle, q)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Entries...)
		if !p.More {
			return out, nil
		}
		q.After = p.Entries[len(p.Entries)-1].Name
	}
}

// DirQuery selects one page of a directory's listing.
type DirQuery struct {
	// After: only children whose names sort strictly after it ("" lists
	// from the start). It need not name a child.
	After string
	// Limit bounds the page's entries (at least 1 is used).
	Limit int
	// MaxBytes, when positive, ends the page before the sum of
	// len(name)+EntryOverhead over its entries would exceed it; the first
	// entry is always taken, so a page with More is never empty.
	MaxBytes      int
	EntryOverhead int
	// Principal, when set and not Admin, is whose view the page is: a
	// child that principal may neither read nor write is left out, as
	// Open reports it absent.
	Principal string
	Admin     bool
}

// DirPage is one page of a listing: entries in name order, and whether
// further children (visible to the query's principal) follow the last.
type DirPage struct {
	Entries []DirEntry
	More    bool
}

// ReadDirPage is View.ReadDirPage under a read lock of its own.
func (f *FSM) ReadDirPage(session, handle uint64, q DirQuery) (DirPage, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.ReadDirPage(session, handle, q)
}

// ChildVisible is View.ChildVisible under a read lock of its own.
func (f *FSM) ChildVisible(session uint64, a acl.NodeACL, admin string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.ChildVisible(session, a, admin)
}

// WaitState says where a blocking Acquire (handle, wait seq) stands.
type WaitState uint8

// Where a blocking acquire stands.
const (
	WaitGone    WaitState = iota // neither queued nor holding by that wait
	WaitQueued                   // still in the queue
	WaitGranted                  // holds the lock (by that wait or otherwise)
)

// LockWait is View.LockWait under a read lock of its own.
func (f *FSM) LockWait(session, handle, seq uint64) (WaitState, uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.LockWait(session, handle, seq)
}

// SessionExists is View.SessionExists under a read lock of its own.
func (f *FSM) SessionExists(id uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.SessionExists(id)
}

// SessionIDs is View.SessionIDs under a read lock of its own.
func (f *FSM) SessionIDs() []uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.SessionIDs()
}

// LockDelays is View.LockDelays under a read lock of its own.
func (f *FSM) LockDelays() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.LockDelays()
}

// Counts is View.Counts under a read lock of its own.
func (f *FSM) Counts() (epoch uint64, sessions, nodes int, applied uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.Counts()
}

// CellKey is View.CellKey under a read lock of its own.
func (f *FSM) CellKey() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.CellKey()
}

// FenceValid is View.FenceValid under a read lock of its own.
func (f *FSM) FenceValid(fc *Fence) (bool, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.FenceValid(fc)
}

// HeldLock is View.HeldLock under a read lock of its own.
func (f *FSM) HeldLock(session, handle uint64) (Fence, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.HeldLock(session, handle)
}

// AffectedPaths is View.AffectedPaths under a read lock of its own.
func (f *FSM) AffectedPaths(cmd *Command) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.AffectedPaths(cmd)
}

// addACLDependents adds what creating, rewriting or deleting the file at
// path changes if it is an ACL file: every node whose read ACL names it
// (a cacher may lose the right to read it) and the parent of every node
// whose read or write ACL names it (the parent's listing shows a child
// only to whom may read or write it, so children appear and vanish).
func (f *FSM) addACLDependents(set map[string]bool, path string) {
	if !f.isACLFile(path) {
		return
	}
	for _, p := range f.namingACLLocked(path) {
		set[p] = true
	}
	name := path[len(f.aclDir())+1:]
	for p, n := range f.nodes {
		if n.ReadACL == name || n.WriteACL == name {
			if parent := parentOf(p); parent != "" {
				set[parent] = true
			}
		}
	}
}

// HandlePath is View.HandlePath under a read lock of its own.
func (f *FSM) HandlePath(session, handle uint64) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.HandlePath(session, handle)
}

// Watchers is View.Watchers under a read lock of its own.
func (f *FSM) Watchers(name string, mask uint32) []Watcher {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.Watchers(name, mask)
}

// Exists is View.Exists under a read lock of its own.
func (f *FSM) Exists(name string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.Exists(name)
}

// SessionView describes a live session for operators.
type SessionView struct {
	ID        uint64
	Client    string
	Principal string
	Created   int64
	Handles   int
	Locks     []string // names whose lock the session holds, sorted
}

// Sessions is View.Sessions under a read lock of its own.
func (f *FSM) Sessions() []SessionView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.Sessions()
}
