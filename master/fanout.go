package master

import (
	"sync"
	"sync/atomic"

	"lockcell/fsm"
	"lockcell/wire"
)

// The handle-event fan-out. A change to a node can concern any number of
// handles: every handle opened WithEvents on it gets an event. Turning the
// change into those events on Raft's apply goroutine made every apply cost
// O(watchers), and a crowd of watchers starved Raft of its apply loop. So
// the observer (on the apply goroutine) only records each change, with
// what of the state the events need from just after the entry, in O(1)
// per change (fanout.record), and hands it to a worker the term owns
// (fanout.run, started by Start, stopped by Stop). The worker reads the
// node's watchers in pages, each under a read lock of its own
// (fsm.View.WatchersAfter), filters them by ACL as before, and queues
// the events under the sessions' lock, a page at a time.
//
// Why the events mean what they meant when the observer made them:
//   - Order per session: the worker takes the changes in log order and
//     queues all of one change's events before the next change's, and it
//     is the only goroutine that queues events made from changes; a
//     session's events are numbered as they are queued.
//   - Position: each event carries the node's instance and generations
//     recorded on the apply goroutine, the state just after the entry, as
//     placeEvent read them before; the events of one change share it.
//   - Who hears: the handles that watched the node at that entry. A
//     handle's id is the command index of its Open, so a handle opened
//     later (id above the entry's last index, WatchSite.LastHandle) is
//     never listed, and one on another incarnation of the name than the
//     node the entry left is skipped, as Watchers skipped it. A handle
//     closed before the worker reaches it, or whose session ended, gets
//     nothing: its stream is closed at the client anyway. A session whose
//     queue holds an overflow event not yet sent is passed over whole, in
//     O(1) whatever its handles (the index is grouped by session): it
//     hears the overflow after this change and re-reads every handle
//     (eventoverflow.go).
//   - ACLs: a watcher hears of the node only if its principal may read it,
//     and of a child only if it may see the child, as before; the node's
//     ACL names are the entry's, the ACL files' contents those of the
//     page's read (at most a few pages later than the entry).
//
// The backlog is bounded (maxFanoutBacklog changes): the apply goroutine
// never waits for the worker. A change that finds it full is not kept;
// its node is remembered (up to maxLostNames of them, then "every node")
// and each session with a handle watching it gets an overflow event once
// the worker catches up, which has the client tell every handle to
// re-read, as when its own queue overflows. An overflow heard after the
// change happened is all the client needs to re-read past it.

// Bounds of the fan-out.
const (
	// maxFanoutBacklog bounds the changes waiting for the worker (each
	// a few hundred bytes: a change, its position and its node's ACL).
	maxFanoutBacklog = 4096
	// maxLostNames bounds the names remembered for an overflow when
	// changes found the backlog full; past it every session is told.
	maxLostNames = 1024
	// fanoutPage bounds the watch index entries one read lock covers, so
	// the worker never holds off an apply for long.
	fanoutPage = 256
)

// fanItem is one change recorded for the fan-out.
type fanItem struct {
	c    fsm.Change
	kind uint8
	mask uint32
	site fsm.WatchSite
	pos  *wire.EventPos // shared by the change's events
	// direct is the one event of a broken lock, for its holder's session
	// whatever its handle asked for.
	direct *sessionEvent
}

// fanout is one term's fan-out: the backlog the observer fills and the
// worker drains. Its mutex is a leaf, never held while reading the state.
type fanout struct {
	s     *Server
	epoch uint64
	lost  *atomic.Uint64 // changes not kept, over every term
	// listed counts the handles the worker has listed over the term: its
	// work, which a session passed over whole does not add to.
	listed atomic.Uint64

	mu       sync.Mutex
	backlog  []fanItem
	lostName map[string]bool
	lostAll  bool
	kick     chan struct{}
}

func newFanout(s *Server, epoch uint64, lost *atomic.Uint64) *fanout {
	return &fanout{s: s, epoch: epoch, lost: lost, lostName: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// fanRead is record's read of the state: what it is given and finds.
// They are pooled, as the observer runs for every write.
type fanRead struct {
	changes []fsm.Change
	items   []fanItem
}

var fanReads = sync.Pool{New: func() any { return new(fanRead) }}

// watchedKind reports whether a change of kind k may make handle events.
func watchedKind(k fsm.ChangeKind) bool {
	_, ok := eventOf[k]
	return ok || k == fsm.ChangeLockBroken
}

// record keeps the changes of one applied entry that may make handle
// events, with what their events need of the state just after the entry:
// O(1) per change, whatever the number of watchers. It runs on Raft's
// apply goroutine and never blocks on the worker.
func (f *fanout) record(changes []fsm.Change) {
	some := false
	for i := range changes {
		if watchedKind(changes[i].Kind) {
			some = true
			break
		}
	}
	if !some {
		return
	}
	r := fanReads.Get().(*fanRead)
	r.changes = changes
	_ = f.s.state.ReadWith(r, func(v fsm.View, arg any) error { // captures nothing: no allocation
		r := arg.(*fanRead)
		for _, c := range r.changes {
			if c.Kind == fsm.ChangeLockBroken {
				e := brokenLockEvent(c) // whatever the handle asked for
				placeEvent(v, e.session, &e.ev)
				r.items = append(r.items, fanItem{direct: &e})
				continue
			}
			e, ok := eventOf[c.Kind]
			if !ok {
				continue
			}
			site := v.WatchSite(c.Path)
			if !site.Watched {
				continue // no handle watches it now: none can hear of this entry
			}
			it := fanItem{c: c, kind: e.kind, mask: e.mask, site: site}
			if site.Exists {
				it.pos = &wire.EventPos{Instance: site.Instance, ContentGen: site.ContentGen, LockGen: site.LockGen}
			}
			r.items = append(r.items, it)
		}
		return nil
	})
	if len(r.items) > 0 {
		f.mu.Lock()
		for _, it := range r.items {
			// A broken lock's one event is kept whatever the backlog:
			// breaks are the admin's, one event each.
			if it.direct == nil && len(f.backlog) >= maxFanoutBacklog {
				f.lost.Add(1)
				if len(f.lostName) < maxLostNames {
					f.lostName[it.c.Path] = true
				} else {
					f.lostAll = true
				}
				continue
			}
			f.backlog = append(f.backlog, it)
		}
		f.mu.Unlock()
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	items := r.items[:0]
	if cap(items) > maxPooledItems {
		items = nil // a session's close can report thousands: not kept
	}
	clear(r.items) // the pool keeps no changes alive
	*r = fanRead{items: items}
	fanReads.Put(r)
}

// backlogLen is how many changes wait for the worker.
func (f *fanout) backlogLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.backlog)
}

// take hands the worker everything recorded so far.
func (f *fanout) take() (items []fanItem, lost map[string]bool, lostAll bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items, f.backlog = f.backlog, nil
	if len(f.lostName) > 0 || f.lostAll {
		lost, lostAll = f.lostName, f.lostAll
		f.lostName, f.lostAll = map[string]bool{}, false
	}
	return items, lost, lostAll
}

// run is the worker: it turns the recorded changes into handle events,
// in order, until stop is closed. The term's wait group counts it.
func (f *fanout) run(stop <-chan struct{}) {
	defer f.s.wg.Done()
	var w fanWork
	for {
		select {
		case <-stop:
			return
		case <-f.kick:
		}
		for {
			items, lost, lostAll := f.take()
			if len(items) == 0 && lost == nil {
				break
			}
			for i := range items {
				if isClosed(stop) {
					return
				}
				w.deliver(f, &items[i], stop)
			}
			if lost != nil {
				w.overflow(f, lost, lostAll, stop)
			}
		}
	}
}

// fanWork is the worker's scratch, reused from change to change.
type fanWork struct {
	watchers []fsm.Watcher
	notes    []sessionEvent
	may      map[string]bool // by principal: may hear of this change
	told     map[uint64]bool // by session: told of an overflow
	// skipFull and skipTold are the skips of WatchersAfter, made once.
	skipFull, skipTold func(session uint64) bool
}

// deliver queues the handle events of one recorded change.
func (w *fanWork) deliver(f *fanout, it *fanItem, stop <-chan struct{}) {
	s := f.s
	if it.direct != nil {
		s.sess.queueEvents(f.epoch, []sessionEvent{*it.direct})
		return
	}
	if w.may == nil {
		w.may = map[string]bool{}
	}
	if w.skipFull == nil {
		// A session with an overflow on its way hears nothing more
		// until it has it (eventoverflow.go).
		w.skipFull = s.sess.overflowPending
	}
	clear(w.may)
	child := it.c.Kind == fsm.ChangeChildAdded || it.c.Kind == fsm.ChangeChildRemoved
	var after fsm.WatchCursor
	for more := true; more; {
		if isClosed(stop) {
			return
		}
		w.notes = w.notes[:0]
		s.read(func(v fsm.View) {
			w.watchers, after, more = v.WatchersAfter(w.watchers[:0], it.c.Path, it.mask, after, it.site.LastHandle, fanoutPage, w.skipFull)
			f.listed.Add(uint64(len(w.watchers)))
			var session uint64 // the watchers come by session: its principal is looked up once
			var principal string
			var live bool
			for _, h := range w.watchers {
				if it.site.Exists && h.Instance != it.site.Instance {
					continue // a handle on an earlier incarnation hears nothing of a later one
				}
				if it.c.Kind == fsm.ChangeLockConflict && h.Handle == it.c.Handle {
					continue // the requester knows
				}
				if h.Session != session {
					session = h.Session
					principal, live = v.SessionPrincipal(session)
				}
				if !live {
					continue // the session ended: it hears nothing more
				}
				may, known := w.may[principal]
				if !known {
					admin := principal == s.cfg.Admin
					// Events are reads: none for who may not read; and
					// as in listings, a child one may neither read nor
					// write is not named.
					may = (!it.site.Exists || v.ReadableBy(principal, admin, it.site.ACL)) &&
						(!child || v.VisibleTo(principal, admin, it.c.ChildACL))
					w.may[principal] = may
				}
				if may {
					w.notes = append(w.notes, sessionEvent{h.Session, wire.Event{Kind: it.kind, Path: it.c.Path,
						Handle: h.Handle, Child: it.c.Child, Pos: it.pos}})
				}
			}
		})
		s.sess.queueEvents(f.epoch, w.notes)
	}
	clear(w.notes) // keep no strings alive
}

// overflow tells the sessions watching the names whose changes were not
// kept (every session, with all) that they missed events: an overflow
// event each, at most one per session.
func (w *fanWork) overflow(f *fanout, lost map[string]bool, all bool, stop <-chan struct{}) {
	s := f.s
	if all {
		s.sess.overflowAll(f.epoch)
		return
	}
	if w.told == nil {
		w.told = map[uint64]bool{}
		w.skipTold = func(session uint64) bool { return w.told[session] }
	}
	clear(w.told)
	for name := range lost {
		var after fsm.WatchCursor
		for more := true; more; {
			if isClosed(stop) {
				return
			}
			w.notes = w.notes[:0]
			s.read(func(v fsm.View) {
				w.watchers, after, more = v.WatchersAfter(w.watchers[:0], name, ^uint32(0), after, ^uint64(0), fanoutPage, w.skipTold)
				for _, h := range w.watchers {
					if w.told[h.Session] {
						continue
					}
					w.told[h.Session] = true
					w.notes = append(w.notes, sessionEvent{h.Session, wire.Event{Kind: wire.EventOverflow, Path: name, Handle: h.Handle}})
				}
			})
			s.sess.queueEvents(f.epoch, w.notes)
		}
	}
	clear(w.notes)
}

// queueEvents queues handle events made in the term of epoch, unless that
// term has ended (queueHandleEventLocked).
func (ss *sessions) queueEvents(epoch uint64, notes []sessionEvent) {
	if len(notes) == 0 {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.active || ss.epoch != epoch {
		return
	}
	for _, n := range notes {
		if l := ss.leases[n.session]; l != nil && !l.closed {
			ss.queueHandleEventLocked(n.session, l, n.ev)
		}
	}
}

// overflowAll queues an overflow event for every live session of the
// term of epoch: it may have missed events on any node.
func (ss *sessions) overflowAll(epoch uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.active || ss.epoch != epoch {
		return
	}
	for id, l := range ss.leases {
		if !l.closed {
			ss.queueHandleEventLocked(id, l, wire.Event{Kind: wire.EventOverflow})
		}
	}
}

// fanoutCounts reports the current term's backlog and the changes not
// kept over every term.
func (s *Server) fanoutCounts() (backlog int, lost uint64) {
	s.mu.Lock()
	fan := s.fan
	s.mu.Unlock()
	if fan != nil {
		backlog = fan.backlogLen()
	}
	return backlog, s.fanLost.Load()
}

// maxPooledItems bounds the items array a fanRead keeps in the pool.
const maxPooledItems = 64
