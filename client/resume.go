package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"lockcell/wire"
)

// Resuming a session after a process restart (ZooKeeper's session id and
// password, etcd's ResumeElection). A program saves SessionTicket, say to
// a 0600 file, and a new process of it dials with Config.ResumeTicket:
// it takes the session over within its lease, keeps its locks (no
// lock-delay, no queueing behind itself), and finds its handles again
// (ResumedHandles, or Open of the same name and mode, which adopts the
// handle). The process that held the session before is fenced out: its
// next call or KeepAlive fails with ErrSessionMoved, which ends its
// session (its lock contexts end, it gets Expired), and every lock the
// session holds has a new generation, so its sequencers are stale.

// movedError is ErrSessionMoved with the master's answer, which matches
// ErrSessionExpired.
type movedError struct{ answer error }

func (e *movedError) Error() string        { return ErrSessionMoved.Error() + " (" + e.answer.Error() + ")" }
func (e *movedError) Is(target error) bool { return target == ErrSessionMoved }
func (e *movedError) Unwrap() error        { return e.answer }

// asMoved returns err as an error that also matches ErrSessionMoved when
// it is the master's answer to a call of a moved session; err otherwise.
func asMoved(err error) error {
	if wire.IsSessionMoved(err) {
		return &movedError{answer: err}
	}
	return err
}

// ticketMagic opens every session ticket, version 1.
const ticketMagic = "LCT1"

// SessionTicket returns the ticket that lets a new process of this
// program resume the session (Config.ResumeTicket): the cell name, the
// session id and the session's secret. Anyone who holds it and
// authenticates as this session's principal can take the session and its
// locks over, so keep it as a credential (a file of mode 0600). It is nil
// when the master that created the session gave no secret (a cell of an
// earlier version). A ticket stays the same for the session's life, also
// across resumes.
func (c *Client) SessionTicket() []byte {
	id, _ := c.sess.identity()
	secret := c.sess.resumeSecret()
	if id == 0 || len(secret) == 0 {
		return nil
	}
	b := make([]byte, 0, len(ticketMagic)+1+len(c.cfg.Cell)+8+len(secret))
	b = append(b, ticketMagic...)
	b = append(b, byte(len(c.cfg.Cell)))
	b = append(b, c.cfg.Cell...)
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, secret...)
}

// parseTicket reads a SessionTicket of cell; a ticket that is not one,
// or one of another cell, is ErrBadRequest.
func parseTicket(cell string, t []byte) (id uint64, secret []byte, err error) {
	bad := func(why string) error { return wire.Errorf(wire.CodeBadRequest, "resume ticket: %s", why) }
	if len(t) < len(ticketMagic)+1 || string(t[:len(ticketMagic)]) != ticketMagic {
		return 0, nil, bad("not a lockcell session ticket")
	}
	t = t[len(ticketMagic):]
	n := int(t[0])
	if len(t) != 1+n+8+wire.ResumeSecretSize {
		return 0, nil, bad(fmt.Sprintf("%d bytes, not those of a ticket", len(t)+len(ticketMagic)))
	}
	if got := string(t[1 : 1+n]); got != cell {
		return 0, nil, bad(fmt.Sprintf("a ticket of cell %q, not %q", got, cell))
	}
	id = binary.BigEndian.Uint64(t[1+n:])
	return id, slices.Clone(t[1+n+8:]), nil
}

// Resumed reports whether this Client took its session over from an
// earlier process (Config.ResumeTicket) rather than creating it.
func (c *Client) Resumed() bool {
	c.adopt.mu.Lock()
	defer c.adopt.mu.Unlock()
	return c.adopt.resumed
}

// ResumedHandle is a handle a resumed session had open, not yet taken
// back by Open (see ResumedHandles).
type ResumedHandle struct {
	// Name is the node's full name, and Mode the mode it was opened with
	// (Read, Write, Create, Excl, Directory, Ephemeral).
	Name string
	Mode OpenMode
	// Lock is the lock the handle holds (0: none), at generation LockGen:
	// the generation the resume gave it, newer than any sequencer the
	// earlier process held.
	Lock    LockMode
	LockGen uint64
}

// ResumedHandles lists, in the order they were opened, the handles the
// session had open when this Client resumed it and that no Open has taken
// back yet. Open of a listed Name with the same Read, Write and Directory
// bits of its mode and the same WithEvents mask returns that handle
// instead of opening another, holding the lock it holds: its
// LockContext lives, and Acquire in the mode held succeeds at once. So a
// program that restarts runs the code it always runs (Open, then Acquire;
// Campaign does exactly that) and finds it still holds its locks. A
// handle nobody takes back stays open, and its lock held, until the
// session ends. A handle taken back keeps what it was opened with (its
// lock-delay among it), whatever options the Open passes besides the
// mode and events. At most 1,024 are listed.
func (c *Client) ResumedHandles() []ResumedHandle {
	c.adopt.mu.Lock()
	defer c.adopt.mu.Unlock()
	out := make([]ResumedHandle, 0, len(c.adopt.left))
	for _, h := range c.adopt.left {
		out = append(out, ResumedHandle{Name: h.Path, Mode: OpenMode(h.Flags), Lock: LockMode(h.LockMode), LockGen: h.LockGen})
	}
	return out
}

// adoption is what a resume found: the handles not yet taken back, in
// id order. Its lock is a leaf.
type adoption struct {
	mu      sync.Mutex
	resumed bool
	left    []wire.ResumedHandle
}

// adoptMask is the part of a mode an Open must share with a resumed
// handle to take it back: what the handle may do and what it is.
const adoptMask = wire.OpenRead | wire.OpenWrite | wire.OpenDirectory

// take removes and returns the first resumed handle on name opened like
// req, if any.
func (a *adoption) take(req *wire.OpenRequest) (wire.ResumedHandle, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, h := range a.left {
		if h.Path == req.Path && h.Flags&adoptMask == req.Flags&adoptMask && h.EventMask == req.EventMask {
			a.left = slices.Delete(a.left, i, i+1)
			return h, true
		}
	}
	return wire.ResumedHandle{}, false
}

// adopted returns the resumed handle an Open with o takes back, as a
// Handle of this client holding the lock it holds; nil when there is
// none.
func (c *Client) adopted(o *openOptions) *Handle {
	rh, ok := c.adopt.take(&o.req) // same path, mode bits and event mask
	if !ok {
		return nil
	}
	gen := c.sess.generation()
	h := c.newHandle(rh.Path, rh.Handle, rh.Instance, o)
	if rh.LockMode != wire.LockFree {
		h.markDirty() // it holds a lock: never left idle in the pool
		h.gotLock(rh.LockGen, LockMode(rh.LockMode))
	}
	if !c.register(h, gen) {
		return nil // the resumed session is already over; Open goes on as usual
	}
	return h
}

// resumeFromConfig resumes the session Config.ResumeTicket names. It
// reports false, with no error, when there is no ticket, or when the
// ticket's session has ended and Config.ResumeOrCreate asks for a new
// session instead.
func (c *Client) resumeFromConfig(ctx context.Context) (bool, error) {
	if len(c.cfg.ResumeTicket) == 0 {
		return false, nil
	}
	id, secret, err := parseTicket(c.cfg.Cell, c.cfg.ResumeTicket)
	if err != nil {
		return false, err
	}
	var resp wire.ResumeSessionResponse
	sent, err := c.roundTrip(ctx, callSpec{method: wire.MethodResumeSession, budget: c.cfg.RetryTimeout,
		req: &wire.ResumeSessionRequest{Session: id, Secret: secret}, resp: &resp})
	if err != nil {
		if errors.Is(err, ErrSessionExpired) && c.cfg.ResumeOrCreate {
			c.log.Info("lockcell: the session to resume has ended; creating a new one", "session", id)
			return false, nil
		}
		return false, err
	}
	c.sess.start(resp.Session, resp.Epoch, sent.Add(time.Duration(resp.LeaseMillis)*time.Millisecond), resp.LeaseMillis)
	c.sess.resumedAs(resp.Incarnation, secret)
	c.ids.startAt(resp.NextSeq)
	c.adopt.mu.Lock()
	c.adopt.resumed, c.adopt.left = true, resp.Handles
	c.adopt.mu.Unlock()
	if resp.Truncated {
		c.log.Warn("lockcell: the resumed session has more open handles than the resume lists; the rest stay open until the session ends",
			"session", resp.Session, "listed", len(resp.Handles))
	}
	c.log.Debug("lockcell: session resumed", "session", resp.Session, "incarnation", resp.Incarnation, "handles", len(resp.Handles))
	return true, nil
}

// startAt makes next the next request id: every id below it was the
// earlier process's, acknowledged as completed from now on.
func (r *requestIDs) startAt(next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if next > 0 && next-1 > r.last {
		r.last = next - 1
	}
}

// resumedAs records the incarnation a resume gave the session, which
// every call's header carries from now on, and the secret it was resumed
// with.
func (s *sessionState) resumedAs(incarnation uint64, secret []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.incarnation, s.secret = incarnation, secret
}

// setSecret records the secret CreateSession gave the session.
func (s *sessionState) setSecret(secret []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = slices.Clone(secret)
}

func (s *sessionState) resumeSecret() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secret
}

// callIdentity is identity plus the incarnation calls carry.
func (s *sessionState) callIdentity() (id, epoch, incarnation uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.epoch, s.incarnation
}

// markEnded marks the session id over after the master said so with
// err: expired, or moved to another process (ErrSessionMoved). A moved
// session is final even with Config.RenewSession: another process now
// speaks for it, and this one is the process that must stop. A session
// closed for idleness that held nothing is not an expiry (idle.go).
func (c *Client) markEnded(id uint64, err error) {
	if wire.IsSessionIdleClosed(err) && c.markIdleClosed(id, err) {
		return // it held nothing: the next call opens a new session
	}
	if wire.IsSessionMoved(err) {
		c.sess.mu.Lock()
		if c.sess.id == id {
			c.sess.moved = true
		}
		c.sess.mu.Unlock()
		c.log.Warn("lockcell: another process resumed this session; this client's session is over", "session", id)
	}
	c.markExpired(id)
}

// movedAway reports whether another process resumed this Client's
// session.
func (s *sessionState) movedAway() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.moved
}

// endedErr is endedErrLocked under the session's lock.
func (s *sessionState) endedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endedErrLocked()
}

// endedErrLocked is the error of a session that is over: ErrSessionMoved
// (matching ErrSessionExpired too) when another process resumed it.
func (s *sessionState) endedErrLocked() error {
	err := wire.Errorf(wire.CodeSessionExpired, "session %d has expired", s.id)
	if s.moved {
		return &movedError{answer: wire.Errorf(wire.CodeSessionExpired, "%s: session %d was resumed by another process", wire.SessionMovedMsg, s.id)}
	}
	return err
}
