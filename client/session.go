package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"lockcell/wire"
)

// EventKind names a session or handle event.
type EventKind int

// Session events (docs/spec.md#jeopardy-and-grace, #fail-over), delivered
// on Client.Events only.
const (
	// Jeopardy: the local lease ran out without a KeepAlive reply; the
	// session may or may not survive, and every lock context has ended
	// (Handle.LockContext). Calls keep trying for up to
	// Config.RetryTimeout each; the session hunts for a master until the
	// grace period ends.
	Jeopardy EventKind = iota + 1
	// Safe: a KeepAlive succeeded during the grace period; the session and
	// its handles and locks survived.
	Safe
	// Expired: the grace period ended, or the master declared the session
	// over, and its locks are lost: every lock context has ended before
	// it is delivered. Without Config.RenewSession every call fails with
	// ErrSessionExpired from then on; with it, a Renewed follows.
	Expired
	// MasterFailover: a new master took over (a new epoch).
	MasterFailover

	// Handle events, delivered on Handle.Events only: the kinds a handle
	// asked for WithEvents, and those about its lock and its renewal
	// whatever it asked for. Event.Path names the node, Event.Child the
	// child.

	// ContentsModified: the file's contents were replaced.
	ContentsModified
	// ChildAdded: a child was created in the directory.
	ChildAdded
	// ChildRemoved: a child was deleted from the directory.
	ChildRemoved
	// LockAcquired: the node's lock was granted (to anyone).
	LockAcquired
	// ConflictingLock: another handle asked for the lock while it was held.
	ConflictingLock
	// HandleInvalid: the node was deleted; handles on it are invalid.
	HandleInvalid
	// LockBroken: the cell's admin broke the lock this handle held
	// (admin.Admin.BreakLock); its lock context has ended (ErrLockBroken).
	LockBroken
	// ReleaseRequested: another session asked this handle to let go of
	// the lock it holds (Handle.RequestRelease); Event.ReleaseRequest says
	// who and why. The lock stays held until the holder releases it.
	ReleaseRequested

	// Overflow: the stream it arrives on (Client.Events or Handle.Events)
	// was full, and at least one event after the ones before it was not
	// kept; or the master had no room to queue the session's events (the
	// session did not fetch them for long), and every handle that hears
	// events gets one. Re-read what you rely on (GetContentsAndStat,
	// GetStat, ReadDir): that read is newer than every event lost. Its
	// position is that of the first event lost (Path names its node, if
	// any).
	Overflow
	// Reannounce: the session survived a fail-over or a jeopardy, and
	// events the old master had queued for it may be lost; what the
	// handle heard before may be stale. Delivered once or more per
	// fail-over or recovery to every handle opened WithEvents or holding
	// a lock; re-read the node. Its Epoch is the master's now; its other
	// position fields repeat the last this handle heard of (zero if
	// none), to compare with what the re-read returns.
	Reannounce

	// Renewed (session event, Config.RenewSession): after Expired, the
	// client opened a new session (Event.Session, also Client.Session
	// from now on) and re-opened its open handles in it, each told so on
	// its own stream (Reopened or ReopenFailed). No lock carries over.
	// It also follows IdleClosed, with or without RenewSession, once a
	// call wanted the new session.
	Renewed
	// LockLost (handle event): the session expired while this handle held
	// its lock (Event.LockGen), so the cell freed it; its lock context
	// has ended with a cause matching ErrLockLost. After a renewal the
	// handle holds no lock until Acquire is called again.
	LockLost
	// Reopened (handle event, Config.RenewSession): the handle was
	// re-opened in the new session (Event.Session) with its name, mode
	// and options; its position is the node's as the re-open found it (a
	// new Instance: the node was created again). What it heard before may
	// be stale: re-read the node.
	Reopened
	// ReopenFailed (handle event, Config.RenewSession): the handle could
	// not be re-opened in the new session; Event.Err says why (its node
	// is gone: ErrNotFound). Every call on the handle fails with an error
	// matching ErrHandleInvalid and Event.Err; Close it.
	ReopenFailed
	// IdleClosed (session event): the master closed the session
	// (Event.Session) because it held no open handle and made no call
	// but KeepAlives for the cell's idle-session timeout. It held
	// nothing, so nothing is lost and this is not an Expired: the next
	// call opens a new session (then Renewed, with its id) and runs in
	// it, whatever Config.RenewSession says (client/idle.go says why).
	IdleClosed
)

func (k EventKind) String() string {
	switch k {
	case Jeopardy:
		return "jeopardy"
	case Safe:
		return "safe"
	case Expired:
		return "expired"
	case MasterFailover:
		return "master-failover"
	case ContentsModified:
		return "contents-modified"
	case ChildAdded:
		return "child-added"
	case ChildRemoved:
		return "child-removed"
	case LockAcquired:
		return "lock-acquired"
	case ConflictingLock:
		return "conflicting-lock"
	case HandleInvalid:
		return "handle-invalid"
	case LockBroken:
		return "lock-broken"
	case ReleaseRequested:
		return "release-requested"
	case Overflow:
		return "overflow"
	case Reannounce:
		return "reannounce"
	case Renewed:
		return "renewed"
	case LockLost:
		return "lock-lost"
	case Reopened:
		return "reopened"
	case ReopenFailed:
		return "reopen-failed"
	case IdleClosed:
		return "idle-closed"
	}
	return "event"
}

// Event is one notification to the application.
type Event struct {
	Kind EventKind
	// Epoch is the epoch of the master the event came from (zero for
	// Jeopardy, Expired and LockLost, which no master sent).
	Epoch uint64
	// Time is when this client heard the event.
	Time time.Time
	// Path and Child describe handle events.
	Path  string
	Child string
	// Instance, ContentGen and LockGen are a handle event's position: the
	// node's instance and generations (as in Stat) just after the change
	// it tells of. They are zero when the master did not know them (the
	// node was deleted). Generations only grow, so for one node the
	// positions of successive events never go back.
	Instance   uint64
	ContentGen uint64
	LockGen    uint64
	// Missed is, on an Overflow, the kind of the first event lost (zero
	// when the master dropped them: it does not say which).
	Missed EventKind
	// Session is the new session's id on Renewed and Reopened, the
	// closed one's on IdleClosed.
	Session uint64
	// Err is why, on ReopenFailed.
	Err error
	// ReleaseRequest is the request, on ReleaseRequested.
	ReleaseRequest *ReleaseRequest
}

// handleEventKinds maps wire event kinds to handle events.
var handleEventKinds = map[uint8]EventKind{
	wire.EventContents: ContentsModified, wire.EventChildAdded: ChildAdded, wire.EventChildRemoved: ChildRemoved,
	wire.EventLockAcquired: LockAcquired, wire.EventLockConflict: ConflictingLock, wire.EventHandleInvalid: HandleInvalid,
	wire.EventLockBroken: LockBroken, wire.EventReleaseRequested: ReleaseRequested,
}

// Events delivers the session's events in order: Jeopardy, Safe, Expired,
// IdleClosed, Renewed and MasterFailover (handle events go to Handle.Events only).
// The channel is closed by Close. It keeps SessionEventBuffer unread
// events; a reader that falls further behind does not stall the session,
// and loses nothing silently: the first event it could not keep becomes
// an Overflow event.
func (c *Client) Events() <-chan Event { return c.events }

// emit delivers a session event on Client.Events; a fail-over or a
// recovery from jeopardy also re-announces every listening handle's node.
func (c *Client) emit(e Event) {
	e.Time = c.clock.Now()
	c.eventsMu.Lock()
	if !c.eventsOff {
		if _, over := pushEvent(c.events, e); over {
			c.log.Warn("lockcell: events overflowed, the application is not reading Events(); it gets an overflow event",
				"event", e.Kind, "buffer", SessionEventBuffer)
		}
	}
	c.eventsMu.Unlock()
	if e.Kind == MasterFailover || e.Kind == Safe {
		c.streams.reannounceAll(e.Epoch, e.Time)
	}
}

// sessionState is the session as the client knows it: its id and the
// master's epoch, where it stands in its life (expired, closing, closed)
// and its lease. Its lock is a leaf: no other lock is taken while it is
// held. The lifecycle flags are read at the top of every try of a call,
// and the lease on every cached read.
type sessionState struct {
	clock Clock
	mu    sync.Mutex

	id      uint64
	epoch   uint64
	expired bool
	closing bool // Close has begun: the session's end is the application's doing
	closed  bool

	// gen numbers the sessions this Client has had: 1 for Dial's, one
	// more for each renewal (renew.go). A call made in one is never sent
	// in another: the handle ids and request outcomes it names are that
	// session's.
	gen uint64
	// renew is Config.RenewSession. renewing is true from an expiry until
	// the renewal has re-opened the handles (or the Client closes), and
	// renewDone is closed then.
	renew     bool
	renewing  bool
	renewDone chan struct{}
	// idle: the master closed the session for idleness (idle.go); the
	// keep-alive loop waits on idleWake for a call that wants a new one.
	idle     bool
	idleWake chan struct{}

	leaseEnd time.Time // on clock, conservative
	jeopardy bool
	// incarnation is what a resume made the session's (resume.go), carried
	// by every call; secret is the session's resume secret; moved: another
	// process resumed the session, which is over for this client.
	incarnation uint64
	secret      []byte
	moved       bool
	ackEvent    uint64
	leaseTTL    time.Duration

	// sure is live while the client can be sure its session still holds
	// what it held: it ends, with why as its cause, on jeopardy, expiry
	// and Close, and a new one begins when a KeepAlive succeeds after
	// jeopardy. Every lock context is derived from the sure context of
	// when its lock was granted (lockctx.go).
	sure    context.Context
	endSure context.CancelCauseFunc
}

// newSessionState returns a session whose local lease ends at end less the
// drift margin of a lease of ttlMillis. Dial starts with no lease (a zero
// end) and sets it with start once the master has created the session.
func newSessionState(clock Clock, end time.Time, ttlMillis int64) *sessionState {
	s := &sessionState{clock: clock, idleWake: make(chan struct{}, 1)}
	s.setLeaseLocked(end, ttlMillis)
	s.sure, s.endSure = context.WithCancelCause(context.Background())
	return s
}

// sureContext returns the context that ends when the client can no
// longer be sure of its session (see sessionState.sure).
func (s *sessionState) sureContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sure
}

func (s *sessionState) setLeaseLocked(end time.Time, ttlMillis int64) {
	ttl := time.Duration(ttlMillis) * time.Millisecond
	s.leaseEnd, s.leaseTTL = end.Add(-wire.LeaseDriftMargin(ttl)), ttl
}

// start records the session the master created: its id, the epoch, and
// the first lease, granted until end; it returns the session's
// generation, and false (starting nothing) once Close has begun. A
// renewal's session starts afresh: no jeopardy, no event acknowledged,
// and a new sure context (the old one ended with the expiry).
func (s *sessionState) start(id, epoch uint64, end time.Time, ttlMillis int64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.closed {
		return 0, false
	}
	s.id, s.epoch = id, epoch
	s.setLeaseLocked(end, ttlMillis)
	s.gen++
	s.expired, s.jeopardy, s.ackEvent, s.idle = false, false, 0, false
	select { // a call's wish for a session is met by this one
	case <-s.idleWake:
	default:
	}
	s.incarnation, s.secret, s.moved = 0, nil, false // a new session: Dial's or a renewal's (a resume sets its own)
	if s.sure.Err() != nil {
		s.sure, s.endSure = context.WithCancelCause(context.Background())
	}
	return s.gen, true
}

// generation returns the current session's generation (see gen).
func (s *sessionState) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// leaseUntil returns the end of the local lease as it stands now, and
// false in jeopardy. A later KeepAlive may extend the lease; an end read
// before a cache lookup is the lease that lookup may rely on.
func (s *sessionState) leaseUntil() (time.Time, bool) {
	if s == nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseEnd, !s.jeopardy
}

// identity returns the session id and the master epoch calls carry.
func (s *sessionState) identity() (id, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.epoch
}

// usable returns ErrClosed once the client is closed and an error
// matching ErrSessionExpired once the session has expired; nil otherwise.
func (s *sessionState) usable() error { return s.usableIn(0, false) }

// usableIn is usable for a call made in session generation gen (0: the
// current one): one made in an earlier session fails as expired. A
// renewal's own call (renewal) goes on while the session is expired.
func (s *sessionState) usableIn(gen uint64, renewal bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.expired && !renewal:
		s.wantSessionLocked()
		return s.endedErrLocked()
	case gen != 0 && gen != s.gen:
		return wire.Errorf(wire.CodeSessionExpired, "the session the call was made in has expired (the client renewed it: session %d)", s.id)
	}
	return nil
}

// awaitRenewal waits until the renewal that follows the expiry of
// session generation gen has finished (the new session is open and the
// handles re-opened), for at most budget and until ctx ends. Without a
// renewal to wait for (Config.RenewSession unset) it returns the expiry.
func (c *Client) awaitRenewal(ctx context.Context, gen uint64, budget time.Duration) error {
	s := c.sess
	var timeout <-chan struct{}
	for {
		s.mu.Lock()
		switch {
		case s.closed || s.closing:
			s.mu.Unlock()
			return ErrClosed
		case !s.renewing && s.gen > gen && !s.expired:
			s.mu.Unlock()
			return nil
		case !s.renewing:
			s.mu.Unlock()
			return wire.Errorf(wire.CodeSessionExpired, "session %d has expired", s.id)
		}
		s.wantSessionLocked()
		done := s.renewDone
		s.mu.Unlock()
		if timeout == nil {
			tctx, cancel := c.withDeadline(ctx, c.clock.Now().Add(budget))
			defer cancel()
			timeout = tctx.Done()
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("%w: the session expired and no new one was opened within %v (the client keeps trying)", ErrNoMaster, budget)
		}
	}
}

// whileLive runs f and reports true if the session is neither closed nor
// expired, atomically with that check: Close sets closed before it waits
// for the client's goroutines, so a goroutine started by f is waited for.
func (s *sessionState) whileLive(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.expired {
		return false
	}
	f()
	return true
}

// adoptEpoch records a new master epoch; it reports whether epoch is new
// and the one it replaces.
func (s *sessionState) adoptEpoch(epoch uint64) (changed bool, old uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old = s.epoch
	if epoch != 0 && epoch != s.epoch {
		s.epoch = epoch
		return true, old
	}
	return false, old
}

// expire marks the session id expired, ending every lock context with
// cause, and starts a renewal when Config.RenewSession asks for one; it
// reports whether it already was expired (or id is not the current
// session: a late answer about an earlier one), and whether Close had
// begun.
func (s *sessionState) expire(id uint64, cause error) (was, closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.id || s.expired {
		return true, s.closing
	}
	was, closing = s.expired, s.closing
	s.expired = true
	s.endSure(cause)
	if s.renew && !s.moved && !s.closing && !s.closed && !s.renewing {
		s.renewing, s.renewDone = true, make(chan struct{})
	}
	return was, closing
}

// closingOrClosed reports whether Close has begun.
func (s *sessionState) closingOrClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing || s.closed
}

// endRenewal marks the renewal over (done, or given up at Close) and
// wakes the calls waiting for it.
func (s *sessionState) endRenewal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.renewing {
		s.renewing = false
		close(s.renewDone)
	}
}

// beginClose marks the start of Close; it reports whether Close already
// finished, and whether the session had expired.
func (s *sessionState) beginClose() (closed, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closing = true
	}
	s.endSure(ErrClosed)
	return s.closed, s.expired
}

// finishClose marks the client closed: every call fails with ErrClosed,
// and a call waiting for a renewal stops waiting.
func (s *sessionState) finishClose() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.endRenewal()
}

// keepAliveLoop keeps exactly one KeepAlive outstanding. The local lease
// is measured from when each call was sent, so it never outlasts the
// master's. When it runs out the session is in jeopardy; when the grace
// period runs out too, it has expired.
func (c *Client) keepAliveLoop() {
	defer c.wg.Done()
	defer c.streams.end() // the session is over: no handle hears more
	s := c.sess
	for {
		s.mu.Lock()
		deadline := s.leaseEnd
		inJeopardy := s.jeopardy
		if inJeopardy {
			deadline = s.leaseEnd.Add(c.cfg.GracePeriod)
		}
		ack := s.ackEvent
		id := s.id
		s.mu.Unlock()

		ctx, cancel := c.withDeadline(c.base, deadline)
		var resp wire.KeepAliveResponse
		// In jeopardy the call asks for a prompt answer and each try is
		// short: the master we knew may be frozen with its connection still
		// open, and a new master gives us only about one lease to find it
		// (docs/spec.md#fail-over), so waiting on one replica for the whole
		// grace period would lose the session. The session's own deadline
		// (lease end, then grace end) bounds the search, not RetryTimeout.
		try := time.Duration(0)
		if inJeopardy {
			try = wire.SearchTry(s.leaseTTL)
		}
		sent, err := c.roundTrip(ctx, callSpec{method: wire.MethodKeepAlive,
			req: &wire.KeepAliveRequest{AckEvent: ack, Prompt: inJeopardy}, resp: &resp, try: try})
		cancel()
		select {
		case <-c.stop:
			return
		default:
		}
		switch {
		case err == nil:
			// Apply every event before adopting the new lease, and before
			// acknowledging any. The master completes a write once we
			// acknowledged its invalidation, or once the lease we held
			// when it was queued has run out: this reply's lease must not
			// keep alive a cache entry that the same reply invalidates.
			for _, ev := range resp.Events {
				switch ev.Kind {
				case wire.EventInvalidate:
					if c.cache != nil {
						c.cache.Invalidate(ev.Path)
						c.dropPooled(ev.Path)
					}
					c.proxied.forget(ev.Path)
					c.streams.invalidated(ev.Path)
				case wire.EventMasterFailover:
					c.purgeCache()
					c.streams.invalidated("")
				case wire.EventOverflow:
					// The master dropped handle events it had no room for,
					// of handles it does not list: every stream re-reads.
					c.log.Warn("lockcell: the master dropped events for this session; every handle hears an overflow", "session", c.Session())
					c.streams.overflowAll(resp.Epoch, c.clock.Now())
				default:
					if k, ok := handleEventKinds[ev.Kind]; ok {
						if k == HandleInvalid {
							c.locks.endPath(ev.Path, wire.Errorf(wire.CodeHandleInvalid, "%s was deleted", ev.Path))
						}
						if k == LockBroken {
							c.lockBroken(ev)
						}
						e := handleEvent(k, ev, resp.Epoch, c.clock.Now())
						if k == ReleaseRequested {
							if e.ReleaseRequest = c.releaseRequested(ev); e.ReleaseRequest == nil {
								continue // about a holding this client no longer has
							}
						}
						c.streams.deliver(ev.Handle, e)
					}
				}
			}
			// What another proxy instance's cache served goes before this
			// lease is adopted (proxied.go).
			c.proxied.adopt(c, resp.Proxy)
			c.noteEpoch(resp.Epoch)
			lease := time.Duration(resp.HeldMillis+resp.LeaseMillis) * time.Millisecond
			s.mu.Lock()
			s.leaseEnd = wire.TrustedLeaseEnd(sent, lease)
			wasJeopardy := s.jeopardy
			s.jeopardy = false
			if wasJeopardy && !s.expired && !s.closing {
				// Locks granted from now on are sure again; those held
				// through the jeopardy stay ended (their holders re-acquire).
				s.sure, s.endSure = context.WithCancelCause(context.Background())
			}
			s.mu.Unlock()
			if wasJeopardy && c.cache != nil {
				c.cache.Enable()
			}
			s.mu.Lock()
			for _, ev := range resp.Events {
				s.ackEvent = max(s.ackEvent, ev.Seq)
			}
			s.mu.Unlock()
			if wasJeopardy {
				c.log.Debug("lockcell: session safe again", "session", c.Session(), "epoch", resp.Epoch)
				c.emit(Event{Kind: Safe, Epoch: resp.Epoch})
			}
			c.dropStale()
		case errors.Is(err, ErrSessionExpired), errors.Is(err, ErrUnknownSession):
			c.markEnded(id, err)
			if c.sess.idleClosed() && !c.awaitCall() {
				return // closed for idleness: a new session waits for a call that wants it
			}
			if !c.renew() {
				return
			}
		case errors.Is(err, context.DeadlineExceeded):
			if inJeopardy {
				c.markExpired(id)
				if !c.renew() {
					return
				}
				continue
			}
			s.mu.Lock()
			s.jeopardy = true
			s.endSure(ErrJeopardy)
			s.mu.Unlock()
			// A live master answers with a quarter of the lease to spare:
			// the replica we waited on is gone or cut off. Search afresh.
			c.route.dropMaster()
			// The master may no longer wait for our acknowledgements: our
			// cache can no longer be trusted (docs/spec.md#jeopardy-and-grace).
			if c.cache != nil {
				c.cache.Disable()
				c.dropPooled("")
			}
			c.log.Debug("lockcell: session in jeopardy: no KeepAlive answer within the lease", "session", c.Session())
			c.emit(Event{Kind: Jeopardy})
		default:
			// Closed, or an unexpected answer: back off briefly.
			if c.sleep(c.base, 50*time.Millisecond) != nil {
				return
			}
		}
	}
}
