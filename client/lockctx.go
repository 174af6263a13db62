package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"lockcell/wire"
)

// Causes of a lock context's end (context.Cause of Handle.LockContext),
// besides ErrClosed (the handle or the Client was closed),
// ErrSessionExpired (the session expired, so the cell freed its locks),
// ErrHandleInvalid (the lock's node was deleted) and ErrNotHeld (the
// handle holds no lock).
var (
	// ErrJeopardy: the client's local lease ran out with no answer from
	// a master (the master is unreachable, or the cell has no quorum).
	// The session may yet survive, but from this moment the client cannot
	// be sure it still holds its locks: the master may expire the session
	// and hand them on.
	ErrJeopardy = errors.New("lockcell: session in jeopardy: no answer from the cell within the lease")
	// ErrReleased: the handle released its lock (Release).
	ErrReleased = errors.New("lockcell: lock released")
	// ErrLockLost: the session that held the lock expired, so the cell
	// freed it and may have granted it to another session since. The
	// cause also matches ErrSessionExpired. With Config.RenewSession the
	// handle lives on in the new session but holds no lock there until
	// Acquire is called again.
	ErrLockLost = errors.New("lockcell: lock lost: the session that held it expired")
	// ErrSessionMoved: another process resumed this session with its
	// ticket (Config.ResumeTicket): this Client's session is over, as if
	// it had expired, and errors carrying it also match
	// ErrSessionExpired. The locks stay held, by the other process.
	ErrSessionMoved = errors.New("lockcell: session moved: another process resumed this session")
)

// heldLock is one holding of a handle's lock: from the grant until the
// client can no longer be sure of it.
type heldLock struct {
	ctx  context.Context
	end  context.CancelCauseFunc
	gen  uint64
	mode LockMode
}

// LockContext returns a context that is live while this handle holds its
// lock and the client can be sure of it, and ends the moment it cannot:
// when the session goes into jeopardy (the local lease ran out, which is
// before the master can expire the session and hand the lock to anyone
// else), when the session expires, on Release, on Close of the handle or
// of the Client, and when the lock's node is deleted (seen by a call on
// the handle, or by an OnHandleInvalid event). context.Cause says why,
// as an error matching ErrJeopardy, ErrLockLost (the session expired),
// ErrReleased, ErrClosed or ErrHandleInvalid under errors.Is; Err is
// context.Canceled. After the session expired, LockContext returns a
// context ended with ErrLockLost, even if the one returned before ended
// earlier with ErrJeopardy.
//
// Work done under the lock should run under this context (or one derived
// from it), so that it stops when the lock may be gone. A fail-over the
// session survives without jeopardy does not end it: the lock is still
// held at the same generation. An ended context stays ended, even if the
// session is Safe again after jeopardy; Acquire or TryAcquire on the
// handle then confirms the lock at the master and starts a new context.
// A handle that holds no lock returns a context already ended with
// ErrNotHeld. Poison does not end it: the lock is still held until
// Close.
func (h *Handle) LockContext() context.Context {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held != nil {
		return held.ctx
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(wire.Errorf(wire.CodeNotHeld, "%s: this handle holds no lock", h.path))
	return ctx
}

// gotLock records that the master granted this handle the lock at
// generation gen in mode. A grant of the lock this handle already holds
// keeps its live context; any other grant starts a new one, derived from
// the session's sure context, so a grant answered after the local lease
// ran out starts out ended.
func (h *Handle) gotLock(gen uint64, mode LockMode) {
	h.mu.Lock()
	old := h.held
	if old != nil && old.ctx.Err() == nil && old.gen == gen && old.mode == mode {
		h.mu.Unlock()
		return
	}
	ctx, end := context.WithCancelCause(h.c.sess.sureContext())
	h.held = &heldLock{ctx: ctx, end: end, gen: gen, mode: mode}
	h.mu.Unlock()
	if old != nil {
		old.end(ErrReleased)
	}
	h.c.locks.add(h)
}

// endLock ends the handle's lock context, if it holds one, with cause.
func (h *Handle) endLock(cause error) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held == nil {
		return
	}
	held.end(cause)
	h.c.locks.remove(h)
}

// loseLock records that h's lock died with its session: the context
// returned before ends (if it had not), LockContext returns one ended
// with cause from now on, the grant's sequencer is forgotten, and the
// handle's stream hears LockLost.
func (h *Handle) loseLock(cause error, now time.Time) {
	h.mu.Lock()
	held := h.held
	if held == nil {
		h.mu.Unlock()
		return
	}
	held.end(cause)
	ctx, end := context.WithCancelCause(context.Background())
	end(cause)
	h.held = &heldLock{ctx: ctx, end: end, gen: held.gen, mode: held.mode}
	h.grantSeq, h.grantOf = nil, nil
	h.mu.Unlock()
	h.events.push(Event{Kind: LockLost, Time: now, Path: h.path, LockGen: held.gen})
}

// holdsLock reports whether h was granted a lock that has not ended by
// its own doing (it may have ended in a jeopardy).
func (h *Handle) holdsLock() bool { return h.c.locks.has(h) }

// lockTable indexes the handles that were granted a lock by the lock's
// name, so news about a node (its deletion) ends the lock contexts of
// every handle on it. Its lock is a leaf: handles are collected under it
// and ended after it is released.
type lockTable struct {
	mu     sync.Mutex
	byPath map[string]map[*Handle]struct{}
}

func (t *lockTable) add(h *Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPath == nil {
		t.byPath = map[string]map[*Handle]struct{}{}
	}
	hs := t.byPath[h.path]
	if hs == nil {
		hs = map[*Handle]struct{}{}
		t.byPath[h.path] = hs
	}
	hs[h] = struct{}{}
}

func (t *lockTable) remove(h *Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if hs := t.byPath[h.path]; hs != nil {
		delete(hs, h)
		if len(hs) == 0 {
			delete(t.byPath, h.path)
		}
	}
}

func (t *lockTable) has(h *Handle) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byPath[h.path][h]
	return ok
}

// loseAll empties the table: the session expired, and every lock with it
// (loseLock).
func (t *lockTable) loseAll(cause error, now time.Time) {
	t.mu.Lock()
	all := t.byPath
	t.byPath = nil
	t.mu.Unlock()
	for _, hs := range all {
		for h := range hs {
			h.loseLock(cause, now)
		}
	}
}

// endPath ends the lock contexts of every handle on path with cause.
func (t *lockTable) endPath(path string, cause error) {
	t.mu.Lock()
	var hs []*Handle
	for h := range t.byPath[path] {
		hs = append(hs, h)
	}
	t.mu.Unlock()
	for _, h := range hs {
		h.endLock(cause)
	}
}

// releaseEnds reports whether a Release that returned err may have
// released the lock, so the lock context must end: a success, and any
// outcome but a refusal that changed nothing (a stale or bad sequencer, a
// malformed request, a poisoned handle).
func releaseEnds(err error) bool {
	for _, kept := range []error{ErrStaleSequencer, ErrBadSequencer, ErrBadRequest, ErrPoisoned, ErrPermission} {
		if errors.Is(err, kept) {
			return false
		}
	}
	return true
}
