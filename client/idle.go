package client

import "fmt"

// A session closed for idleness (docs/spec.md#idle-sessions). The master
// closes a session that has held no open handle and made no call but
// KeepAlives for the cell's idle-session timeout (a minute by default),
// and says so (wire's SessionIdleClosedMsg) on the KeepAlive it stops
// extending the lease on; it closes the session once that lease has run
// out, so the cache this client filled in the session cannot be served
// after the close (master/idle.go). Such a session held nothing else: no
// handle, so no lock, no queued Acquire, no ephemeral node. On the answer
// the Client purges its cache at once and sends no more KeepAlives. Chubby's and ZooKeeper's users expect a
// session to end only when the program ends it or loses contact, and a
// program that merely idled did neither; so the Client does not turn
// this close into an Expired the program must handle. It emits
// IdleClosed and opens a new session on the program's next call (not at
// once: a Client the program forgot would otherwise take a session slot
// back at once, which is what the close is for), emits Renewed once it
// is open, and runs the call in it. Only Client.Session (and
// SessionTicket) change. Should the client hold an open handle when the
// close arrives (it cannot, unless it raced a Close the master had not
// yet applied), it treats the close as the expiry it then is.

// ErrSessionIdleClosed is the cause the session's sure context (and so
// any lock context derived from it, though an idle session holds no
// lock) ends with when the master closes the session for idleness. It
// matches ErrSessionExpired.
var ErrSessionIdleClosed = fmt.Errorf("%w: closed for idleness (no open handle and no call for the cell's idle-session timeout)", ErrSessionExpired)

// markIdleClosed ends session id, which the master closed for idleness
// (err), and arms the renewal that the next call starts. false: the
// client holds an open handle, or the session already ended; the caller
// ends it as an expiry.
func (c *Client) markIdleClosed(id uint64, err error) bool {
	for _, h := range c.streams.all() {
		h.mu.Lock()
		open := !h.closed && h.lost == nil
		h.mu.Unlock()
		if open {
			c.log.Warn("lockcell: the master closed the session for idleness while this client holds an open handle; treated as an expiry",
				"session", id, "path", h.path)
			return false
		}
	}
	if !c.sess.idleClose(id) {
		return false
	}
	if c.cache != nil {
		// The master lets the session's lease run out and then forgets
		// what it cached: serve nothing more from it (writes of what it
		// cached wait for its lease meanwhile). The next session starts
		// with an empty cache (renew purges it again).
		c.cache.Purge()
	}
	c.pool.drop("") // their handles closed with the session
	c.log.Info("lockcell: the master closed the idle session; the next call opens a new one", "session", id, "err", err)
	c.emit(Event{Kind: IdleClosed, Session: id})
	return true
}

// idleClose marks session id closed for idleness: calls made in it wait
// for the renewal (renewing), which waits for a call (wantSessionLocked).
// false if id is not the current session, or it already ended.
func (s *sessionState) idleClose(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.id || s.expired || s.closing || s.closed || s.moved {
		return false
	}
	s.expired, s.idle = true, true
	s.endSure(ErrSessionIdleClosed)
	if !s.renewing {
		s.renewing, s.renewDone = true, make(chan struct{})
	}
	return true
}

// idleClosed reports whether the session was closed for idleness and no
// new one is open yet.
func (s *sessionState) idleClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle
}

// wantSessionLocked tells the keep-alive loop, waiting after an idle
// close, that a call wants a session. s.mu is held.
func (s *sessionState) wantSessionLocked() {
	if s.idle {
		select {
		case s.idleWake <- struct{}{}:
		default:
		}
	}
}

// awaitCall waits, after an idle close, until a call wants a session;
// false when the Client is closing.
func (c *Client) awaitCall() bool {
	select {
	case <-c.sess.idleWake:
		return true
	case <-c.stop:
		return false
	case <-c.base.Done():
		return false
	}
}
