package fsm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The rules of semaphores and multi-locks, checked after every entry of
// random runs (acquires blocking and not, single and grouped, releases,
// cancels, closes, session expiries with lock-delay, time passing, the
// master's Grants):
//
//   - a semaphore never has more holders than its permits less the
//     permits held back by a running lock-delay, and its holders'
//     generations are distinct;
//   - waits are granted in arrival order: each entry's grants from a
//     queue are the head of the queue as it was before the entry;
//   - no permit idles while someone waits for it;
//   - a multi-lock is all or nothing: a group waits in every one of its
//     queues or none, and holds every one of its locks or none;
//   - no deadlock: the earliest wait in the cell heads every one of its
//     queues, so it waits only for holders (or a lock-delay).
func TestSemaphoreAndMultiLockRules(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := newFSMT(t)
		var stepChanges []Change // every entry's changes in this step
		// Every name an entry changes is one the master would have
		// invalidated first: AffectedPaths, asked before it applies.
		var affected []string
		var affectedOf Command
		h.record = func(l *logEntry) {
			c, err := DecodeCommand(l.Data)
			if err != nil {
				rt.Fatalf("decode: %v", err)
			}
			affected, affectedOf = h.f.AffectedPaths(c), *c
		}
		h.f.SetObserver(func(_ uint64, ch []Change) {
			stepChanges = append(stepChanges, ch...)
			for _, c := range ch {
				if c.Path != "" && c.Kind != ChangeSessionClosed && c.Kind != ChangeSessionCreated && !slices.Contains(affected, c.Path) {
					rt.Fatalf("%s %+v changed %s (%+v), which AffectedPaths %q left out", affectedOf.Type, affectedOf.Payload, c.Path, c, affected)
				}
			}
		})
		locks := []string{"A", "B", "C"}
		limit := uint32(rapid.IntRange(1, 3).Draw(rt, "limit"))
		type client struct {
			s     uint64
			sem   uint64
			locks map[string]uint64 // name -> handle
		}
		var clients []*client
		newClient := func() *client {
			// Not h.session(): an entry granting several permits takes
			// fresh command indexes, so ids run ahead of the log's.
			r := h.raw(Command{Client: "test", Principal: "p", Payload: &CreateSessionArgs{}})
			if r.Err != nil {
				rt.Fatalf("create session: %v", r.Err)
			}
			c := &client{s: r.Session, locks: map[string]uint64{}}
			delay := time.Duration(rapid.SampledFrom([]int{0, 1, 2}).Draw(rt, "delay")) * time.Second
			c.sem = h.semOpen(c.s, "sem", limit, delay)
			for _, l := range locks {
				r := h.do(c.s, Command{Payload: &OpenArgs{Path: fsmtPath(l), Flags: fsmtRWC, LockDelay: int64(delay)}})
				if r.Err != nil {
					rt.Fatalf("open %s: %v", l, r.Err)
				}
				c.locks[l] = r.Handle
			}
			return c
		}
		for range 4 {
			clients = append(clients, newClient())
		}
		// queuedAt: (session, seq) -> the entry index that queued the wait.
		type wk struct{ s, q uint64 }
		queuedAt := map[wk]uint64{}
		// groups: the handles of each multi-lock request made, by
		// (session, request id).
		groups := map[[2]uint64][]uint64{}

		for step := range rapid.IntRange(10, 80).Draw(rt, "steps") {
			c := rapid.SampledFrom(clients).Draw(rt, "client")
			before := map[string][]Waiter{}
			for _, p := range append([]string{"sem"}, locks...) {
				before[p] = slices.Clone(h.node(p).Waiters)
			}
			action := rapid.IntRange(0, 10).Draw(rt, "action")
			stepChanges = nil
			switch action {
			case 0, 1: // a permit
				wait := rapid.Bool().Draw(rt, "wait")
				r, seq := h.acquire(c.s, c.sem, LockShared, wait)
				if r.Queued {
					queuedAt[wk{c.s, seq}] = h.idx
				}
			case 2:
				h.release(c.s, c.sem)
			case 3, 4: // a multi-lock of a random set
				var hs []uint64
				for _, l := range locks {
					if rapid.Bool().Draw(rt, "in "+l) {
						hs = append(hs, c.locks[l])
					}
				}
				if len(hs) == 0 {
					hs = append(hs, c.locks["A"])
				}
				slices.Sort(hs)
				r, seq := h.multi(c.s, rapid.Bool().Draw(rt, "wait"), hs...)
				groups[[2]uint64{c.s, seq}] = hs
				if r.Queued {
					queuedAt[wk{c.s, seq}] = h.idx
				}
				if r.Granted {
					for _, hd := range hs {
						if n := h.f.nodes[h.f.handles[hd].Path]; len(n.Holders) != 1 || n.Holders[0].Handle != hd {
							rt.Fatalf("a granted multi-lock does not hold %s: %+v", n.Path, n.Holders)
						}
					}
				}
			case 5: // a single exclusive lock, blocking
				l := rapid.SampledFrom(locks).Draw(rt, "lock")
				r, seq := h.acquire(c.s, c.locks[l], LockExclusive, true)
				if r.Queued {
					queuedAt[wk{c.s, seq}] = h.idx
				}
			case 6: // let go of every lock this client holds
				var hs []uint64
				for _, l := range locks {
					hs = append(hs, c.locks[l])
				}
				slices.Sort(hs)
				h.do(c.s, Command{Payload: &ReleaseMultiArgs{Handles: hs}})
			case 7: // withdraw one of this client's waits
				var mine []wk
				for k := range queuedAt {
					if k.s == c.s {
						mine = append(mine, k)
					}
				}
				slices.SortFunc(mine, func(a, b wk) int { return int(a.q) - int(b.q) })
				if len(mine) > 0 {
					k := rapid.SampledFrom(mine).Draw(rt, "wait")
					handle := c.sem
					if g := groups[[2]uint64{k.s, k.q}]; g != nil {
						handle = g[rapid.IntRange(0, len(g)-1).Draw(rt, "part")]
					} else {
						for _, l := range locks {
							for _, w := range h.node(l).Waiters {
								if w.Session == c.s && w.Seq == k.q {
									handle = w.Handle
								}
							}
						}
					}
					h.do(c.s, Command{Payload: &CancelWaitArgs{Handle: handle, WaitSeq: k.q}})
				}
			case 8: // the client's session fails (or closes) and a new one takes its place
				expired := rapid.Bool().Draw(rt, "expired")
				h.raw(Command{Session: c.s, Payload: &CloseSessionArgs{Expired: expired}})
				i := slices.Index(clients, c)
				clients[i] = newClient()
			case 10: // the admin breaks a lock (or a semaphore's permits)
				p := rapid.SampledFrom(append([]string{"sem"}, locks...)).Draw(rt, "break")
				r := h.raw(Command{Principal: "admin", Admin: true, Payload: &BreakLockArgs{Path: fsmtPath(p), Reason: "test"}})
				for _, ho := range r.Broken {
					// A break is the admin's, on one lock: a group it
					// hits holds a part from then on, by design.
					delete(groups, [2]uint64{ho.Session, ho.WaitSeq})
				}
			case 9: // time passes; the master hands off what a lock-delay kept
				h.now += int64(rapid.IntRange(0, 1500).Draw(rt, "ms")) * int64(time.Millisecond)
				for _, p := range append([]string{"sem"}, locks...) {
					h.raw(Command{Payload: &GrantArgs{Path: fsmtPath(p)}})
				}
			}
			var granted []Change
			for _, ch := range stepChanges {
				if ch.Kind == ChangeLockGranted {
					granted = append(granted, ch)
				}
			}
			if err := checkSemMultiRules(h, locks, before, granted, groups); err != nil {
				rt.Fatalf("step %d (action %d): %v", step, action, err)
			}
			// The earliest wait heads every one of its queues.
			var earliest *Waiter
			var earliestAt uint64
			for _, p := range append([]string{"sem"}, locks...) {
				for i, w := range h.node(p).Waiters {
					at, ok := queuedAt[wk{w.Session, w.Seq}]
					if !ok {
						rt.Fatalf("a wait %+v nobody queued", w)
					}
					if earliest == nil || at < earliestAt {
						earliest, earliestAt = &h.node(p).Waiters[i], at
					}
				}
			}
			if earliest != nil {
				for _, p := range append([]string{"sem"}, locks...) {
					for i, w := range h.node(p).Waiters {
						if w.Session == earliest.Session && w.Seq == earliest.Seq && i != 0 {
							rt.Fatalf("the earliest wait %+v is at place %d of %s's queue: it could wait forever", w, i, p)
						}
					}
				}
			}
		}
	})
}

// checkSemMultiRules checks the rules above over the state after one
// entry, given the queues before it and the entry's grants.
func checkSemMultiRules(h *fsmtH, locks []string, before map[string][]Waiter, granted []Change, groups map[[2]uint64][]uint64) error {
	now := h.now
	sem := h.node("sem")
	delayed := 0
	for _, end := range sem.SemDelays {
		if end > now {
			delayed++
		}
	}
	if len(sem.Holders)+delayed > int(sem.SemLimit) {
		return fmt.Errorf("semaphore of %d: %d holders and %d held back", sem.SemLimit, len(sem.Holders), delayed)
	}
	gens := map[uint64]bool{}
	for _, ho := range sem.Holders {
		if ho.Gen == 0 || gens[ho.Gen] {
			return fmt.Errorf("holder generations %+v are not distinct", sem.Holders)
		}
		gens[ho.Gen] = true
	}
	if len(sem.Waiters) > 0 && len(sem.Holders)+delayed < int(sem.SemLimit) {
		return fmt.Errorf("a permit idles with %d waiting (%d holders, %d held back)", len(sem.Waiters), len(sem.Holders), delayed)
	}
	// FIFO: a wait granted from a queue had nobody before it who still
	// waits: those ahead of it were granted or left the queue.
	for _, p := range append([]string{"sem"}, locks...) {
		q, after := before[p], h.node(p).Waiters
		stillWaits := func(w Waiter) bool {
			return slices.ContainsFunc(after, func(o Waiter) bool { return o.Session == w.Session && o.Seq == w.Seq })
		}
		for _, g := range granted {
			if g.Path != fsmtPath(p) || g.Seq == 0 {
				continue
			}
			j := slices.IndexFunc(q, func(w Waiter) bool { return w.Session == g.Session && w.Seq == g.Seq })
			if j < 0 {
				return fmt.Errorf("%s: request %d of session %d granted from the queue without having waited in it: %+v", p, g.Seq, g.Session, q)
			}
			for _, w := range q[:j] {
				if stillWaits(w) {
					return fmt.Errorf("%s: request %d of session %d granted past %+v, who still waits", p, g.Seq, g.Session, w)
				}
			}
		}
	}
	// All or nothing: a group waits in all its queues or none, holds all
	// its locks or none.
	type wk struct{ s, q uint64 }
	waiting, holding := map[wk]int{}, map[wk]int{}
	size := map[wk]int{}
	for _, p := range locks {
		n := h.node(p)
		for _, w := range n.Waiters {
			if w.Group != nil {
				waiting[wk{w.Session, w.Seq}]++
				size[wk{w.Session, w.Seq}] = len(w.Group)
			}
		}
		if n.LockMode == LockFree && len(n.Waiters) > 0 && n.LockDelayUntil <= now && n.Waiters[0].Group == nil {
			return fmt.Errorf("%s is free with a single waiter at its head", p)
		}
	}
	for k, got := range waiting {
		if got != size[k] {
			return fmt.Errorf("group %+v waits in %d of its %d queues", k, got, size[k])
		}
	}
	for _, p := range locks {
		for _, ho := range h.node(p).Holders {
			if ho.WaitSeq != 0 {
				holding[wk{ho.Session, ho.WaitSeq}]++
			}
		}
	}
	for k, got := range holding {
		// Groups are released whole here (a multi-release, a session's
		// end), so a group holding a part holds every part.
		if g := groups[[2]uint64{k.s, k.q}]; g != nil && got != len(g) {
			return fmt.Errorf("group %+v holds %d of its %d locks", k, got, len(g))
		}
	}
	return nil
}
