package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/cell/wire"
)

// ErrNoLeader means nobody leads the election on a name: no candidate
// holds its lock (none campaigns, the leader resigned, or its session
// failed and the lock is under lock-delay), or the candidate that just
// took the lock has not yet written its identity. When the election's file
// does not exist at all the error also matches ErrNotFound.
var ErrNoLeader = errors.New("lockcell: no leader")

// Campaign runs the election recipe on the file name: every candidate
// opens it (creating it if needed) and blocks in Acquire; the winner
// writes identity as the contents and gets the handle back. The candidate
// leads for as long as it holds the lock: Release or Close on the handle
// resigns at once, and so does a clean Client.Close.
//
// When the leader's session fails instead (its process dies, or it loses
// the cell for longer than its lease), no other candidate leads before the
// handle's lock-delay has passed since the session expired (opts may set
// it with WithLockDelay; the cell's default otherwise), so a deposed
// leader that is still running has that long to notice and stop. That is
// why the file is permanent, not ephemeral: an ephemeral file dies with
// its creator's session, and its lock-delay with it. The file outlives the
// election too, holding the last leader's identity; Leader tells from the
// lock whether anyone leads. Candidates need write permission on name.
//
// When the file is deleted under the waiting candidates, they re-create
// it and queue again. Campaign returns only when this candidate leads, ctx
// ends, or the session fails.
func (c *Client) Campaign(ctx context.Context, name string, identity []byte, opts ...OpenOption) (*Handle, error) {
	name = c.abs(name)
	for {
		h, err := c.Open(ctx, name, Read|Write|Create, opts...)
		if err != nil {
			return nil, err
		}
		err = h.Acquire(ctx, Exclusive)
		if err == nil {
			if err = h.SetContents(ctx, identity); err == nil {
				return h, nil
			}
		}
		h.Close()
		if !errors.Is(err, ErrHandleInvalid) {
			return nil, err
		}
	}
}

// Leader returns the identity the current leader of the election on name
// wrote. It fails with ErrNoLeader while nobody holds the election's lock
// exclusively, and also while the holder has not yet written its identity
// (the contents are older than its hold, so they name an earlier leader).
func (c *Client) Leader(ctx context.Context, name string) ([]byte, error) {
	name = c.abs(name)
	h, err := c.Open(ctx, name, Read)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
		}
		return nil, err
	}
	defer h.Close()
	data, st, err := h.GetContentsAndStat(ctx)
	switch {
	case errors.Is(err, ErrHandleInvalid): // deleted since the Open
		return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
	case err != nil:
		return nil, err
	case st.LockMode != Exclusive || st.ContentGen <= st.LockGen:
		// Generations are the indexes of the entries that set them: a
		// leader's identity is written after its Acquire, so contents no
		// newer than the hold are a predecessor's.
		return nil, opErr("leader", name, ErrNoLeader)
	}
	return data, nil
}

// LeaderChange is one state of an election, as Observe reports it.
type LeaderChange struct {
	// Leader is the identity the leader wrote; nil when NoLeader.
	Leader []byte
	// NoLeader is true when nobody leads (see ErrNoLeader): the
	// election's file does not exist, no candidate holds its lock, or the
	// holder has not yet written its identity.
	NoLeader bool
	// Generation is the lock generation of the leader's hold (Stat.LockGen:
	// each new leader has a larger one), and ContentGen the generation of
	// the identity it wrote; zero when the file does not exist.
	Generation uint64
	ContentGen uint64
	// Err is why the election could not be read, as an error matching
	// the client's sentinels (ErrPermission, ErrSessionExpired,
	// ErrClosed...). Observe reports it once and ends.
	Err error
	// Time is when this client read the state.
	Time time.Time
}

// same reports whether b tells nothing new after a: the same leader at
// the same generations, or no leader both times (whatever the file's
// generations did meanwhile: a candidate's lock taken but its identity not
// yet written is still no leader).
func (a LeaderChange) same(b LeaderChange) bool {
	if a.Err != nil || b.Err != nil {
		return false
	}
	if a.NoLeader || b.NoLeader {
		return a.NoLeader == b.NoLeader
	}
	return bytes.Equal(a.Leader, b.Leader) && a.Generation == b.Generation && a.ContentGen == b.ContentGen
}

// ObserveRecheck is how often Observe re-reads an election with no news:
// a safety net for changes that reach it by no event (a leader's lock
// freed while this client's cache was off). With the cache on, a lock
// freed or taken reaches Observe when the master invalidates the file,
// on the next KeepAlive reply: the invalidation comes before the change
// is applied, so Observe reads again at once and, as long as the master
// will not let it cache the file (the change is still in flight), again
// after 20 ms, doubling up to ObserveRecheck.
const ObserveRecheck = time.Second

// Observe reports the leaders of the election on name (see Campaign) as
// they change: the first value is the state when it starts, each later one
// a state that differs from the one before (a new leader, a new identity
// or hold of the leader, or no leader after a leader). Values are
// coalesced: a reader that falls behind gets the latest state, never a
// stale one, and may miss states in between; the last state is never
// missed. Observe re-reads the file whenever its
// handle hears of a change (a lock granted, contents written, the file
// deleted), of a lost event (Overflow), of a fail-over (Reannounce), when
// the master invalidates its cached copy (a lock freed), and at least
// every ObserveRecheck; so a leader that resigns or whose session fails
// is followed by NoLeader at least until its lock-delay has passed and
// the next candidate has written its identity.
//
// The channel is closed when ctx ends, when the Client is closed or its
// session expires, or after a value whose Err says why the election could
// not be read (permission, a bad name). Reading needs read permission on
// name; Observe never campaigns.
func (c *Client) Observe(ctx context.Context, name string) <-chan LeaderChange {
	name = c.abs(name)
	out := make(chan LeaderChange, 1)
	if !c.sess.whileLive(func() { c.wg.Add(1) }) {
		close(out)
		return out
	}
	go c.observe(ctx, name, out)
	return out
}

// observe is Observe's goroutine: it owns the handle it reads through,
// and ends with ctx or the Client (Close waits for it).
func (c *Client) observe(ctx context.Context, name string, out chan<- LeaderChange) {
	defer c.wg.Done()
	defer close(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.base, cancel)()
	var h *Handle
	defer func() {
		if h != nil {
			h.Close()
		}
	}()
	inval, unwatch := c.streams.watchInvalidation(name)
	defer unwatch()
	// A missing file's creation invalidates its directory to a client
	// that cached the absence.
	created, unwatchDir := c.streams.watchInvalidation(wire.Parent(name))
	defer unwatchDir()
	recheck := make(chan struct{}, 1)
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	var last, pending *LeaderChange
	stale := true
	soon := time.Duration(0) // the quick re-check's wait, while one is due
	for {
		if stale {
			stale = false
			st, ok, registered := c.readElection(ctx, &h, name)
			if ctx.Err() != nil {
				return
			}
			if ok && (last == nil || !st.same(*last)) {
				last, pending = &st, &st
			}
			if st.Err != nil {
				select {
				case out <- st:
				case <-ctx.Done():
				}
				return
			}
			if timer != nil {
				timer.Stop()
			}
			// A read the master did not let us cache (a change of the
			// file was in flight, which the read may predate) brings no
			// invalidation of the next change: look again soon.
			wait := ObserveRecheck
			if registered {
				soon = 0
			} else {
				soon = min(max(2*soon, 20*time.Millisecond), ObserveRecheck)
				wait = soon
			}
			timer = c.clock.AfterFunc(wait, func() {
				select {
				case recheck <- struct{}{}:
				default:
				}
			})
		}
		var send chan<- LeaderChange
		var v LeaderChange
		if pending != nil {
			send, v = out, *pending
		}
		var evs <-chan Event
		if h != nil {
			evs = h.Events()
		}
		select {
		case send <- v:
			pending = nil
		case _, ok := <-evs:
			if !ok { // the session is over; the next read says how
				h.Close()
				h = nil
			}
			stale = true
		case <-inval:
			stale = true
		case <-created:
			stale = true
		case <-recheck:
			stale = true
		case <-ctx.Done():
			return
		}
	}
}

// readElection reads the election's state through *h, opening it (with
// the events Observe follows) when it is nil, and closing it when the
// file is gone. It reports false when the read failed in a way waiting
// may heal (no master for now): the state is unknown, not changed.
// Other errors are returned in Err. registered says the read came from,
// or filled, the cache: the master will invalidate it before the file
// changes, and that invalidation wakes Observe.
func (c *Client) readElection(ctx context.Context, h **Handle, name string) (st LeaderChange, ok, registered bool) {
	now := c.clock.Now()
	if *h == nil {
		nh, err := c.Open(ctx, name, Read, WithEvents(OnContentsModified|OnLockAcquired|OnHandleInvalid))
		switch {
		case errors.Is(err, ErrNotFound):
			return LeaderChange{NoLeader: true, Time: now}, true, false
		case err != nil:
			st, ok = electionErr(err, now)
			return st, ok, false
		}
		*h = nh
	}
	data, stat, registered, err := (*h).readCaching(ctx)
	switch {
	case errors.Is(err, ErrHandleInvalid): // deleted: reopen on the next read
		(*h).Close()
		*h = nil
		return LeaderChange{NoLeader: true, Time: now}, true, false
	case err != nil:
		st, ok = electionErr(err, now)
		return st, ok, false
	case stat.LockMode != Exclusive || stat.ContentGen <= stat.LockGen: // as in Leader
		return LeaderChange{NoLeader: true, Generation: stat.LockGen, ContentGen: stat.ContentGen, Time: now}, true, registered
	}
	return LeaderChange{Leader: data, Generation: stat.LockGen, ContentGen: stat.ContentGen, Time: now}, true, registered
}

// readCaching is GetContentsAndStat that also says whether the answer is
// in the cache (served from it, or filled into it).
func (h *Handle) readCaching(ctx context.Context) ([]byte, Stat, bool, error) {
	r, err := h.cachedRead(ctx, "read", kindContents, true, func(fill bool) (cached, bool, error) {
		req := h.request()
		req.Cache = fill
		var resp wire.ContentsResponse
		err := h.do(ctx, "read", wire.MethodGetContentsAndStat, req, &resp)
		return cached{contents: resp.Contents, stat: resp.Stat}, resp.Cacheable, err
	})
	if err != nil {
		return nil, Stat{}, false, err
	}
	return bytes.Clone(r.v.contents), statFrom(r.v.stat), r.kept, nil
}

// electionErr is readElection's answer to a failed read.
func electionErr(err error, now time.Time) (LeaderChange, bool) {
	if errors.Is(err, ErrNoMaster) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return LeaderChange{}, false
	}
	return LeaderChange{NoLeader: true, Err: err, Time: now}, true
}
