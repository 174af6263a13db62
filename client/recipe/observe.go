package recipe

import (
	"bytes"
	"context"
	"errors"
	"path"
	"time"

	"lockcell/client"
)

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
	// the client's sentinels (client.ErrPermission,
	// client.ErrInvalidName...). Observe reports it once and ends.
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
// freed while the client's cache was off). With the cache on, a lock
// freed or taken reaches Observe when the master invalidates the file, on
// the next KeepAlive reply (client.Client.WatchInvalidations): the
// invalidation comes before the change is applied, so Observe reads again
// at once and, as long as the master will not let it cache the file (the
// change is still in flight), again after 20 ms, doubling up to
// ObserveRecheck.
const ObserveRecheck = time.Second

// Observe reports the leaders of the election on name (see Campaign) as
// they change: the first value is the state when it starts, each later one
// a state that differs from the one before (a new leader, a new identity
// or hold of the leader, or no leader after a leader). Values are
// coalesced: a reader that falls behind gets the latest state, never a
// stale one, and may miss states in between; the last state is never
// missed. Observe re-reads the file whenever its handle hears of a change
// (a lock granted, contents written, the file deleted), of a lost event
// (Overflow), of a fail-over (Reannounce), when the master invalidates
// the client's cached copy (a lock freed), and at least every
// ObserveRecheck; so a leader that resigns or whose session fails is
// followed by NoLeader at least until its lock-delay has passed and the
// next candidate has written its identity.
//
// The channel is closed when ctx ends, when the Client is closed or its
// session expires (with no further value: the Client's own events say
// why; a Client that goes on with a new session after expiry is followed
// on it), or after a value whose Err says why the election could not be
// read (permission, a bad name). Reading needs read permission on name;
// Observe never campaigns.
func Observe(ctx context.Context, c *client.Client, name string) <-chan LeaderChange {
	name = client.ResolveName(c.Cell(), name)
	out := make(chan LeaderChange, 1)
	// Both watches are set before the first read, so no change after it
	// goes unheard. A missing file's creation invalidates its directory
	// to a client that cached the absence.
	inval, unwatch := c.WatchInvalidations(name)
	created, unwatchDir := c.WatchInvalidations(path.Dir(name))
	go func() {
		defer close(out)
		defer unwatch()
		defer unwatchDir()
		observe(ctx, c, name, out, inval, created)
	}()
	return out
}

// observe is Observe's goroutine: it owns the handle it reads through,
// and ends with ctx or the Client (the watches' channels close with it).
func observe(ctx context.Context, c *client.Client, name string, out chan<- LeaderChange, inval, created <-chan struct{}) {
	var h *client.Handle
	defer func() {
		if h != nil {
			h.Close()
		}
	}()
	recheck := make(chan struct{}, 1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	sess := c.Session()
	var last, pending *LeaderChange
	stale := true
	soon := time.Duration(0) // the quick re-check's wait, while one is due
	for {
		if stale {
			stale = false
			st, ok, watched := readElection(ctx, c, &h, name)
			if ctx.Err() != nil {
				return
			}
			if ok && (last == nil || !st.same(*last)) {
				last, pending = &st, &st
			}
			if st.Err != nil && sessionOver(st.Err) {
				// The Client was closed, or its session ended: a call
				// racing Close hears of it either way. A Client that
				// went on with a new session is followed on it.
				if now := c.Session(); now != 0 && now != sess {
					sess, stale = now, true
					if h != nil {
						h.Close()
						h = nil
					}
					continue
				}
				return
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
			if watched {
				soon = 0
			} else {
				soon = min(max(2*soon, 20*time.Millisecond), ObserveRecheck)
				wait = soon
			}
			timer = time.AfterFunc(wait, func() {
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
		var evs <-chan client.Event
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
		case _, ok := <-inval:
			if !ok {
				return // the Client was closed
			}
			stale = true
		case _, ok := <-created:
			if !ok {
				return
			}
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
// Other errors are returned in Err. watched says the read came from, or
// filled, the cache: the master will invalidate it before the file
// changes, and that invalidation wakes Observe.
func readElection(ctx context.Context, c *client.Client, h **client.Handle, name string) (st LeaderChange, ok, watched bool) {
	now := time.Now()
	if *h == nil {
		nh, err := c.Open(ctx, name, client.Read, client.WithEvents(client.OnContentsModified|client.OnLockAcquired|client.OnHandleInvalid))
		switch {
		case errors.Is(err, client.ErrNotFound):
			return LeaderChange{NoLeader: true, Time: now}, true, false
		case err != nil:
			st, ok = electionErr(err, now)
			return st, ok, false
		}
		*h = nh
	}
	data, stat, watched, err := (*h).GetContentsAndStatWatched(ctx)
	switch {
	case errors.Is(err, client.ErrHandleInvalid): // deleted: reopen on the next read
		(*h).Close()
		*h = nil
		return LeaderChange{NoLeader: true, Time: now}, true, false
	case err != nil:
		st, ok = electionErr(err, now)
		return st, ok, false
	case !leads(stat): // as in Leader
		return LeaderChange{NoLeader: true, Generation: stat.LockGen, ContentGen: stat.ContentGen, Time: now}, true, watched
	}
	return LeaderChange{Leader: data, Generation: stat.LockGen, ContentGen: stat.ContentGen, Time: now}, true, watched
}

// sessionOver reports whether err says the Client's session is over:
// closed by the application, or expired.
func sessionOver(err error) bool {
	return errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrSessionExpired) || errors.Is(err, client.ErrUnknownSession)
}

// electionErr is readElection's answer to a failed read.
func electionErr(err error, now time.Time) (LeaderChange, bool) {
	if errors.Is(err, client.ErrNoMaster) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return LeaderChange{}, false
	}
	return LeaderChange{NoLeader: true, Err: err, Time: now}, true
}
