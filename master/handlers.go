package master

import (
	"context"
	"errors"
	"sync"
	"time"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/sequencer"
	"lockcell/wire"
)

func (c *call) open(ctx context.Context, req *wire.OpenRequest) (*wire.OpenResponse, error) {
	if err := wire.ValidateName(c.cfg.Cell, req.Path); err != nil {
		return nil, err
	}
	if req.EventMask&^(wire.MaskContentsModified|wire.MaskChildAdded|wire.MaskChildRemoved|
		wire.MaskLockAcquired|wire.MaskConflictingLock|wire.MaskHandleInvalid) != 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "unknown event mask bits %#x", req.EventMask)
	}
	if !wire.ValidOpenFlags(req.Flags) {
		return nil, wire.Errorf(wire.CodeBadRequest, "unknown open flags %#x", req.Flags)
	}
	if len(req.Contents) > wire.MaxContents {
		return nil, wire.Errorf(wire.CodeTooLarge, "%s: contents of %d bytes exceed the limit of %d", req.Path, len(req.Contents), wire.MaxContents)
	}
	if req.Flags&wire.OpenCreate == 0 && (req.Flags&(wire.OpenExcl|wire.OpenEphemeral) != 0 || len(req.Contents) > 0) {
		return nil, wire.Errorf(wire.CodeBadRequest, "%s: exclusive, ephemeral and initial contents need the create flag", req.Path)
	}
	unreserve, err := c.reserveHandle(ctx, c.h.Session)
	if err != nil {
		return nil, err
	}
	defer unreserve()
	c.path = req.Path
	delay := time.Duration(req.LockDelayMillis) * time.Millisecond
	switch {
	case delay < 0 || delay > MaxLockDelay:
		return nil, wire.Errorf(wire.CodeBadRequest, "lock-delay %v is outside 0..%v", delay, MaxLockDelay)
	case delay == 0:
		delay = c.cfg.DefaultLockDelay
	}
	// As for a cached read: register before the open is applied, so a
	// delete that follows invalidates the handle the caller may reuse.
	// Only an open of an existing node may be reused (one that creates
	// would first invalidate this very registration and wait for us).
	//
	// A missing name's absence is cached under its parent directory (see
	// negativeCacher), registered here for the same reason.
	cacheMissing := req.CacheMissing && req.Flags&wire.OpenCreate == 0
	cacheable, missingCacheable := false, false
	if req.Cache || cacheMissing {
		var readable, negative bool
		var principal string
		admin := c.isAdmin()
		c.read(func(v fsm.View) {
			principal, _ = v.SessionPrincipal(c.h.Session)
			readable = v.Exists(req.Path) && v.Allowed(req.Path, c.caller.Principal, admin, acl.Read) == nil
			negative = cacheMissing && negativeCacher(v, req.Path, c.caller.Principal, admin)
		})
		cacheable = req.Cache && readable && c.registerCacher(c.h.Session, principal, req.Path)
		missingCacheable = negative && c.registerCacher(c.h.Session, principal, wire.Parent(req.Path))
	}
	res, err := c.apply(ctx, commandOf(fsm.OpenArgs{Path: req.Path, Flags: req.Flags,
		Contents: req.Contents, LockDelay: int64(delay), EventMask: req.EventMask}))
	if re := (*fsm.Error)(nil); cacheMissing && errors.As(err, &re) && re.Kind == fsm.KindNotFound {
		return &wire.OpenResponse{Missing: true, Cacheable: missingCacheable}, nil
	}
	if err != nil {
		return nil, err
	}
	return &wire.OpenResponse{Handle: res.Handle, Created: res.Created, Stat: toStat(res.Stat), Cacheable: cacheable}, nil
}

// negativeCacher reports whether a caller (principal; admin: the cell's
// admin) that asked to cache the absence of name may be registered as a
// cacher of name's parent directory: it may read the directory, and name
// is invisible to it (missing, or a node it may neither read nor write,
// which Open answers alike).
//
// Why the parent, and why read on it. The cached absence must be
// invalidated by every change that could make name appear to the caller:
// its create, and an ACL change (of the node, or of an ACL file it names)
// that could reveal a hidden node. Each of those changes the parent's
// listing and so invalidates the parent (View.AffectedPaths). Registering
// on name itself would also work for a missing name, but not for a hidden
// one: its contents, lock and delete invalidations would tell the caller
// of activity on a node it may not see, and answering a hidden name
// uncacheable where a missing one is cacheable would tell it the node
// exists. Registered on the parent, the caller hears exactly the
// invalidations any reader of that listing hears, and a caller that may
// read it learns nothing it could not learn by listing it; one that may
// not read it is never registered, so its answers are the uncached ones,
// word for word. Whether it is registered depends only on what the caller
// may know: the parent's readability and name's invisibility to it.
func negativeCacher(v fsm.View, name, principal string, admin bool) bool {
	parent := wire.Parent(name)
	if parent == "" || v.Allowed(parent, principal, admin, acl.Read) != nil {
		return false
	}
	return !v.Exists(name) ||
		(v.Allowed(name, principal, admin, acl.Read) != nil && v.Allowed(name, principal, admin, acl.Write) != nil)
}

func (c *call) setContents(ctx context.Context, req *wire.SetContentsRequest) (*wire.StatResponse, error) {
	if len(req.Contents) > wire.MaxContents {
		return nil, wire.Errorf(wire.CodeTooLarge, "contents of %d bytes exceed the limit of %d", len(req.Contents), wire.MaxContents)
	}
	fence, err := c.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	cmd := commandOf(fsm.SetContentsArgs{Handle: req.Handle,
		Contents: req.Contents, IfGen: req.IfGeneration, HasIfGen: req.HasIfGeneration})
	cmd.Fence = fence
	res, err := c.apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return &wire.StatResponse{Stat: toStat(res.Stat)}, nil
}

func (c *call) handleCall(ctx context.Context, req *wire.HandleRequest) (any, error) {
	fence, err := c.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	switch c.h.Method {
	case wire.MethodClose:
		// Closing is always allowed: a stale holder must be able to let go.
		_, err := c.apply(ctx, commandOf(fsm.CloseArgs{Handle: req.Handle}))
		return &wire.Empty{}, err
	case wire.MethodDelete:
		cmd := commandOf(fsm.DeleteArgs{Handle: req.Handle})
		cmd.Fence = fence
		_, err := c.apply(ctx, cmd)
		return &wire.Empty{}, err
	case wire.MethodRelease:
		// A sequencer makes the release fenced: it applies only while the
		// lock is held at the sequencer's generation, checked in the same
		// entry, so a holder acting on an old grant cannot free a later one.
		if fence != nil {
			var path string
			var ok bool
			c.read(func(v fsm.View) { path, ok = v.HandlePath(c.h.Session, req.Handle) })
			if ok && path != fence.Path {
				return nil, wire.Errorf(wire.CodeBadRequest, "the sequencer names the lock of %s, not of this handle's %s", fence.Path, path)
			}
		}
		cmd := commandOf(fsm.ReleaseArgs{Handle: req.Handle})
		cmd.Fence = fence
		_, err := c.apply(ctx, cmd)
		return &wire.Empty{}, err
	}
	// Both reads of the state are functions that capture nothing, handed
	// hr, a pooled handleRead (capturing closures cost four allocations).
	hr := handleReads.Get().(*handleRead)
	*hr = handleRead{c: c, req: req, fence: fence, isRead: c.h.Method != wire.MethodGetSequencer}
	defer func() {
		*hr = handleRead{}
		handleReads.Put(hr)
	}()
	// Checked before registering as a cacher too, so a caller that may
	// not read the node is never sent its invalidations. Registering
	// comes before the read, so a write that starts after this point
	// invalidates what we are about to return.
	if hr.isRead {
		err := c.state.ReadWith(hr, func(v fsm.View, arg any) error {
			hr := arg.(*handleRead)
			c := hr.c
			if err := c.checkRead(v, hr.req.Handle); err != nil || !hr.req.Cache {
				return err
			}
			hr.name, hr.named = v.HandlePath(c.h.Session, hr.req.Handle)
			hr.principal, _ = v.SessionPrincipal(c.h.Session)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if hr.named {
			hr.cacheable = c.registerCacher(c.h.Session, hr.principal, hr.name)
		}
	}
	if err := c.verifyRead(ctx); err != nil {
		return nil, err
	}
	// The answer comes from one view of the state, after VerifyLeader.
	err = c.state.ReadWith(hr, func(v fsm.View, arg any) error {
		hr := arg.(*handleRead)
		c := hr.c
		if err := c.liveSession(v); err != nil {
			return err
		}
		if hr.isRead {
			// Decided again after VerifyLeader: an ACL change
			// acknowledged before this read began binds it.
			if err := c.checkRead(v, hr.req.Handle); err != nil {
				return err
			}
		}
		if hr.fence != nil {
			if ok, reason := v.FenceValidFor(hr.fence, c.caller.Principal, c.isAdmin()); !ok {
				return wire.Errorf(wire.CodeStaleSequencer, "%s", reason)
			}
		}
		var err error
		hr.resp, err = c.readHandle(v, hr.req, hr.cacheable)
		return err
	})
	if err != nil {
		return nil, err
	}
	return hr.resp, nil
}

// handleReads hold handleCall's handleReads between calls; nothing keeps
// one past its call (its answer is returned by value).
var handleReads = sync.Pool{New: func() any { return new(handleRead) }}

// handleRead is what handleCall's two reads of the state are given and
// find.
type handleRead struct {
	c      *call
	req    *wire.HandleRequest
	fence  *fsm.Fence
	isRead bool // not GetSequencer
	// Before VerifyLeader: the handle's name and the session's
	// principal, for registering a cacher (named: the handle has one),
	// and whether it was registered.
	name, principal  string
	named, cacheable bool
	// After it: the answer.
	resp any
}

// readHandle answers a read on a handle (GetSequencer, ReadDir, GetStat,
// GetContentsAndStat) in view v.
func (c *call) readHandle(v fsm.View, req *wire.HandleRequest, cacheable bool) (any, error) {
	switch c.h.Method {
	case wire.MethodGetSequencer:
		held, err := v.HeldLock(c.h.Session, req.Handle)
		if err != nil {
			return nil, err
		}
		seq := sequencer.Sign(v.CellKey(), sequencer.Sequencer{Cell: c.cfg.Cell, Path: held.Path,
			Mode: sequencer.Mode(held.Mode), Generation: held.Generation})
		return &wire.SequencerResponse{Sequencer: seq}, nil
	case wire.MethodReadDir:
		return c.readDir(v, req, cacheable)
	case wire.MethodGetStat:
		hv, err := v.LookupHandle(c.h.Session, req.Handle)
		if err != nil {
			return nil, err
		}
		st := toStat(hv.Stat)
		st.Holders, st.Waiters, st.LockDelayBy = lockHolders(v, hv), lockWaiters(v, hv), lockDelayBy(v, hv)
		return &wire.StatResponse{Stat: st, Cacheable: cacheable}, nil
	default: // GetContentsAndStat
		hv, err := v.LookupHandle(c.h.Session, req.Handle)
		if err != nil {
			return nil, err
		}
		if hv.Stat.Dir {
			return nil, wire.Errorf(wire.CodeIsDir, "%s is a directory", hv.Handle.Path)
		}
		st := toStat(hv.Stat)
		st.Holders, st.Waiters, st.LockDelayBy = lockHolders(v, hv), lockWaiters(v, hv), lockDelayBy(v, hv)
		return &wire.ContentsResponse{Contents: hv.Contents, Stat: st, Cacheable: cacheable}, nil
	}
}

// lockHolders names the holders of the lock on the node of hv, looked up
// in v, for a read's Stat (the caller passed the read check in v). A free
// lock costs nothing, so the common read allocates no more than before.
func lockHolders(v fsm.View, hv fsm.HandleView) []wire.LockHolder {
	if hv.Stat.LockHolders == 0 {
		return nil
	}
	hs := v.LockHolders(hv.Handle.Path, wire.MaxStatHolders)
	out := make([]wire.LockHolder, len(hs))
	for i, h := range hs {
		out[i] = wireHolder(h)
	}
	return out
}

// wireHolder is a holder as the wire names it: session, principal,
// declared identity and acquisition time.
func wireHolder(h fsm.LockHolderView) wire.LockHolder {
	return wire.LockHolder{Session: h.Session, Principal: h.Principal, Host: h.Host, PID: h.PID, Program: h.Program, Since: h.Since}
}

// lockDelayBy names what started the latest lock-delay on the node of hv,
// for a read's Stat like its holders; nil when none was ever imposed.
func lockDelayBy(v fsm.View, hv fsm.HandleView) *wire.LockDelayCause {
	if hv.Stat.LockDelayUntil == 0 {
		return nil
	}
	by, _ := v.LockDelayBy(hv.Handle.Path)
	if by == nil {
		return nil
	}
	return &wire.LockDelayCause{Session: by.Session, Principal: by.Principal, Host: by.Host, PID: by.PID, Program: by.Program, Time: by.Time}
}

// readDir answers one page of a listing (the cursor and limit are in the
// request), as the caller sees it: children it may neither read nor write
// are left out, exactly as Open reports them absent. A page is at most
// wire.MaxDirPage entries and wire.DirPageBytes of names, so the reply
// always fits a frame however large the directory.
func (c *call) readDir(v fsm.View, req *wire.HandleRequest, cacheable bool) (*wire.ReadDirResponse, error) {
	if len(req.After) > wire.MaxNameLen {
		return nil, wire.Errorf(wire.CodeBadRequest, "listing cursor of %d bytes: no name is longer than %d", len(req.After), wire.MaxNameLen)
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > wire.MaxDirPage {
		limit = wire.MaxDirPage
	}
	page, err := v.ReadDirPage(c.h.Session, req.Handle, fsm.DirQuery{
		After: req.After, Limit: limit, MaxBytes: wire.DirPageBytes, EntryOverhead: wire.DirEntryOverhead,
		Principal: c.caller.Principal, Admin: c.isAdmin()})
	if err != nil {
		return nil, err
	}
	out := &wire.ReadDirResponse{Entries: make([]wire.DirEntry, len(page.Entries)), Cacheable: cacheable, More: page.More}
	for i, e := range page.Entries {
		out.Entries[i] = wire.DirEntry{Name: e.Name, Dir: e.Dir}
	}
	return out, nil
}

// acquire takes a lock. A blocking acquire queues in the replicated FIFO
// and parks here until the state machine hands it the lock (in the entry
// that released it), the node goes away, or the caller gives up; giving up
// withdraws the wait through Raft, undoing a grant that raced the cancel.
func (c *call) acquire(ctx context.Context, req *wire.AcquireRequest) (*wire.AcquireResponse, error) {
	if req.Mode != wire.LockExclusive && req.Mode != wire.LockShared {
		return nil, wire.Errorf(wire.CodeBadRequest, "unknown lock mode %d", req.Mode)
	}
	var woke chan struct{}
	key := waitKey{c.h.Session, req.Handle, c.h.Seq}
	if req.Wait {
		// Attached before proposing, so no wake-up is missed; a retry of
		// this request id re-attaches to a wait it left detached.
		var err error
		if woke, err = c.waits.attach(ctx, key); err != nil {
			return nil, err
		}
	}
	res, err := c.apply(ctx, commandOf(fsm.AcquireArgs{Handle: req.Handle, Mode: req.Mode, Wait: req.Wait}))
	if woke != nil && (err != nil || res.Granted) {
		c.waits.leave(key, woke)
	}
	if err != nil {
		return nil, err
	}
	if res.Granted {
		return c.granted(req, res.LockGen), nil
	}
	// Queued (now, or by an earlier try of this request id at another master).
	for {
		var state fsm.WaitState
		var gen uint64
		var err error
		c.read(func(v fsm.View) { state, gen, err = v.LockWait(c.h.Session, req.Handle, c.h.Seq) })
		switch {
		case err != nil:
			c.waits.leave(key, woke)
			return nil, err
		case state == fsm.WaitGranted:
			c.waits.leave(key, woke)
			return c.granted(req, gen), nil
		case state == fsm.WaitGone:
			c.waits.leave(key, woke)
			return nil, wire.Errorf(wire.CodeCanceled, "the wait for the lock was withdrawn")
		}
		select {
		case <-woke:
		case <-c.stop:
			// Leave the wait queued: the client retries this request id at
			// the new master, which finds it queued (or granted).
			c.waits.leave(key, woke)
			return nil, errStopped
		case <-ctx.Done():
			// The stream ended: the client gave up (it says so with a
			// CancelAcquire) or lost the connection and retries this
			// request id. Either way the wait keeps its place for now:
			// withdrawing it here would send a client that only redialled
			// to the tail of the queue (acquireWaits).
			session, handle, seq := c.h.Session, req.Handle, c.h.Seq
			c.waits.detach(key, woke, c.stop, c.detachedFor(session), func() { c.withdraw(session, handle, seq) })
			return nil, ctx.Err()
		}
	}
}

// granted answers a granted Acquire with the grant's generation and its
// sequencer, signed as GetSequencer would sign it, so the holder needs no
// second call to fence its work. A sequencer for a grant that has since
// moved on is no harm: every check of it (the master's, a Guard's)
// compares its generation with the lock's.
func (c *call) granted(req *wire.AcquireRequest, gen uint64) *wire.AcquireResponse {
	var key []byte
	var path string
	var ok bool
	c.read(func(v fsm.View) {
		key = v.CellKey()
		path, ok = v.HandlePath(c.h.Session, req.Handle)
	})
	resp := &wire.AcquireResponse{LockGen: gen}
	if ok {
		resp.Sequencer = sequencer.Sign(key, sequencer.Sequencer{Cell: c.cfg.Cell, Path: path,
			Mode: sequencer.Mode(req.Mode), Generation: gen})
	}
	return resp
}

// detachedFor is how long a wait of session whose call broke off is kept
// for the client's retry, asked again whenever that runs out: until the
// session's lease ends (a live client renews it, a gone one does not),
// and for one lease at most, renewed or not.
func (c *call) detachedFor(session uint64) func() time.Duration {
	deadline := c.cfg.Clock.Now().Add(c.sess.grantTTL())
	return func() time.Duration {
		now := c.cfg.Clock.Now()
		d := deadline.Sub(now)
		if left, ok := c.sess.leaseLeft([]uint64{session}, now)[session]; ok {
			d = min(d, left)
		}
		return max(d, 0)
	}
}

// withdraw removes an abandoned wait (or undoes its grant) through Raft:
// the wait detached (its call's stream ended) and no call of its request
// id came back in time (detachedFor).
func (c *call) withdraw(session, handle, seq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.applyInvalidating(ctx, c.stop, &fsm.Command{Session: session, Time: c.now(),
		Payload: &fsm.CancelWaitArgs{Handle: handle, WaitSeq: seq}})
	if err == nil {
		err = resultErr(res)
	}
	var re *fsm.Error
	if err != nil && !(errors.As(err, &re) && re.Kind == fsm.KindHandleInvalid) {
		c.log.Warn("withdrawing an abandoned lock wait failed; the client retries it", "handle", handle, "seq", seq, "err", err)
	}
}

func (c *call) cancelAcquire(ctx context.Context, req *wire.CancelAcquireRequest) (*wire.Empty, error) {
	_, err := c.apply(ctx, commandOf(fsm.CancelWaitArgs{Handle: req.Handle, WaitSeq: req.WaitSeq}))
	if err == nil { // the client withdrew it itself: nothing left to withdraw
		c.waits.forget(waitKey{c.h.Session, req.Handle, req.WaitSeq})
	}
	return &wire.Empty{}, err
}

func toStat(s fsm.Stat) wire.Stat {
	return wire.Stat{
		Instance: s.Instance, ContentGen: s.ContentGen, LockGen: s.LockGen, ACLGen: s.ACLGen,
		Checksum: s.Checksum, Size: s.Size, CTime: s.CTime, MTime: s.MTime, Dir: s.Dir,
		Ephemeral: s.Ephemeral, ReadACL: s.ReadACL, WriteACL: s.WriteACL, ChangeACL: s.ChangeACL,
		LockMode: s.LockMode, LockHolders: s.LockHolders, LockWaiters: s.LockWaiters,
		LockDelayUntil: s.LockDelayUntil,
	}
}

// fence verifies a sequencer attached to a handle call (signature, cell)
// and turns it into the claim the state machine checks atomically.
func (c *call) fence(seq []byte) (*fsm.Fence, error) {
	if len(seq) == 0 {
		return nil, nil
	}
	s, err := c.verifySequencer(seq)
	if err != nil {
		return nil, err
	}
	return &fsm.Fence{Path: s.Path, Mode: uint8(s.Mode), Generation: s.Generation}, nil
}

func (c *call) verifySequencer(seq []byte) (sequencer.Sequencer, error) {
	var key []byte
	c.read(func(v fsm.View) { key = v.CellKey() })
	s, err := sequencer.Verify(key, seq)
	if err != nil {
		return s, wire.Errorf(wire.CodeBadSequencer, "%v", err)
	}
	if s.Cell != c.cfg.Cell {
		return s, wire.Errorf(wire.CodeBadSequencer, "sequencer of cell %q, this is cell %q", s.Cell, c.cfg.Cell)
	}
	return s, nil
}

// checkSequencer answers whether a sequencer is still valid: signed by
// this cell, and its lock held at that generation in that mode right now
// (a linearizable read). It reads the lock's state, so it needs read on
// the lock's node: a caller without it hears what it would of a lock
// whose node is gone, which tells it nothing about the name.
func (c *call) checkSequencer(ctx context.Context, req *wire.CheckSequencerRequest) (*wire.CheckSequencerResponse, error) {
	s, err := c.verifySequencer(req.Sequencer)
	if err != nil {
		return nil, err
	}
	if err := c.verifyRead(ctx); err != nil {
		return nil, err
	}
	var ok bool
	var reason string
	err = c.state.Read(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		ok, reason = v.FenceValidFor(&fsm.Fence{Path: s.Path, Mode: uint8(s.Mode), Generation: s.Generation},
			c.caller.Principal, c.isAdmin())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &wire.CheckSequencerResponse{Valid: ok, Reason: reason}, nil
}

// commandOf returns a command whose payload is args, both in one
// allocation (a command literal with a payload literal is two): the
// calls on every request's path propose their commands through it.
func commandOf[P any, PP interface {
	*P
	fsm.Payload
}](args P) *fsm.Command {
	c := &commandWith[P]{args: args}
	c.cmd.Payload = PP(&c.args)
	return &c.cmd
}

// commandWith is a command and its payload, allocated together.
type commandWith[P any] struct {
	cmd  fsm.Command
	args P
}
