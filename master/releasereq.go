package master

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// Cooperative revocation: a waiter (or the admin) asks the holders of a
// lock to let go, and each holding handle's session is sent
// EventReleaseRequested with the requester and its reason. It is advice,
// not a command: nothing is replicated and nothing is freed, so a request
// lives only in this master's memory. A request queued for a holder that
// has not fetched it when the master fails over is lost with the queue
// (the requester's call succeeded; it may ask again, and the holder of a
// lock it has been asked to give up gets at most one more event), and the
// rate limit starts afresh under the new master.

// releaseInterval is how often one session may ask the holders of one lock.
const releaseInterval = wire.RequestReleaseIntervalMillis * time.Millisecond

// requestRelease serves RequestRelease. The caller names its own handle on
// the lock's node and needs the write permission there (the one a lock
// needs), or to be the admin; a caller that may neither read nor write the
// node is told it does not exist, as Open would. The holders are those of
// the state after VerifyLeader, so an ACL change or a release acknowledged
// before the call binds it. Every request that asks holders is one audit
// line with the reason and the sessions asked.
func (e *lockEndpoint) requestRelease(ctx context.Context, c *call, req *wire.RequestReleaseRequest) (*wire.RequestReleaseResponse, error) {
	if len(req.Reason) > wire.MaxReleaseReason || !utf8.ValidString(req.Reason) {
		return nil, wire.Errorf(wire.CodeBadRequest, "a release request's reason must be valid UTF-8 of at most %d bytes", wire.MaxReleaseReason)
	}
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	var target struct { // what one view of the state decided
		path, principal string
		gen             uint64
		holders         []fsm.Holder
		canRead         bool
	}
	err := e.r.view(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		hv, err := v.LookupHandle(c.h.Session, req.Handle)
		if err != nil {
			return err
		}
		path, admin := hv.Handle.Path, c.isAdmin()
		c.path = path
		readErr := v.Allowed(path, c.caller.Principal, admin, acl.Read)
		if writeErr := v.Allowed(path, c.caller.Principal, admin, acl.Write); writeErr != nil {
			if readErr != nil {
				return wire.Errorf(wire.CodeNotFound, "%s does not exist", path)
			}
			return wire.Errorf(wire.CodePermission, "%s: asking its holders to let go needs the write permission, which its lock needs", path)
		}
		target.path, target.canRead = path, readErr == nil
		target.principal, _ = v.SessionPrincipal(c.h.Session)
		target.holders, target.gen = v.HolderHandles(path)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if wait, ok := e.asks.allow(c.h.Session, target.path, e.cfg.Clock.Now()); !ok {
		return nil, wire.Errorf(wire.CodeTooMany, "%s: session %d asked its holders less than %v ago; ask again in %v",
			target.path, c.h.Session, releaseInterval, wait.Round(time.Millisecond))
	}
	var asked []uint64
	for _, ho := range target.holders {
		if ho.Handle == req.Handle {
			continue // the requester holds it through this very handle
		}
		ev := wire.Event{Kind: wire.EventReleaseRequested, Path: target.path, Handle: ho.Handle, Gen: target.gen,
			Reason: req.Reason, From: c.h.Session, FromPrincipal: target.principal}
		if e.sess.ask(ho.Session, ev) {
			asked = append(asked, ho.Session)
		}
	}
	e.cfg.Audit.Info("audit", "principal", c.caller.Principal, "op", c.h.Method.String(), "path", target.path,
		"session", c.h.Session, "reason", req.Reason, "asked_sessions", asked, "result", "ok")
	n := uint32(len(asked))
	if !target.canRead {
		n = min(n, 1) // the holders are a reader's to count
	}
	return &wire.RequestReleaseResponse{Asked: n}, nil
}

// ask queues a release request for a holder's session as observe queues
// handle events: numbered, counted against the event byte budgets, waking
// its parked KeepAlive, and not queued once the session has as many
// events waiting as it may or the budgets are full (then, as for any
// handle event, an overflow says so). It reports whether the event was
// queued.
func (ss *sessions) ask(session uint64, ev wire.Event) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.leases[session]
	if !ss.active || l == nil || l.closed {
		return false
	}
	return ss.queueHandleEventLocked(session, l, ev)
}

// releaseAsks is RequestRelease's rate limit: when each session last asked
// the holders of each lock. Its mutex is a leaf. Entries older than the
// interval are swept once the table has doubled since the last sweep, so
// it holds about the asks of the last interval, however many there were
// before.
type releaseAsks struct {
	mu      sync.Mutex
	last    map[releaseAsk]time.Time
	sweepAt int
}

type releaseAsk struct {
	session uint64
	path    string
}

// minSweep is the table size below which stale entries are left alone.
const minSweep = 1024

// allow records that session asks the holders of path at now, unless it
// did less than releaseInterval ago: then it reports how long until it
// may.
func (r *releaseAsks) allow(session uint64, path string, now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := releaseAsk{session, path}
	if at, ok := r.last[k]; ok {
		if since := now.Sub(at); since < releaseInterval {
			return releaseInterval - since, false
		}
	}
	if r.last == nil {
		r.last = map[releaseAsk]time.Time{}
	}
	if len(r.last) >= max(r.sweepAt, minSweep) {
		for k, at := range r.last {
			if now.Sub(at) >= releaseInterval {
				delete(r.last, k)
			}
		}
		r.sweepAt = 2 * len(r.last)
	}
	r.last[k] = now
	return 0, true
}
