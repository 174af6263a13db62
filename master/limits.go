package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Limits cap what one principal, connection or session may hold, so one
// misbehaving client cannot exhaust the master. A session or handle cap
// reached is answered with wire.CodeTooMany, a quota on the namespace
// (Nodes, ContentBytes, NodesPerPrincipal) with wire.CodeQuotaExceeded.
type Limits struct {
	// SessionsPerPrincipal caps live sessions of one principal.
	SessionsPerPrincipal int
	// Sessions caps live sessions in the cell.
	Sessions int
	// HandlesPerSession caps open handles of one session.
	HandlesPerSession int
	// SessionsPerConn caps live sessions created over one client
	// connection (counted by the master that created them).
	SessionsPerConn int
	// ReadBytesPerSecond is the rate at which each principal but the
	// admin may make the master read: reply bytes plus 2 KiB per call,
	// for listings, contents, stats, session lists and sequencer checks
	// (rations.go). A principal over it waits.
	ReadBytesPerSecond int
	// WriteBytesPerSecond is the rate at which each principal but the
	// admin may propose writes: request bytes plus 256 bytes per call,
	// for every call that proposes a Raft command (rations.go). A
	// principal over it waits.
	WriteBytesPerSecond int
	// Nodes caps the files and directories of the cell, ephemeral ones
	// included and the root not counted. The admin is held to it.
	Nodes int
	// ContentBytes caps the bytes of all files' contents in the cell
	// together: a write counts by what it grows a file, a shrinking write
	// or a delete frees room. The admin is held to it. Every replica holds
	// the contents in memory and in its snapshots, which are at most
	// 1 GiB: keep this plus about 200 bytes a node below that.
	ContentBytes int64
	// NodesPerPrincipal caps the existing nodes one principal created.
	// The admin is exempt (it builds and repairs the tree); its nodes
	// count towards Nodes.
	NodesPerPrincipal int

	// ContentBytesPerPrincipal caps the contents of the files one
	// principal created, whoever writes them: a principal that may write
	// another's file grows it within the creator's share. The admin is
	// exempt; its bytes count towards ContentBytes.
	ContentBytesPerPrincipal int64
	// NodesAdminReserve and ContentBytesAdminReserve are the last part of
	// Nodes and ContentBytes, which only the admin may fill: when the
	// other principals have filled the cell, the admin can still write
	// ACL files, make nodes and repair. Zero derives them from the quota
	// (Reserves: 10,000 nodes and 4 MiB of the defaults). A reserve must
	// be below its quota (Check).
	NodesAdminReserve        int
	ContentBytesAdminReserve int64
	// CacheRegistrationsPerPrincipal caps the cacher registrations of one
	// principal's sessions together: one per session and name it may
	// have cached (a directory for every absence cached in it), held by
	// the master until the name is invalidated or the session ends. A
	// read past it is answered uncacheable. The admin is held to it.
	CacheRegistrationsPerPrincipal int
	// CacheRegistrations caps the cacher registrations of the cell's
	// sessions together, as CacheRegistrationsPerPrincipal.
	CacheRegistrations int
	// EventBytes caps the master memory of all sessions' queued,
	// unacknowledged events together, as estimated by eventBytes
	// (eventbudget.go). A handle event that does not fit is dropped into
	// its session's overflow event; invalidations are always queued and
	// counted.
	EventBytes int64
	// EventBytesPerPrincipal caps the same for the sessions of one
	// principal together, the admin's included.
	EventBytesPerPrincipal int64
	// Backups caps the backups this master builds or holds for paging
	// at once, each a copy of the whole state. Only the admin may take a
	// backup, so the cap is process-wide; there is no per-principal one.
	Backups int
	// HandlesPerPrincipal caps the open handles of one principal's
	// sessions together (the admin too), so that many sessions do not
	// multiply HandlesPerSession.
	HandlesPerPrincipal int
	// Handles caps the open handles in the cell. Every replica holds
	// every handle in its state and its snapshots.
	Handles int
	// IdleSessionTimeout closes a session that has held no open handle
	// and made no call but KeepAlives for this long (idle.go), so a
	// client that leaked its session holds no session slot forever. Zero
	// takes DefaultIdleSessionTimeout; a negative value never closes a
	// session for idleness.
	IdleSessionTimeout time.Duration
}

// DefaultLimits are the limits of a cell that sets none. The event
// budgets are sized by eventBytes (about 270 bytes for a content event on
// a short name): a principal's 8 MiB hold one write's events to a file
// watched by as many sessions as a principal may have (20,000, 5.4 MB)
// with room to spare, the process's 64 MiB one write to a file watched by
// every session the cell may hold (100,000, 27 MB) twice over; a master
// holds about 156 bytes of heap an event.
var DefaultLimits = Limits{SessionsPerPrincipal: 20000, Sessions: 100000, HandlesPerSession: 10000, SessionsPerConn: 4096,
	ReadBytesPerSecond: 8 << 20, WriteBytesPerSecond: 1 << 20, Nodes: 1000000, ContentBytes: 512 << 20, NodesPerPrincipal: 100000,
	ContentBytesPerPrincipal: 64 << 20, CacheRegistrationsPerPrincipal: 100000, CacheRegistrations: 1000000,
	EventBytes: 64 << 20, EventBytesPerPrincipal: 8 << 20,
	Backups: 2, HandlesPerPrincipal: 100000, Handles: 1000000, IdleSessionTimeout: DefaultIdleSessionTimeout}

func (l *Limits) setDefaults() {
	if l.SessionsPerPrincipal <= 0 {
		l.SessionsPerPrincipal = DefaultLimits.SessionsPerPrincipal
	}
	if l.Sessions <= 0 {
		l.Sessions = DefaultLimits.Sessions
	}
	if l.HandlesPerSession <= 0 {
		l.HandlesPerSession = DefaultLimits.HandlesPerSession
	}
	if l.SessionsPerConn <= 0 {
		l.SessionsPerConn = DefaultLimits.SessionsPerConn
	}
	if l.ReadBytesPerSecond <= 0 {
		l.ReadBytesPerSecond = DefaultLimits.ReadBytesPerSecond
	}
	if l.WriteBytesPerSecond <= 0 {
		l.WriteBytesPerSecond = DefaultLimits.WriteBytesPerSecond
	}
	if l.Nodes <= 0 {
		l.Nodes = DefaultLimits.Nodes
	}
	if l.ContentBytes <= 0 {
		l.ContentBytes = DefaultLimits.ContentBytes
	}
	if l.NodesPerPrincipal <= 0 {
		l.NodesPerPrincipal = DefaultLimits.NodesPerPrincipal
	}
	if l.ContentBytesPerPrincipal <= 0 {
		l.ContentBytesPerPrincipal = DefaultLimits.ContentBytesPerPrincipal
	}
	if l.CacheRegistrationsPerPrincipal <= 0 {
		l.CacheRegistrationsPerPrincipal = DefaultLimits.CacheRegistrationsPerPrincipal
	}
	if l.CacheRegistrations <= 0 {
		l.CacheRegistrations = DefaultLimits.CacheRegistrations
	}
	if l.EventBytes <= 0 {
		l.EventBytes = DefaultLimits.EventBytes
	}
	if l.EventBytesPerPrincipal <= 0 {
		l.EventBytesPerPrincipal = DefaultLimits.EventBytesPerPrincipal
	}
	if l.Backups <= 0 {
		l.Backups = DefaultLimits.Backups
	}
	if l.HandlesPerPrincipal <= 0 {
		l.HandlesPerPrincipal = DefaultLimits.HandlesPerPrincipal
	}
	if l.Handles <= 0 {
		l.Handles = DefaultLimits.Handles
	}
	if l.IdleSessionTimeout == 0 {
		l.IdleSessionTimeout = DefaultLimits.IdleSessionTimeout
	}
	l.NodesAdminReserve, l.ContentBytesAdminReserve = l.Reserves()
}

// Reserves returns the admin's reserves of the node and content quotas,
// deriving each one left at zero from its quota (as set, or its default):
// a hundredth of the node quota but at least 100 nodes, a 128th of the
// content quota but at least 1 MiB (4 MiB of the default 512), and in
// either case never more than a tenth of the quota, so that a small quota
// still leaves the other principals most of the cell. An admin repairing
// a cell needs a few nodes and ACL files, not a share of a large cell.
func (l Limits) Reserves() (nodes int, contentBytes int64) {
	n := l.Nodes
	if n <= 0 {
		n = DefaultLimits.Nodes
	}
	b := l.ContentBytes
	if b <= 0 {
		b = DefaultLimits.ContentBytes
	}
	nodes, contentBytes = l.NodesAdminReserve, l.ContentBytesAdminReserve
	if nodes <= 0 {
		nodes = min(max(n/100, 100), n/10)
	}
	if contentBytes <= 0 {
		contentBytes = min(max(b/128, 1<<20), b/10)
	}
	return nodes, contentBytes
}

// ErrReserve says an admin reserve is not below its quota, which would
// leave nothing to the other principals.
var ErrReserve = errors.New("master: an admin reserve must be below its quota")

// Check reports a reserve set at or above its quota (ErrReserve): the
// cell would refuse every other principal's growth.
func (l Limits) Check() error {
	d := l
	d.setDefaults()
	if d.NodesAdminReserve >= d.Nodes {
		return fmt.Errorf("%w: the admin's reserve of nodes is %d, the node quota %d", ErrReserve, d.NodesAdminReserve, d.Nodes)
	}
	if d.ContentBytesAdminReserve >= d.ContentBytes {
		return fmt.Errorf("%w: the admin's reserve of content bytes is %d, the content quota %d", ErrReserve, d.ContentBytesAdminReserve, d.ContentBytes)
	}
	return nil
}

// reservations are sessions and handles whose creating command is being
// proposed: admitted against a cap but not yet counted by the state
// machine. Counting them closes the window between the check and the
// apply, in which concurrent callers used to pass the same check and
// overshoot the cap. A command admitted by a deposed master either
// commits before its successor's epoch entry (and the successor counts it
// in the state) or never, so the caps hold across fail-overs too.
//
// For a moment after the apply a reservation and the state both count
// the same session or handle, until its call gives the reservation back.
// So a check that finds a cap reached while reservations it counted are
// still out does not refuse at once: it waits for them to be given back
// (settled) and checks again, and refuses only a cap reached with none of
// its reservations out, or when the caller's context ends. Callers
// racing for the last places therefore get exactly the cap, however many
// of them there are, even as many as the cap: none is refused early, none
// let past it. A caller at a cap that is simply full is refused at once.
type reservations struct {
	sess *sessions // counts the live sessions by connection

	mu        sync.Mutex // third in the lock order (lockorder.go)
	principal map[string]int
	cell      int
	conn      map[uint64]int
	handles   map[uint64]int // by session

	principalHandles map[string]int
	cellHandles      int
	// settled is closed whenever a reservation is given back while
	// checks wait for their counted reservations (waiting counts them);
	// they wake on it, and the next to wait makes a new one.
	settled chan struct{}
	waiting int
}

// settleLocked wakes the checks waiting for reservations to be given
// back, if any (a release with none waiting allocates nothing). r.mu is
// held.
func (r *reservations) settleLocked() {
	if r.waiting > 0 && r.settled != nil {
		close(r.settled)
		r.settled = nil // the next waiter makes a new one
	}
}

// maxSettleWait bounds how long a check waits for reservations to be
// given back before its refusal stands: they are given back as their
// commands commit, in milliseconds, unless Raft itself is stalled; and
// callers that keep a cap busy with new reservations must not hold a
// refusal off for ever. It bounds a wait for Raft, so it is on the real
// clock, as the master's Raft timeouts are.
const maxSettleWait = 2 * time.Second

// admit runs check under r.mu until it admits (nil) or refuses with no
// reservation it counted still out (out false), waiting between tries
// for reservations to be given back; if ctx ends or maxSettleWait passes
// first, the last refusal stands. take runs under r.mu with the
// admission.
func (r *reservations) admit(ctx context.Context, check func() (out bool, err error), take func()) error {
	var expired <-chan time.Time
	for {
		r.mu.Lock()
		out, err := check()
		if err == nil {
			take()
			r.mu.Unlock()
			return nil
		}
		if !out {
			r.mu.Unlock()
			return err
		}
		if r.settled == nil {
			r.settled = make(chan struct{})
		}
		settled := r.settled
		r.waiting++
		r.mu.Unlock()
		if expired == nil {
			t := time.NewTimer(maxSettleWait)
			defer t.Stop()
			expired = t.C
		}
		stop := false
		select {
		case <-settled:
		case <-expired:
			stop = true
		case <-ctx.Done():
			stop = true
		}
		r.mu.Lock()
		r.waiting--
		r.mu.Unlock()
		if stop {
			return err
		}
	}
}

// reserveSession admits one more session of caller against the
// per-principal, per-cell and per-connection caps, or says which is
// reached (reservations says when it waits first). The returned func
// gives the reservation back.
func (s *parts) reserveSession(ctx context.Context, caller Caller) (func(), error) {
	r := &s.reserved
	lim := s.cfg.Limits
	check := func() (bool, error) {
		var own, sessions int
		s.read(func(v fsm.View) {
			own = v.PrincipalSessions(caller.Principal)
			_, sessions, _, _ = v.Counts()
		})
		if n := own + r.principal[caller.Principal]; n >= lim.SessionsPerPrincipal {
			return r.principal[caller.Principal] > 0, wire.Errorf(wire.CodeTooMany, "principal %q has %d live sessions, the limit", caller.Principal, n)
		}
		if sessions+r.cell >= lim.Sessions {
			return r.cell > 0, wire.Errorf(wire.CodeTooMany, "the cell holds %d sessions, the limit", sessions+r.cell)
		}
		if caller.Conn != 0 {
			if n := r.sess.connSessions(caller.Conn) + r.conn[caller.Conn]; n >= lim.SessionsPerConn {
				return r.conn[caller.Conn] > 0, wire.Errorf(wire.CodeTooMany, "%d live sessions were created over this connection, the limit", n)
			}
		}
		return false, nil
	}
	take := func() {
		r.principal[caller.Principal]++
		r.cell++
		r.conn[caller.Conn]++
	}
	if err := r.admit(ctx, check, take); err != nil {
		return nil, err
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.principal[caller.Principal]--; r.principal[caller.Principal] <= 0 {
			delete(r.principal, caller.Principal)
		}
		r.cell--
		if r.conn[caller.Conn]--; r.conn[caller.Conn] <= 0 {
			delete(r.conn, caller.Conn)
		}
		r.settleLocked()
	}, nil
}

// reserveHandle admits one more handle of session against the
// per-session, per-principal (the session's principal) and per-cell caps,
// or says which is reached (reservations says when it waits first).
func (s *parts) reserveHandle(ctx context.Context, session uint64) (func(), error) {
	r := &s.reserved
	lim := s.cfg.Limits
	var principal string
	check := func() (bool, error) {
		var open, own, cell int
		s.read(func(v fsm.View) {
			principal, _ = v.SessionPrincipal(session)
			open, own, cell = v.SessionHandles(session), v.PrincipalHandles(principal), v.Handles()
		})
		if n := open + r.handles[session]; n >= lim.HandlesPerSession {
			return r.handles[session] > 0, wire.Errorf(wire.CodeTooMany, "session %d has %d open handles, the limit", session, n)
		}
		if n := own + r.principalHandles[principal]; n >= lim.HandlesPerPrincipal {
			return r.principalHandles[principal] > 0, wire.Errorf(wire.CodeTooMany, "principal %q has %d open handles, the limit", principal, n)
		}
		if n := cell + r.cellHandles; n >= lim.Handles {
			return r.cellHandles > 0, wire.Errorf(wire.CodeTooMany, "the cell holds %d open handles, the limit", n)
		}
		return false, nil
	}
	take := func() {
		r.handles[session]++
		r.principalHandles[principal]++
		r.cellHandles++
	}
	if err := r.admit(ctx, check, take); err != nil {
		return nil, err
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.handles[session]--; r.handles[session] <= 0 {
			delete(r.handles, session)
		}
		if r.principalHandles[principal]--; r.principalHandles[principal] <= 0 {
			delete(r.principalHandles, principal)
		}
		r.cellHandles--
		r.settleLocked()
	}, nil
}
