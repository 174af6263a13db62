package master

import (
	"context"
	"errors"
	"time"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// The state machine's sequential names are the wire's: the same flag, the
// same width, the same naming bounds (each line fails to compile when a
// pair differs).
const (
	_ = uint64(fsm.FlagSequential) - uint64(wire.OpenSequential) + (uint64(wire.OpenSequential) - uint64(fsm.FlagSequential))
	_ = uint64(fsm.SeqDigits) - uint64(wire.SeqDigits) + (uint64(wire.SeqDigits) - uint64(fsm.SeqDigits))
	_ = uint64(fsm.SeqMaxNameLen) - uint64(wire.MaxNameLen) + (uint64(wire.MaxNameLen) - uint64(fsm.SeqMaxNameLen))
	_ = uint64(fsm.SeqMaxComponentLen) - uint64(wire.MaxComponentLen) + (uint64(wire.MaxComponentLen) - uint64(fsm.SeqMaxComponentLen))
	_ = uint64(fsm.FlagContainer) - uint64(wire.OpenContainer) + (uint64(wire.OpenContainer) - uint64(fsm.FlagContainer))
	_ = uint64(fsm.MinTTL) - uint64(wire.MinTTL) + (uint64(wire.MinTTL) - uint64(fsm.MinTTL))
	_ = uint64(fsm.MaxTTL) - uint64(wire.MaxTTL) + (uint64(wire.MaxTTL) - uint64(fsm.MaxTTL))
)

func (e *fileEndpoint) open(ctx context.Context, c *call, req *wire.OpenRequest) (*wire.OpenResponse, error) {
	sequential := req.Flags&wire.OpenSequential != 0
	if sequential {
		// The name is the prefix's: it must make valid names with the
		// number appended, and only a create makes one.
		if err := wire.ValidateSeqPrefix(e.cfg.Cell, req.Path); err != nil {
			return nil, err
		}
		if req.Flags&wire.OpenCreate == 0 {
			return nil, wire.Errorf(wire.CodeBadRequest, "%s: a sequential open needs the create flag", req.Path)
		}
		// A name no one has seen yet is in no one's cache: nothing to
		// register (the client never asks; a hostile one is ignored).
		req.Cache, req.CacheMissing = false, false
	} else if err := wire.ValidateName(e.cfg.Cell, req.Path); err != nil {
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
	ttl, err := checkLifetime(req)
	if err != nil {
		return nil, err
	}
	semLimit, err := checkSemaphore(req)
	if err != nil {
		return nil, err
	}
	unreserve, err := e.reserveHandle(ctx, c.h.Session)
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
		delay = e.cfg.DefaultLockDelay
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
		e.r.read(func(v fsm.View) {
			principal, _ = v.SessionPrincipal(c.h.Session)
			readable = v.Exists(req.Path) && v.Allowed(req.Path, c.caller.Principal, admin, acl.Read) == nil
			negative = cacheMissing && negativeCacher(v, req.Path, c.caller.Principal, admin)
		})
		cacheable = req.Cache && readable && e.inv.register(c.h.Session, principal, req.Path)
		missingCacheable = negative && e.inv.register(c.h.Session, principal, wire.Parent(req.Path))
	}
	res, err := e.w.apply(ctx, c, commandOf(fsm.OpenArgs{Path: req.Path, Flags: req.Flags &^ (wire.OpenTTL | wire.OpenSemaphore),
		Contents: req.Contents, LockDelay: int64(delay), EventMask: req.EventMask, TTL: int64(ttl), SemLimit: semLimit}))
	if re := (*fsm.Error)(nil); cacheMissing && errors.As(err, &re) && re.Kind == fsm.KindNotFound {
		return &wire.OpenResponse{Missing: true, Cacheable: missingCacheable}, nil
	}
	if err != nil {
		return nil, err
	}
	if res.Name != "" {
		c.path = res.Name // for the audit log: the name made, not its prefix
	}
	return &wire.OpenResponse{Handle: res.Handle, Created: res.Created, Stat: toStat(res.Stat), Cacheable: cacheable, Name: res.Name}, nil
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

func (e *fileEndpoint) setContents(ctx context.Context, c *call, req *wire.SetContentsRequest) (*wire.StatResponse, error) {
	if len(req.Contents) > wire.MaxContents {
		return nil, wire.Errorf(wire.CodeTooLarge, "contents of %d bytes exceed the limit of %d", len(req.Contents), wire.MaxContents)
	}
	fence, err := e.r.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	cmd := commandOf(fsm.SetContentsArgs{Handle: req.Handle,
		Contents: req.Contents, IfGen: req.IfGeneration, HasIfGen: req.HasIfGeneration})
	cmd.Fence = fence
	res, err := e.w.apply(ctx, c, cmd)
	if err != nil {
		return nil, err
	}
	return &wire.StatResponse{Stat: toStat(res.Stat)}, nil
}

// close closes a handle. Closing is always allowed: a stale holder must be
// able to let go. A sequencer is checked, as on every handle call, though
// closing is never fenced.
func (e *fileEndpoint) close(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.Empty, error) {
	if _, err := e.r.fence(req.Sequencer); err != nil {
		return nil, err
	}
	_, err := e.w.apply(ctx, c, commandOf(fsm.CloseArgs{Handle: req.Handle}))
	return &wire.Empty{}, err
}

// delete deletes the handle's node, fenced by a sequencer if one is given.
func (e *fileEndpoint) delete(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.Empty, error) {
	fence, err := e.r.fence(req.Sequencer)
	if err != nil {
		return nil, err
	}
	cmd := commandOf(fsm.DeleteArgs{Handle: req.Handle})
	cmd.Fence = fence
	_, err = e.w.apply(ctx, c, cmd)
	return &wire.Empty{}, err
}

// getContentsAndStat answers a file's contents and Stat.
func (e *fileEndpoint) getContentsAndStat(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.ContentsResponse, error) {
	fence, cacheable, proxyCacheable, err := e.readable(ctx, c, req)
	if err != nil {
		return nil, err
	}
	var resp *wire.ContentsResponse
	err = e.r.view(func(v fsm.View) error {
		if err := e.stillReadable(v, c, req.Handle, fence); err != nil {
			return err
		}
		hv, err := v.LookupHandle(c.h.Session, req.Handle)
		if err != nil {
			return err
		}
		if hv.Stat.Dir {
			return wire.Errorf(wire.CodeIsDir, "%s is a directory", hv.Handle.Path)
		}
		resp = &wire.ContentsResponse{Contents: hv.Contents, Stat: readStat(v, hv), Cacheable: cacheable, ProxyCacheable: proxyCacheable}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// getStat answers a node's Stat.
func (e *fileEndpoint) getStat(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.StatResponse, error) {
	fence, cacheable, proxyCacheable, err := e.readable(ctx, c, req)
	if err != nil {
		return nil, err
	}
	var resp *wire.StatResponse
	err = e.r.view(func(v fsm.View) error {
		if err := e.stillReadable(v, c, req.Handle, fence); err != nil {
			return err
		}
		hv, err := v.LookupHandle(c.h.Session, req.Handle)
		if err != nil {
			return err
		}
		resp = &wire.StatResponse{Stat: readStat(v, hv), Cacheable: cacheable, ProxyCacheable: proxyCacheable}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// readDir answers one page of a listing (the cursor and limit are in the
// request), as the caller sees it: children it may neither read nor write
// are left out, exactly as Open reports them absent. A page is at most
// wire.MaxDirPage entries and wire.DirPageBytes of names, so the reply
// always fits a frame however large the directory.
func (e *fileEndpoint) readDir(ctx context.Context, c *call, req *wire.HandleRequest) (*wire.ReadDirResponse, error) {
	fence, cacheable, _, err := e.readable(ctx, c, req)
	if err != nil {
		return nil, err
	}
	var resp *wire.ReadDirResponse
	err = e.r.view(func(v fsm.View) error {
		if err := e.stillReadable(v, c, req.Handle, fence); err != nil {
			return err
		}
		resp, err = readDirPage(v, c, req, cacheable)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// readable is the check and verify of a read on a handle: its sequencer
// (fence), the caller's right to read the node, and its registration as a
// cacher if it asked, then the leadership proof. The right is checked
// before registering too, so a caller that may not read the node is never
// sent its invalidations; registering comes before the read, so a write
// that starts after this point invalidates what the read returns.
//
// A proxy filling its cache names its cache session (proxycache.go): it
// is registered for the name likewise, before the read, whether or not
// the client asked to cache.
func (e *fileEndpoint) readable(ctx context.Context, c *call, req *wire.HandleRequest) (fence *fsm.Fence, cacheable, proxyCacheable bool, err error) {
	if fence, err = e.r.fence(req.Sequencer); err != nil {
		return nil, false, false, err
	}
	var name, principal, cacheOwner string
	var named bool
	fill := c.h.ProxyCache != 0 && len(req.Sequencer) == 0 && c.h.Method != wire.MethodReadDir
	err = e.r.view(func(v fsm.View) error {
		if err := c.checkRead(v, req.Handle); err != nil || (!req.Cache && !fill) {
			return err
		}
		name, named = v.HandlePath(c.h.Session, req.Handle)
		principal, _ = v.SessionPrincipal(c.h.Session)
		if fill {
			cacheOwner, _ = v.SessionPrincipal(c.h.ProxyCache)
		}
		return nil
	})
	if err != nil {
		return nil, false, false, err
	}
	if named && req.Cache {
		cacheable = e.inv.register(c.h.Session, principal, name)
	}
	if named && fill {
		proxyCacheable = e.fillRegister(c, cacheOwner, name)
	}
	if err := e.r.verifyRead(ctx, c); err != nil {
		return nil, false, false, err
	}
	return fence, cacheable, proxyCacheable, nil
}

// stillReadable is a read's check again in the view that answers it, after
// the leadership proof: the session is live, the caller may read (an ACL
// change acknowledged before the read began binds it) and its sequencer,
// if any, is still valid.
func (e *fileEndpoint) stillReadable(v fsm.View, c *call, handle uint64, fence *fsm.Fence) error {
	if err := c.liveSession(v); err != nil {
		return err
	}
	if err := c.checkRead(v, handle); err != nil {
		return err
	}
	c.noteAnswered(v)
	return validFence(v, c, fence)
}

// validFence answers StaleSequencer unless fence (nil: none) is valid in v.
func validFence(v fsm.View, c *call, fence *fsm.Fence) error {
	if fence != nil {
		if ok, reason := v.FenceValidFor(fence, c.caller.Principal, c.isAdmin()); !ok {
			return wire.Errorf(wire.CodeStaleSequencer, "%s", reason)
		}
	}
	return nil
}

// readStat is a read's Stat of the node of hv, with its lock's holders,
// waiters and lock-delay cause.
func readStat(v fsm.View, hv fsm.HandleView) wire.Stat {
	st := toStat(hv.Stat)
	st.Holders, st.Waiters, st.LockDelayBy = lockHolders(v, hv), lockWaiters(v, hv), lockDelayBy(v, hv)
	return st
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

// readDirPage is readDir's answer in view v.
func readDirPage(v fsm.View, c *call, req *wire.HandleRequest, cacheable bool) (*wire.ReadDirResponse, error) {
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

func toStat(s fsm.Stat) wire.Stat {
	return wire.Stat{
		Instance: s.Instance, ContentGen: s.ContentGen, LockGen: s.LockGen, ACLGen: s.ACLGen,
		Checksum: s.Checksum, Size: s.Size, CTime: s.CTime, MTime: s.MTime, Dir: s.Dir,
		Ephemeral: s.Ephemeral, ReadACL: s.ReadACL, WriteACL: s.WriteACL, ChangeACL: s.ChangeACL,
		LockMode: s.LockMode, LockHolders: s.LockHolders, LockWaiters: s.LockWaiters,
		LockDelayUntil: s.LockDelayUntil, TTLMillis: time.Duration(s.TTL).Milliseconds(), Container: s.Container,
		SemLimit: s.SemLimit,
	}
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
