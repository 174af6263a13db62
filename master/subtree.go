package master

import (
	"context"
	"errors"
	"sync"
	"time"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// Subtree watches (wire.MethodWatchSubtree). A consumer reads the changes
// below a directory from the replicated state's change history
// (fsm/history.go) after the position it holds, and the call waits while
// there is nothing new. The master keeps no registration: what a consumer
// has seen is its position alone, so
//   - nothing is missed at a seam between a replay and live delivery:
//     there is one source, read in position order, and the wait channel is
//     taken in the same view that found nothing (fsm.View.HistoryWake);
//     it is the directory's, closed by a change below it only, so a busy
//     cell wakes the calls a change concerns, not every waiting call;
//   - a fail-over loses nothing: every replica records the same changes
//     at the same positions, and a new master has applied every committed
//     entry before it serves, so the consumer goes on from its position at
//     the new master as if nothing happened, and never sees a change twice;
//   - a consumer that does not read is not an overflow to manage: it holds
//     nothing on the master while it does not call, and when it comes back
//     it reads on from its position, or hears Compacted if the history has
//     moved past it, and re-reads;
//   - a stale master (one deposed but not yet told) can only answer with
//     fewer changes than the new one: its history holds committed entries
//     only, so nothing it reports is ever taken back, and a position it
//     gives is one the new master's history also orders the same way.
//
// What bounds it: calls waiting at once, per session, per principal and
// in the process (subtreePolls), a page of at most wire.MaxSubtreePage
// changes, and a bounded look at the history under each read lock
// (subtreeScan), so a call filtering a long history of changes elsewhere
// never holds off an apply for long. Each call is charged to the
// principal's read ration like any read.

// Bounds of subtree watches (docs/limits.md).
const (
	// maxSubtreePollsPerSession bounds a session's WatchSubtree calls at
	// once: one consumer needs one.
	maxSubtreePollsPerSession = 16
	// maxSubtreePollsPerPrincipal bounds a principal's over its sessions.
	maxSubtreePollsPerPrincipal = 256
	// maxSubtreePolls bounds the process's: each waiting call holds a
	// goroutine and a stream.
	maxSubtreePolls = 8192
	// subtreeScan bounds the history changes one read lock looks at.
	subtreeScan = 4096
)

// subtreePolls counts the WatchSubtree calls in progress. Its mutex is a
// leaf, held only to count.
type subtreePolls struct {
	mu          sync.Mutex
	bySession   map[uint64]int
	byPrincipal map[string]int
	total       int
}

func newSubtreePolls() *subtreePolls {
	return &subtreePolls{bySession: map[uint64]int{}, byPrincipal: map[string]int{}}
}

// enter counts one call of session and principal, or refuses it
// (CodeTooMany) past a bound; the returned func ends it.
func (p *subtreePolls) enter(session uint64, principal string) (func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.bySession[session] >= maxSubtreePollsPerSession:
		return nil, wire.Errorf(wire.CodeTooMany, "session %d has %d WatchSubtree calls in progress (at most %d)", session, p.bySession[session], maxSubtreePollsPerSession)
	case p.byPrincipal[principal] >= maxSubtreePollsPerPrincipal:
		return nil, wire.Errorf(wire.CodeTooMany, "principal %q has %d WatchSubtree calls in progress (at most %d)", principal, p.byPrincipal[principal], maxSubtreePollsPerPrincipal)
	case p.total >= maxSubtreePolls:
		return nil, wire.Errorf(wire.CodeTooMany, "the master has %d WatchSubtree calls in progress (at most %d)", p.total, maxSubtreePolls)
	}
	p.bySession[session]++
	p.byPrincipal[principal]++
	p.total++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.bySession[session]--; p.bySession[session] == 0 {
			delete(p.bySession, session)
		}
		if p.byPrincipal[principal]--; p.byPrincipal[principal] == 0 {
			delete(p.byPrincipal, principal)
		}
		p.total--
	}, nil
}

// inProgress reports the calls counted now (tests).
func (p *subtreePolls) inProgress() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func posOf(p wire.SubtreePos) fsm.Position   { return fsm.Position{Index: p.Index, Ord: p.Ord} }
func wirePos(p fsm.Position) wire.SubtreePos { return wire.SubtreePos{Index: p.Index, Ord: p.Ord} }

// watchSubtree serves MethodWatchSubtree: one page of the changes below
// the handle's directory after req.After that the caller may read,
// waiting up to req.WaitMillis for one.
func (e *fileEndpoint) watchSubtree(ctx context.Context, c *call, req *wire.WatchSubtreeRequest) (*wire.WatchSubtreeResponse, error) {
	done, err := e.polls.enter(c.h.Session, c.caller.Principal)
	if err != nil {
		return nil, err
	}
	defer done()
	kinds := fsm.HistoryKind(req.Kinds) & fsm.HistoryAllKinds
	if req.Kinds == 0 {
		kinds = fsm.HistoryAllKinds
	}
	limit := int(req.Max)
	if limit <= 0 || limit > wire.MaxSubtreePage {
		limit = wire.MaxSubtreePage
	}
	wait := time.Duration(min(req.WaitMillis, wire.MaxSubtreeWait)) * time.Millisecond
	var expired <-chan struct{}
	if wait > 0 {
		ch, stop := after(e.cfg.Clock, wait)
		defer stop()
		expired = ch
	}
	resp := &wire.WatchSubtreeResponse{}
	pos := posOf(req.After)
	final := false // the wait ran out: answer after this look
	for {
		var wake <-chan struct{}
		release := func() {}
		var atEnd bool
		err := e.r.view(func(v fsm.View) error {
			hv, err := v.LookupHandle(c.h.Session, req.Handle)
			if err != nil {
				return err
			}
			dir := hv.Handle.Path
			if !hv.Stat.Dir {
				return wire.Errorf(wire.CodeNotDir, "%s: a subtree watch needs a directory", dir)
			}
			principal, _ := v.SessionPrincipal(c.h.Session)
			if !v.CanRead(c.h.Session, dir, e.cfg.Admin) {
				return wire.Errorf(wire.CodePermission, "%s: %s may not read it", dir, principal)
			}
			c.path = dir
			if req.Now {
				resp.Next, atEnd = wirePos(v.HistoryStats().Progress), true
				return nil
			}
			admin := principal == e.cfg.Admin
			// A change is a read of its node: none for who could not
			// read the node (its ACL names when it changed).
			// Most changes share a few ACLs: each is checked once a view.
			seen := map[acl.NodeACL]bool{}
			keep := func(hc *fsm.HistoryChange) bool {
				ok, known := seen[hc.ACL]
				if !known {
					ok = v.ReadableBy(principal, admin, hc.ACL)
					seen[hc.ACL] = ok
				}
				return ok
			}
			var got []fsm.HistoryChange
			var next fsm.Position
			got, next, err = v.SubtreeChanges(nil, dir, pos, kinds, subtreeScan, limit, keep)
			if errors.Is(err, fsm.ErrHistoryCompacted) {
				resp.Compacted, resp.Next, atEnd = true, wirePos(v.HistoryStats().Progress), true
				return nil
			}
			if err != nil {
				return err
			}
			for _, hc := range got {
				resp.Changes = append(resp.Changes, wire.SubtreeChange{Pos: wirePos(hc.Pos), Path: hc.Path, Kind: uint8(hc.Kind), Generation: hc.Generation})
			}
			atEnd = next == v.HistoryStats().Progress
			pos = next
			resp.Next = wirePos(pos)
			if atEnd && len(got) == 0 && expired != nil && !final {
				// It will wait: for a change applied after this view.
				wake, release = v.HistoryWake(dir)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(resp.Changes) > 0 || resp.Compacted || req.Now || atEnd && (expired == nil || final) {
			return resp, nil
		}
		if !atEnd {
			continue // a long stretch of changes elsewhere: look on, under a new read lock
		}
		var ended bool
		select {
		case <-wake:
		case <-expired:
			// One more look, so the answer's Next is the position now:
			// changes elsewhere moved the log on without waking this
			// call, and a quiet watcher must keep up (progress).
			final = true
			release()
			continue
		case <-ctx.Done():
			ended = true
		case <-c.stop:
			ended = true
		}
		release()
		if ended {
			return resp, nil
		}
	}
}
