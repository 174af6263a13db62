package master

import (
	"context"
	"log/slog"
	"time"

	"lockcell/fsm"
	"lockcell/sequencer"
	"lockcell/wire"
)

// The master serves the wire methods through endpoints, one struct per
// area (sessions, files, locks, admin), each holding by name the parts its
// methods use; one method serves one wire method, shaped check (the
// request, the caller's right), verify (leadership, for a read), read (one
// view of the state) and answer. Dispatch admits a call (methods.go) and
// hands it to its endpoint's method: a call carries only who asked and
// what it was admitted with, never the parts.

// call is one request in flight: who asked and what Dispatch admitted it
// with.
type call struct {
	caller Caller
	admin  bool // the caller is the cell's admin principal
	h      *wire.Header
	path   string // the node the call is about, once known (for the audit log)
	epoch  uint64
	stop   <-chan struct{}
	// stale, for a follower read (follower.go), replaces the leadership
	// proof of the read handlers with a proof of freshness.
	stale *staleRead
}

// isAdmin reports whether the caller is the cell's admin principal.
func (c *call) isAdmin() bool { return c.admin }

// liveSession answers SessionExpired unless the call's session is live in v.
func (c *call) liveSession(v fsm.View) error {
	if !v.SessionExists(c.h.Session) {
		return wire.Errorf(wire.CodeSessionExpired, "session %d does not exist or has expired", c.h.Session)
	}
	return nil
}

// writes is how an endpoint changes the state: a command stamped with
// the call (apply), proposed after the cachers of every name it may
// change have let go (the invalidator), through Raft.
type writes struct {
	clock Clock
	state *fsm.FSM
	cons  Consensus
	inv   *invalidator
	// quota is what commands that may grow the namespace carry, shared
	// by all of them and never changed (quota.go).
	quota *fsm.Quota
}

func (w *writes) now() int64 { return w.clock.Now().UnixNano() }

// apply proposes a command carrying the call's request id and caller
// (with the proxy it came through, for the audit trail) and returns the
// state machine's result, or its error. One read of the state finds both
// the names to invalidate and the handle's name for the audit log.
func (w *writes) apply(ctx context.Context, c *call, cmd *fsm.Command) (*fsm.Result, error) {
	cmd.Time = w.now()
	cmd.Session, cmd.Incarnation = c.h.Session, c.h.Incarnation
	cmd.Principal, cmd.Admin, cmd.Proxy = c.caller.Principal, c.isAdmin(), c.caller.Proxy
	w.setQuota(cmd)
	var buf [8]string // most commands change a name or two: no allocation for them
	names := buf[:0]
	_ = w.state.Read(func(v fsm.View) error {
		if handle := cmd.HandleOf(); c.path == "" && handle != 0 {
			c.path, _ = v.HandlePath(c.h.Session, handle) // for the audit log
		}
		names = v.AppendAffectedPaths(names, cmd)
		return nil
	})
	if c.h.Method.Mutating() {
		if c.h.Seq == 0 {
			return nil, wire.Errorf(wire.CodeBadRequest, "%s needs a request id (header seq)", c.h.Method)
		}
		cmd.Seq, cmd.Ack = c.h.Seq, c.h.Ack
	}
	res, err := w.applyAfter(ctx, c.stop, names, cmd)
	if err != nil {
		return nil, err
	}
	return res, resultErr(res)
}

// applyInvalidating applies cmd after invalidating every cache of a name
// it could change.
func (w *writes) applyInvalidating(ctx context.Context, stop <-chan struct{}, cmd *fsm.Command) (*fsm.Result, error) {
	var names []string
	_ = w.state.Read(func(v fsm.View) error { names = v.AffectedPaths(cmd); return nil })
	return w.applyAfter(ctx, stop, names, cmd)
}

// applyAfter applies cmd after invalidating every cache of names, the
// names cmd could change.
func (w *writes) applyAfter(ctx context.Context, stop <-chan struct{}, names []string, cmd *fsm.Command) (*fsm.Result, error) {
	err := w.inv.invalidate(ctx, stop, names)
	defer w.inv.release(names)
	if err != nil {
		return nil, err
	}
	return w.cons.Apply(ctx, cmd)
}

// reads is how an endpoint reads the state: one view under one lock
// (read, view), and for a linearizable read a proof of leadership begun
// after the read arrived (verify).
type reads struct {
	cell  string
	state *fsm.FSM
	proof *leadershipProof
	// bound is the longest a read waits for its proof: half a lease.
	bound time.Duration
}

// view runs fn on one view of the state.
func (r *reads) view(fn func(v fsm.View) error) error { return r.state.Read(fn) }

// read runs fn on one view of the state.
func (r *reads) read(fn func(v fsm.View)) {
	_ = r.state.Read(func(v fsm.View) error { fn(v); return nil })
}

// verify makes a read linearizable: a round of contact with a quorum
// that began after the read arrived succeeded, so this replica was still
// the leader after the read began and every write acknowledged before it
// is in the local state machine. The caller then reads the state once,
// checking first that the session is live (call.liveSession).
//
// Reads share rounds (leadershipProof.since): every read that arrives
// while a round is in flight is answered by the one round after it, so a
// thousand concurrent reads cost the leader one or two rounds, not a
// thousand. A round that began before a read arrived never vouches for
// it: it might have been answered by a quorum that has since elected a
// successor.
func (r *reads) verify(ctx context.Context) error {
	// Bounded: a Raft that cannot confirm within half a lease (its leader
	// loop hung on a stalled disk) is answered NotMaster, so the client
	// goes on to a successor instead of waiting out its call.
	_, err := r.proof.sinceWithin(ctx, r.proof.now(), r.bound)
	if err != nil && !bugReadNoVerify {
		if err == errProofTimeout {
			return errStopped
		}
		return err
	}
	return nil
}

// sessionEndpoint serves the session calls: CreateSession, CloseSession,
// ListSessions, ResumeSession (KeepAlive is DispatchKeepAlive's).
type sessionEndpoint struct {
	cfg            *Config
	w              *writes
	r              *reads
	sess           *sessions
	auditRation    *auditRation
	reserveSession func(ctx context.Context, caller Caller) (func(), error) // limits.go
}

// fileEndpoint serves the calls on names and their contents: Open,
// SetContents, SetACL, Close, Delete, GetContentsAndStat, GetStat,
// ReadDir.
type fileEndpoint struct {
	cfg           *Config
	w             *writes
	r             *reads
	inv           *invalidator
	reserveHandle func(ctx context.Context, session uint64) (func(), error) // limits.go
	polls         *subtreePolls                                             // subtree.go
}

// lockEndpoint serves the lock calls: Acquire, Release, CancelAcquire,
// GetSequencer, CheckSequencer, BreakLock, ListLocks, RequestRelease.
type lockEndpoint struct {
	cfg   *Config
	w     *writes
	r     *reads
	waits *acquireWaits
	sess  *sessions
	stats *masterStats
	asks  *releaseAsks
}

// adminEndpoint serves the operators' calls: Backup, QuotaUsage and the
// membership calls (ReplicaAdd, ReplicaRemove, ReplicaList,
// ReplicaTransferLeadership).
type adminEndpoint struct {
	cfg     *Config
	w       *writes
	r       *reads
	inv     *invalidator
	sess    *sessions
	backups *backupStore
	// members is the membership part (membership.go, monitor.go), which
	// the master's membership loop shares.
	members *memberPart
}

// memberPart is the membership part: the changes of the Raft
// configuration, serialised by one semaphore (membership), the member
// table, the health of voters and the monitoring role.
type memberPart struct {
	cfg     *Config
	cons    Consensus
	r       *reads
	log     *slog.Logger
	changes *membership
}

func (s *memberPart) now() int64 { return s.cfg.Clock.Now().UnixNano() }

func (s *memberPart) read(fn func(v fsm.View)) { s.r.read(fn) }

// endpoints are a Server's endpoints, one per area.
type endpoints struct {
	sessions sessionEndpoint
	files    fileEndpoint
	locks    lockEndpoint
	admin    adminEndpoint
	proxies  proxyEndpoint
}

// newEndpoints gives each endpoint the parts it uses.
func newEndpoints(p *parts) *endpoints {
	return &endpoints{
		sessions: sessionEndpoint{cfg: &p.cfg, w: p.w, r: p.r, sess: p.sess, auditRation: p.auditRation, reserveSession: p.reserveSession},
		files:    fileEndpoint{cfg: &p.cfg, w: p.w, r: p.r, inv: p.inv, reserveHandle: p.reserveHandle, polls: p.polls},
		locks:    lockEndpoint{cfg: &p.cfg, w: p.w, r: p.r, waits: &p.waits, sess: p.sess, stats: &p.stats, asks: &p.asks},
		admin:    adminEndpoint{cfg: &p.cfg, w: p.w, r: p.r, inv: p.inv, sess: p.sess, backups: &p.backups, members: p.mp},
		proxies:  proxyEndpoint{p: p},
	}
}

// A sequencer's modes are the state machine's (each line fails to compile
// when a pair differs).
const (
	_ = uint64(fsm.LockPermit) - uint64(sequencer.Permit) + (uint64(sequencer.Permit) - uint64(fsm.LockPermit))
	_ = uint64(fsm.LockShared) - uint64(sequencer.Shared) + (uint64(sequencer.Shared) - uint64(fsm.LockShared))
	_ = uint64(fsm.LockExclusive) - uint64(sequencer.Exclusive) + (uint64(sequencer.Exclusive) - uint64(fsm.LockExclusive))
)

// fence verifies a sequencer attached to a handle call (signature, cell)
// and turns it into the claim the state machine checks atomically; nil
// when none is attached. A permit's claim is its Replicated form (shared
// at the holder's own generation): commands carry it, and every replica,
// of any build, checks it the same way.
func (r *reads) fence(seq []byte) (*fsm.Fence, error) {
	if len(seq) == 0 {
		return nil, nil
	}
	s, err := r.verifySequencer(seq)
	if err != nil {
		return nil, err
	}
	return (&fsm.Fence{Path: s.Path, Mode: uint8(s.Mode), Generation: s.Generation}).Replicated(), nil
}

// verifySequencer checks a sequencer's signature under the cell's key and
// that it names this cell.
func (r *reads) verifySequencer(seq []byte) (sequencer.Sequencer, error) {
	var key []byte
	r.read(func(v fsm.View) { key = v.CellKey() })
	s, err := sequencer.Verify(key, seq)
	if err != nil {
		return s, wire.Errorf(wire.CodeBadSequencer, "%v", err)
	}
	if s.Cell != r.cell {
		return s, wire.Errorf(wire.CodeBadSequencer, "sequencer of cell %q, this is cell %q", s.Cell, r.cell)
	}
	return s, nil
}
