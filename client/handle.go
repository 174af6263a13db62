package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/cache"
	"lockcell/wire"
)

// OpenMode says what a handle may do and how Open treats a missing node.
type OpenMode uint32

// Open modes; combine with |.
const (
	// Read lets the handle read contents, stats and listings.
	Read OpenMode = 1 << 0
	// Write lets the handle write contents, delete the node and take its lock.
	Write OpenMode = 1 << 1
	// Create creates the node when it does not exist (its parent must).
	Create OpenMode = 1 << 2
	// Excl with Create fails with ErrExists when the node exists.
	Excl OpenMode = 1 << 3
	// Directory creates, or insists on, a directory.
	Directory OpenMode = 1 << 4
	// Ephemeral with Create makes a node that is deleted when no session
	// holds it open (files) or when empty (directories), and a file that
	// dies with its creating session.
	Ephemeral OpenMode = 1 << 5
	// Sequential with Create makes a new node whose name is the one given
	// followed by a number from its parent directory's counter, in ten
	// zero-padded digits: "q/job-" creates q/job-0000000017. Numbers only
	// grow per directory, are never reused (even after their node is
	// deleted) and skip names that exist, so the names a directory hands
	// out sort in the order they were made; Handle.Name reports the one
	// made. It never opens an existing node, and combines with Ephemeral
	// and Directory. A name ending in "/" makes names of digits alone.
	Sequential OpenMode = 1 << 6
	// Container with Create and Directory makes a container directory:
	// the cell deletes it in the same step that deletes its last child
	// (by a Delete, a TTL, or an ephemeral child's session ending), and
	// so on up a chain of containers. One never given a child is kept.
	// Not with Ephemeral.
	Container OpenMode = 1 << 7
)

// LockMode is a reader/writer lock mode.
type LockMode uint8

// Lock modes.
const (
	// Exclusive: one holder.
	Exclusive LockMode = 1
	// Shared: any number of holders.
	Shared LockMode = 2
	// Permit is the mode a semaphore holder's sequencer names
	// (Sequencer.Mode): one of the semaphore's permits, held at a
	// generation of the holder's own. It is never a mode to Acquire in
	// (a permit is taken Shared); the master refuses it as a bad request.
	Permit LockMode = 3
)

func (m LockMode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return "free"
}

// OpenOption adjusts an Open.
type OpenOption func(*openOptions)

type openOptions struct {
	req     wire.OpenRequest
	noCache bool
	parents bool // WithParents
}

// WithContents sets the initial contents of a file that Open creates.
func WithContents(b []byte) OpenOption {
	return func(o *openOptions) { o.req.Contents = b }
}

// WithLockDelay sets the lock-delay applied when this handle's session
// fails while it holds the lock (at most one minute; default one minute).
func WithLockDelay(d time.Duration) OpenOption {
	return func(o *openOptions) { o.req.LockDelayMillis = d.Milliseconds() }
}

// WithTTL makes the file Open creates a TTL node: the cell deletes it
// once ttl passes after its create or its last write (SetContents)
// without another, whether or not handles are open on it or its lock is
// held. ttl is rounded down to milliseconds and must lie between
// MinTTL and MaxTTL (else ErrBadRequest); 0 leaves the file without one.
// Only a created file takes a TTL: not a directory, not with Ephemeral;
// an Open that finds the file opens it as it is.
func WithTTL(ttl time.Duration) OpenOption {
	return func(o *openOptions) {
		o.req.TTLMillis = ttl.Milliseconds()
		if o.req.TTLMillis != 0 {
			o.req.Flags |= wire.OpenTTL
		} else {
			o.req.Flags &^= wire.OpenTTL
		}
	}
}

// MinTTL and MaxTTL bound WithTTL.
const (
	MinTTL = wire.MinTTL
	MaxTTL = wire.MaxTTL
)

// EventMask selects the handle events a handle asks for (WithEvents).
type EventMask uint32

// Handle event selectors; combine with |.
const (
	OnContentsModified EventMask = 1 << 0
	OnChildAdded       EventMask = 1 << 1
	OnChildRemoved     EventMask = 1 << 2
	OnLockAcquired     EventMask = 1 << 3
	OnConflictingLock  EventMask = 1 << 4
	OnHandleInvalid    EventMask = 1 << 5
)

// WithEvents asks for handle events while the handle is open: they arrive
// on the next KeepAlive reply after the change, on Handle.Events.
func WithEvents(m EventMask) OpenOption {
	return func(o *openOptions) { o.req.EventMask = uint32(m) }
}

// WithoutCache makes every read on the handle go to the master instead of
// being answered from the cache the client keeps.
func WithoutCache() OpenOption {
	return func(o *openOptions) { o.noCache = true }
}

// Stat is a node's metadata (docs/spec.md#stat). Generations only grow:
// ContentGen on every SetContents, LockGen each time the lock goes from free
// to held, Instance each time the name is created.
type Stat struct {
	Instance    uint64
	ContentGen  uint64
	LockGen     uint64
	ACLGen      uint64
	Checksum    uint64
	Size        uint64
	CTime       time.Time
	MTime       time.Time
	Dir         bool
	Ephemeral   bool
	ReadACL     string
	WriteACL    string
	ChangeACL   string
	LockMode    LockMode
	LockHolders int
	// LockWaiters counts blocked Acquire calls queued for the lock.
	LockWaiters int
	// LockDelayUntil is when a lock freed by a failed holder's session may
	// be taken again (zero if no lock-delay was ever imposed).
	LockDelayUntil time.Time
	// Holders names the lock's holders (see LockHolder).
	Holders []LockHolder
	// Waiters names the queued Acquires in queue order, filled like
	// Holders (at most MaxStatHolders; LockWaiters counts them all).
	Waiters []LockWaiter
	// LockDelayBy names what started the lock-delay LockDelayUntil ends
	// (see LockDelayCause), filled like Holders; nil when no lock-delay was
	// ever imposed. The delay is running while LockDelayUntil is ahead.
	LockDelayBy *LockDelayCause
	// TTL is a TTL node's TTL (WithTTL; 0: none): it is deleted at MTime
	// plus TTL unless written before. Container says the node is a
	// container directory.
	TTL       time.Duration
	Container bool
	// SemLimit is a semaphore's permit count (WithSemaphore; 0: a plain
	// lock): its lock has up to SemLimit holders.
	SemLimit int
}

func statFrom(s wire.Stat) Stat {
	st := Stat{Instance: s.Instance, ContentGen: s.ContentGen, LockGen: s.LockGen, ACLGen: s.ACLGen,
		Checksum: s.Checksum, Size: s.Size, CTime: time.Unix(0, s.CTime), MTime: time.Unix(0, s.MTime),
		Dir: s.Dir, Ephemeral: s.Ephemeral, ReadACL: s.ReadACL, WriteACL: s.WriteACL, ChangeACL: s.ChangeACL,
		LockMode: LockMode(s.LockMode), LockHolders: int(s.LockHolders), LockWaiters: int(s.LockWaiters),
		Holders: holdersFrom(s.Holders), Waiters: waitersFrom(s.Waiters), LockDelayBy: delayCauseFrom(s.LockDelayBy),
		TTL: time.Duration(s.TTLMillis) * time.Millisecond, Container: s.Container, SemLimit: int(s.SemLimit)}
	if s.LockDelayUntil != 0 {
		st.LockDelayUntil = time.Unix(0, s.LockDelayUntil)
	}
	return st
}

// DirEntry is one child of a directory.
type DirEntry struct {
	Name string
	Dir  bool
}

// Handle is an open file or directory. After Close every method but Name,
// LockContext, Events and Poison fails with ErrClosed. A Handle is safe
// for concurrent use. A handle that holds a lock hears other sessions'
// requests that it let go on Events (see RequestRelease), whatever events
// it was opened with.
type Handle struct {
	c *Client
	// id is the handle's id at the master, in the session of generation
	// gen; a renewal re-opens the handle under a new id (renew.go).
	id   atomic.Uint64
	path string

	noCache bool // WithoutCache, or the client has no cache
	// instance is the node instance the handle opened: a cached entry of a
	// later incarnation of the name is not this handle's to read.
	instance atomic.Uint64
	// pool is where Close may leave the handle idle for reuse (nil: it
	// may not); tok is the cache token taken when it was opened.
	pool *poolKey
	tok  cache.Token

	mu     sync.Mutex
	closed bool
	seq    []byte // attached by SetSequencer
	dirty  bool   // used to lock, delete or fence: never reused
	// held is the lock the handle was last granted and its context
	// (lockctx.go).
	held *heldLock
	// poisoned is set by Poison, which ends the calls in flight
	// (poison.go); guardSeq numbers them.
	poisoned bool
	inflight []inflightCall
	guardSeq uint64

	// grantSeq is the sequencer the master sent with the grant grantOf
	// (a held value): GetSequencer answers with it while h.held is that
	// grant and its context lives.
	grantSeq []byte
	grantOf  *heldLock

	// gen is the session generation id belongs to; lost, why a renewal
	// could not re-open the handle; opened, the request that opened it,
	// kept for renewals (Config.RenewSession).
	gen    uint64
	lost   error
	opened *wire.OpenRequest
	// sequential: the handle made its node with Sequential, so a
	// renewal takes back only that very node (opened names it).
	sequential bool

	// subtree is the handle's running subtree watches (subtree.go).
	subtree subtreeWatches

	// events is the handle's own event stream (events.go).
	events eventStream
}

// Events returns the handle's stream of events, in the order the master
// sent them: the kinds it asked for WithEvents; whatever it asked for,
// those about its lock (LockBroken, ReleaseRequested carrying the
// request, LockLost) and about its session (Reannounce after a fail-over
// or jeopardy the session survives; Reopened or ReopenFailed after a
// renewal). Each event carries its position (Event.Instance, ContentGen,
// LockGen, Epoch). The stream keeps HandleEventBuffer unread events; a
// reader that falls further behind gets an Overflow event at the point
// where it stopped hearing everything, and should re-read the node. It is
// never nil, and is closed when the handle is closed, when the Client is
// closed, and when the session expires without Config.RenewSession.
func (h *Handle) Events() <-chan Event { return h.events.events() }

// markDirty keeps the handle out of the idle pool: its lock, sequencer or
// node state must end with Close at the master.
func (h *Handle) markDirty() {
	h.mu.Lock()
	h.dirty = true
	h.mu.Unlock()
}

func (h *Handle) sequencer() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// request is the HandleRequest of this handle, carrying its sequencer.
func (h *Handle) request() *wire.HandleRequest {
	return &wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer()}
}

// Open opens the node at name with the given mode. With Create it creates
// a missing node; its parent directory must exist, unless WithParents. A
// name not starting with "/" is relative to /ls/<cell>; "" is no name.
//
// Without Create, a name that does not exist for the session's principal
// (missing, or a node it may neither read nor write) fails with
// ErrNotFound, and the cache may keep that answer: the next such Open of
// the name fails the same way, word for word, with no call, until the
// name is created or an ACL change could show it (the master invalidates
// the absence before either completes). Absences are cached only where
// the principal may read the parent directory (docs/spec.md#caching).
//
// With Sequential, name is the prefix of the name to make, and the
// returned Handle's Name is the name made.
func (c *Client) Open(ctx context.Context, name string, mode OpenMode, opts ...OpenOption) (*Handle, error) {
	name = c.abs(name)
	if mode&Sequential != 0 {
		if err := wire.ValidateSeqPrefix(c.cfg.Cell, name); err != nil {
			return nil, opErr("open", name, err)
		}
		if mode&Create == 0 {
			return nil, opErr("open", name, wire.Errorf(wire.CodeBadRequest, "Sequential needs Create"))
		}
	} else if err := wire.ValidateName(c.cfg.Cell, name); err != nil {
		return nil, opErr("open", name, err)
	}
	o := openOptions{req: wire.OpenRequest{Path: name, Flags: uint32(mode)}}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.parents {
		return c.open(ctx, name, &o)
	}
	if mode&Create == 0 {
		return nil, opErr("open", name, wire.Errorf(wire.CodeBadRequest, "WithParents needs Create"))
	}
	h, err := c.open(ctx, name, &o)
	if err != nil {
		if err = c.openParents(ctx, name, err); err == nil {
			h, err = c.open(ctx, name, &o)
		}
	}
	return h, err
}

// open is Open once its options are gathered.
func (c *Client) open(ctx context.Context, name string, o *openOptions) (*Handle, error) {
	req := o.req
	// A cached absence answers at once (negcache.go).
	mkey, mayMiss := c.missingKey(name, o)
	if _, ok := c.cacheGet(mkey, mayMiss); ok {
		return nil, missingErr(name)
	}
	// A handle the resumed session had open is taken back (resume.go),
	// never by a sequential create: it makes a new name every time.
	if req.Flags&wire.OpenSequential == 0 {
		if h := c.adopted(o); h != nil {
			return h, nil
		}
	}
	usePool := c.cache != nil && poolable(o)
	key := poolKey{name: name, flags: req.Flags, lockDelay: req.LockDelayMillis}
	if usePool {
		gen := c.sess.generation()
		if p, ok := c.takePooled(key); ok {
			h := c.newHandle(name, p.id, p.instance, o)
			h.pool, h.tok = &key, p.tok
			if c.register(h, gen) {
				return h, nil
			}
		}
	}
	var tok, mtok cache.Token
	if usePool {
		tok, req.Cache = c.cache.Token(name), true
	}
	if mayMiss {
		mtok, req.CacheMissing = c.cache.Token(mkey.Name), true
	}
	if len(req.Contents) > wire.MaxContents {
		return nil, opErr("open", name, wire.Errorf(wire.CodeTooLarge, "contents of %d bytes exceed %d", len(req.Contents), wire.MaxContents))
	}
	var resp wire.OpenResponse
	seq := c.ids.begin()
	gen, err := c.callAt(ctx, wire.MethodOpen, seq, &req, &resp, nil)
	c.ids.end(seq)
	if err != nil {
		return nil, opErr("open", name, err)
	}
	if resp.Missing {
		if resp.Cacheable && mayMiss {
			c.cache.PutIf(mkey, cached{}, mtok)
		}
		return nil, missingErr(name)
	}
	if resp.Name != "" {
		if req.Flags&wire.OpenSequential == 0 || wire.Parent(resp.Name) != wire.Parent(name) {
			return nil, opErr("open", name, wire.Errorf(wire.CodeInternal, "the cell named the node %q, not one in %s", resp.Name, wire.Parent(name)))
		}
		name = resp.Name // a sequential create: the name it made
	}
	c.noteStat(resp.Stat) // a follower read never misses the node nor the handle (an id is a command index)
	c.stale.note(resp.Handle)
	h := c.newHandle(name, resp.Handle, resp.Stat.Instance, o)
	if usePool && resp.Cacheable && !resp.Stat.Ephemeral {
		h.pool, h.tok = &key, tok
	}
	if !c.register(h, gen) {
		// The session was renewed between the answer and now: the
		// handle died with the old one, and the renewal did not see it.
		if req.Flags&wire.OpenSequential != 0 {
			// Open what it made, by name; making another would leave
			// two nodes for one call.
			again := *o
			again.req = sequentialReopen(req, name)
			return c.open(ctx, name, &again)
		}
		return c.open(ctx, name, o)
	}
	return h, nil
}

// sequentialReopen is the request that opens the node a sequential create
// req made under name, without making another.
func sequentialReopen(req wire.OpenRequest, name string) wire.OpenRequest {
	req.Path, req.Contents = name, nil
	req.Flags &^= wire.OpenSequential | wire.OpenCreate | wire.OpenExcl | wire.OpenEphemeral
	return req
}

// newHandle is the Handle of the open handle id of name, at instance.
func (c *Client) newHandle(name string, id, instance uint64, o *openOptions) *Handle {
	h := &Handle{c: c, path: name, noCache: o.noCache || c.cache == nil}
	h.id.Store(id)
	h.instance.Store(instance)
	h.events.asked = o.req.EventMask != 0
	if c.cfg.RenewSession {
		req := o.req
		if req.Flags&wire.OpenSequential != 0 {
			// A renewal opens the node this handle made, by its name,
			// and never makes another (reopen checks it is the same
			// instance): an item re-created in a queue after a
			// consumer took it would be a duplicate.
			req = sequentialReopen(req, name)
			h.sequential = true
		}
		h.opened = &req
	}
	return h
}

// register records h, opened in session generation gen, among the open
// handles (its events, renewals); false: that session is over, and the
// handle with it.
func (c *Client) register(h *Handle, gen uint64) bool {
	h.gen = gen
	return c.streams.add(h, gen, c.sess.generation)
}

// Name returns the full name of the handle's node: the name it was opened
// with, resolved against /ls/<cell> if it was relative; for a handle
// opened with Sequential, the name the cell made.
func (h *Handle) Name() string { return h.path }

func (h *Handle) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if h.poisonedLocked() {
		return ErrPoisoned
	}
	return h.lost
}

func (h *Handle) do(ctx context.Context, op string, m wire.Method, req, resp any) error {
	if err := h.check(); err != nil {
		return opErr(op, h.path, err)
	}
	g := h.guard(ctx)
	err := g.done(h.c.callHandle(g.gctx, h, m, req, resp))
	if errors.Is(err, ErrHandleInvalid) {
		// The node is gone, and its lock with it.
		h.endLock(err)
	}
	return opErr(op, h.path, err)
}

// GetContentsAndStat reads a file's contents and metadata. The read is
// linearizable: it reflects every write that completed before it began,
// unless given MaxStaleness (followerread.go).
func (h *Handle) GetContentsAndStat(ctx context.Context, opts ...ReadOption) ([]byte, Stat, error) {
	if o := readOpts(opts); o.maxStale > 0 {
		return h.staleContents(ctx, &o)
	}
	r, err := h.cachedRead(ctx, "read", kindContents, true, func(fill bool) (cached, bool, error) {
		rr := &struct { // request and reply in one allocation
			req  wire.HandleRequest
			resp wire.ContentsResponse
		}{req: wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer(), Cache: fill}}
		err := h.do(ctx, "read", wire.MethodGetContentsAndStat, &rr.req, &rr.resp)
		return cached{contents: rr.resp.Contents, stat: rr.resp.Stat, proxy: rr.resp.Proxy}, rr.resp.Cacheable, err
	})
	if err != nil {
		return nil, Stat{}, err
	}
	contents := r.v.contents
	if r.kept {
		contents = append([]byte(nil), contents...)
	}
	return contents, statFrom(r.v.stat), nil
}

// GetStat reads the node's metadata: linearizable, unless given
// MaxStaleness (followerread.go).
func (h *Handle) GetStat(ctx context.Context, opts ...ReadOption) (Stat, error) {
	if o := readOpts(opts); o.maxStale > 0 {
		return h.staleStat(ctx, &o)
	}
	r, err := h.cachedRead(ctx, "stat", kindStat, true, func(fill bool) (cached, bool, error) {
		rr := &struct { // request and reply in one allocation
			req  wire.HandleRequest
			resp wire.StatResponse
		}{req: wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer(), Cache: fill}}
		err := h.do(ctx, "stat", wire.MethodGetStat, &rr.req, &rr.resp)
		return cached{stat: rr.resp.Stat, proxy: rr.resp.Proxy}, rr.resp.Cacheable, err
	})
	if err != nil {
		return Stat{}, err
	}
	return statFrom(r.v.stat), nil
}

// ReadDir lists a directory's children in name order, leaving out those
// the session's principal may neither read nor write. A large directory
// is read page by page (ReadDirPage), each page a linearizable read of its
// own: a child present throughout the listing is listed exactly once, one
// created or deleted meanwhile may or may not be, and no name is listed
// twice. The whole listing is cached only if every page was served
// cacheable and no invalidation of the directory arrived since the first
// was asked for, so a listing served from the cache is the directory at
// one point in time. Given MaxStaleness, each page is a follower read
// (followerread.go), never cached.
func (h *Handle) ReadDir(ctx context.Context, opts ...ReadOption) ([]DirEntry, error) {
	if o := readOpts(opts); o.maxStale > 0 {
		return h.staleReadDir(ctx, &o)
	}
	r, err := h.cachedRead(ctx, "readdir", kindDir, true, func(fill bool) (cached, bool, error) {
		// Past this size the listing is not worth a large share of the cache.
		budget := h.c.cfg.CacheBytes / 4
		var all []wire.DirEntry
		after, size := "", int64(0)
		for {
			resp, err := h.readDirPage(ctx, after, 0, fill)
			if err != nil {
				return cached{}, false, err
			}
			all = append(all, resp.Entries...)
			for _, e := range resp.Entries {
				size += int64(len(e.Name)) + 24
			}
			fill = fill && resp.Cacheable && size <= budget
			if !resp.More {
				return cached{entries: all}, fill, nil
			}
			after = resp.Entries[len(resp.Entries)-1].Name
		}
	})
	if err != nil {
		return nil, err
	}
	return dirEntries(r.v.entries), nil
}

// ReadDirPage reads one page of a directory's listing: children whose
// names sort strictly after after ("" from the start), in name order, at
// most limit of them (0, or more than the cell's page size of 4096:
// the page size; the cell may return fewer, never more than about 512 KiB
// of names), and whether more follow. To read on, pass the last returned
// name as after. The page is a linearizable read; successive pages are
// separate reads (see ReadDir for what that means for a whole listing).
// A page with more is never empty. Pages are served from the cache when
// the whole listing is cached; a first page that is the whole listing
// fills it.
func (h *Handle) ReadDirPage(ctx context.Context, after string, limit int) (entries []DirEntry, more bool, err error) {
	if err := h.check(); err != nil {
		return nil, false, opErr("readdir", h.path, err)
	}
	if limit < 0 {
		return nil, false, opErr("readdir", h.path, wire.Errorf(wire.CodeBadRequest, "negative page limit %d", limit))
	}
	if limit == 0 || limit > wire.MaxDirPage {
		limit = wire.MaxDirPage
	}
	// Only a first page may fill the cache, and only if it is the whole
	// listing.
	r, err := h.cachedRead(ctx, "readdir", kindDir, after == "", func(fill bool) (cached, bool, error) {
		resp, err := h.readDirPage(ctx, after, limit, fill)
		if err != nil {
			return cached{}, false, err
		}
		more = resp.More
		return cached{entries: resp.Entries}, resp.Cacheable && !resp.More, nil
	})
	if err != nil {
		return nil, false, err
	}
	if !r.hit {
		return dirEntries(r.v.entries), more, nil
	}
	ents := r.v.entries
	i, _ := slices.BinarySearchFunc(ents, after, func(e wire.DirEntry, t string) int { return strings.Compare(e.Name, t) })
	if i < len(ents) && ents[i].Name == after {
		i++
	}
	j := min(i+limit, len(ents))
	return dirEntries(ents[i:j]), j < len(ents), nil
}

// readDirPage asks the master for one page, checking that it moves the
// cursor on: a page with more must end past after, or a listing would loop.
func (h *Handle) readDirPage(ctx context.Context, after string, limit int, cache bool) (*wire.ReadDirResponse, error) {
	req := h.request()
	req.After, req.Limit, req.Cache = after, uint32(limit), cache
	var resp wire.ReadDirResponse
	if err := h.do(ctx, "readdir", wire.MethodReadDir, req, &resp); err != nil {
		return nil, err
	}
	if resp.More && (len(resp.Entries) == 0 || resp.Entries[len(resp.Entries)-1].Name <= after) {
		return nil, opErr("readdir", h.path, wire.Errorf(wire.CodeInternal, "the cell answered a listing page that does not move past %q", after))
	}
	return &resp, nil
}

// dirEntries copies wire entries out (cached slices are never handed out).
func dirEntries(ents []wire.DirEntry) []DirEntry {
	out := make([]DirEntry, len(ents))
	for i, e := range ents {
		out[i] = DirEntry{Name: e.Name, Dir: e.Dir}
	}
	return out
}

// SetOption adjusts a SetContents or a SetACL.
type SetOption func(*setOptions)

type setOptions struct {
	gen    uint64
	hasGen bool
}

// IfGeneration makes SetContents a compare-and-swap: it writes only if the
// file's content generation is still gen, and otherwise fails with
// ErrGenerationMismatch, changing nothing. Given to SetACL it compares
// the node's ACL generation (Stat.ACLGen) instead.
func IfGeneration(gen uint64) SetOption {
	return func(o *setOptions) { o.gen, o.hasGen = gen, true }
}

// SetContents replaces a file's contents (at most 256 KiB) atomically.
func (h *Handle) SetContents(ctx context.Context, data []byte, opts ...SetOption) error {
	_, err := h.SetContentsAndStat(ctx, data, opts...)
	return err
}

// SetContentsAndStat is SetContents that also returns the file's new
// metadata (its new content generation, for the next compare-and-swap).
func (h *Handle) SetContentsAndStat(ctx context.Context, data []byte, opts ...SetOption) (Stat, error) {
	if len(data) > wire.MaxContents {
		return Stat{}, opErr("write", h.path, wire.Errorf(wire.CodeTooLarge, "contents of %d bytes exceed %d", len(data), wire.MaxContents))
	}
	rr := &struct { // request and reply in one allocation
		req  wire.SetContentsRequest
		resp wire.StatResponse
	}{req: wire.SetContentsRequest{Handle: h.id.Load(), Contents: data, Sequencer: h.sequencer()}}
	var so setOptions
	for _, o := range opts {
		o(&so)
	}
	rr.req.IfGeneration, rr.req.HasIfGeneration = so.gen, so.hasGen
	if rr.req.Contents == nil {
		rr.req.Contents = []byte{}
	}
	if err := h.do(ctx, "write", wire.MethodSetContents, &rr.req, &rr.resp); err != nil {
		return Stat{}, err
	}
	h.c.noteStat(rr.resp.Stat) // a follower read never misses this write
	return statFrom(rr.resp.Stat), nil
}

// Delete deletes the node (a directory must be empty). The handle stays
// open but every further call on it fails with ErrHandleInvalid.
func (h *Handle) Delete(ctx context.Context) error {
	h.markDirty()
	return h.do(ctx, "delete", wire.MethodDelete, h.request(), &wire.Empty{})
}

// TryAcquire takes the lock in mode if it can right now. It returns false
// (and a nil error) when the lock is held in a conflicting mode, and fails
// with ErrLockDelay while the lock is free but under the lock-delay of a
// holder whose session failed (Stat.LockDelayUntil says until when): a
// caller that only wants "not now" treats both alike. Like
// Acquire, a grant brings its sequencer with it.
func (h *Handle) TryAcquire(ctx context.Context, mode LockMode) (bool, error) {
	h.markDirty()
	var resp wire.AcquireResponse
	err := h.do(ctx, "lock", wire.MethodAcquire, &wire.AcquireRequest{Handle: h.id.Load(), Mode: uint8(mode)}, &resp)
	if errors.Is(err, ErrLockHeld) {
		return false, nil
	}
	if err == nil {
		h.granted(&resp, mode)
	}
	return err == nil, err
}

// Acquire takes the lock in mode, waiting in FIFO order behind earlier
// requests until it is granted or ctx ends. The wait keeps its place across
// retries, a broken connection and a master fail-over; it loses it only if
// the client cannot reach the master until its lease there runs out, and
// then queues again at the tail (docs/spec.md#locks). When ctx ends first the
// wait is withdrawn at the master (and a grant that raced the cancel
// undone): calling Acquire again queues at the tail.
// The grant's reply carries its sequencer, so GetSequencer makes no call
// while the lock context lives: an uncontended re-acquire on a handle kept
// open is one call.
func (h *Handle) Acquire(ctx context.Context, mode LockMode) error {
	h.markDirty()
	if err := h.check(); err != nil {
		return opErr("lock", h.path, err)
	}
	g := h.guard(ctx)
	for {
		resp, err := h.acquireOnce(g.gctx, mode)
		if errors.Is(err, ErrCanceled) && g.gctx.Err() == nil {
			// The master withdrew the wait without our asking: our call
			// broke off and did not come back before our lease there ran
			// out, so it took us for gone. We still want the lock: queue again, at the
			// tail, under a new request id.
			continue
		}
		if err = g.done(err); err == nil {
			h.granted(resp, mode)
		}
		return opErr("lock", h.path, err)
	}
}

// granted records a grant the master answered: its lock context
// (gotLock) and the sequencer that came with it, which GetSequencer then
// returns without a call while that grant's context lives. A master that
// sent no sequencer leaves GetSequencer to ask.
func (h *Handle) granted(resp *wire.AcquireResponse, mode LockMode) {
	h.gotLock(resp.LockGen, mode)
	h.mu.Lock()
	h.grantSeq, h.grantOf = nil, nil
	if len(resp.Sequencer) > 0 && h.held != nil && h.held.gen == resp.LockGen && h.held.mode == mode {
		h.grantSeq, h.grantOf = resp.Sequencer, h.held
	}
	h.mu.Unlock()
}

// grantedSequencer is the sequencer of the grant this handle is sure it
// holds (its lock context lives), or nil.
func (h *Handle) grantedSequencer() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.grantOf == nil || h.grantOf != h.held || h.held.ctx.Err() != nil {
		return nil
	}
	return slices.Clone(h.grantSeq)
}

// acquireOnce queues once, under one request id, and waits. A blocking
// acquire may wait far longer than RetryTimeout; only the search for a
// master is bounded, so it loops on ErrNoMaster while ctx lives.
func (h *Handle) acquireOnce(ctx context.Context, mode LockMode) (*wire.AcquireResponse, error) {
	c := h.c
	seq := c.ids.begin()
	defer c.ids.end(seq)
	var resp wire.AcquireResponse
	req := &wire.AcquireRequest{Mode: uint8(mode), Wait: true}
	for {
		_, err := c.callAt(ctx, wire.MethodAcquire, seq, req, &resp, h)
		if err == nil {
			return &resp, nil
		}
		if ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(c.base, min(c.cfg.RetryTimeout, 10*time.Second))
			cerr := c.call(cctx, wire.MethodCancelAcquire, true, &wire.CancelAcquireRequest{Handle: req.Handle, WaitSeq: seq}, &wire.Empty{})
			cancel()
			if cerr != nil && !errors.Is(cerr, ErrHandleInvalid) && !errors.Is(cerr, ErrClosed) {
				c.log.Warn("lockcell: could not withdraw an abandoned lock wait", "path", h.path, "err", cerr)
			}
			return nil, ctx.Err()
		}
		if !errors.Is(err, ErrNoMaster) {
			return nil, err
		}
	}
}

// Release releases the lock this handle holds; the next waiters get it in
// the same replicated step. It ends the handle's LockContext. A sequencer
// attached with SetSequencer does not fence it; IfSequencer does.
func (h *Handle) Release(ctx context.Context, opts ...ReleaseOption) error {
	var o releaseOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.fenced && len(o.seq) == 0 {
		return opErr("unlock", h.path, wire.Errorf(wire.CodeBadSequencer, "IfSequencer was given no sequencer"))
	}
	err := h.do(ctx, "unlock", wire.MethodRelease, &wire.HandleRequest{Handle: h.id.Load(), Sequencer: o.seq}, &wire.Empty{})
	if err == nil {
		h.endLock(ErrReleased)
	} else if releaseEnds(err) {
		h.endLock(err)
	}
	return err
}

// Close is CloseContext bounded by Config.CloseTimeout (default 5 s):
// it never blocks longer, even while the cell is unreachable.
func (h *Handle) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.c.cfg.CloseTimeout)
	defer cancel()
	return h.CloseContext(ctx)
}

// CloseContext closes the handle, releasing any lock it holds (without
// lock-delay). It is idempotent.
//
// The handle's local state goes first, before any call: from then on its
// methods fail with ErrClosed, its LockContext has ended (cause ErrClosed)
// and its Events channel is closed, whether or not the cell is reachable.
// Then the close is sent to the master; CloseContext waits for its answer
// until ctx ends, and the cell releases the lock when the close arrives.
// If ctx ends first, CloseContext returns ctx's error (wrapped) and the
// client goes on sending the close in the background until the cell
// answers, the session ends (which releases everything it held) or the
// Client is closed, so the lock is not left held by a live session once
// the cell is back.
func (h *Handle) CloseContext(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	dirty := h.dirty
	id, gen, lost := h.id.Load(), h.gen, h.lost
	h.mu.Unlock()
	h.endLock(ErrClosed)
	h.subtree.closeAll() // subtree.go
	h.c.streams.drop(id, h)
	if lost != nil {
		return nil // never re-opened after a renewal: nothing to close
	}
	if h.pool != nil && !dirty && h.c.keepIdle(*h.pool, pooledHandle{id: id, tok: h.tok, instance: h.instance.Load()}) {
		return nil
	}
	done := make(chan error, 1)
	c := h.c
	if !c.sess.whileLive(func() { c.wg.Add(1) }) {
		// Closed or expired: the call fails at once, and the cell has
		// dropped the session's handles already.
		return opErr("close", h.path, c.closeHandle(id, gen))
	}
	go func() {
		defer c.wg.Done()
		done <- c.closeHandle(id, gen)
	}()
	select {
	case err := <-done:
		return opErr("close", h.path, err)
	case <-ctx.Done():
		return opErr("close", h.path, fmt.Errorf("%w (the close goes on in the background; the cell releases the handle when it is reached)", ctx.Err()))
	}
}

// closeHandle sends the Close of handle id, of the session generation
// gen, until the cell answers, that session ends, or the Client is closed
// (c.base ends). A search for a master that runs out of RetryTimeout
// starts again: a handle left open on a live session would keep its lock
// held for as long as the application runs. A handle whose session was
// renewed since died with it: nothing is left to close.
func (c *Client) closeHandle(id, gen uint64) error {
	seq := c.ids.begin()
	defer c.ids.end(seq)
	for {
		_, err := c.roundTrip(c.base, callSpec{method: wire.MethodClose, seq: seq, req: &wire.HandleRequest{Handle: id}, resp: &wire.Empty{},
			budget: c.cfg.RetryTimeout, gen: gen})
		switch {
		case errors.Is(err, ErrHandleInvalid):
			return nil // already gone (node deleted or session closed)
		case errors.Is(err, ErrNoMaster) && c.base.Err() == nil:
			continue
		case c.cfg.RenewSession && errors.Is(err, ErrSessionExpired):
			return nil
		}
		return err
	}
}

// Cache kinds: what is cached under a name.
const (
	kindContents uint8 = 1 // contents and stat
	kindStat     uint8 = 2 // stat only
	kindDir      uint8 = 3 // directory listing
)

// cached is one cache entry.
type cached struct {
	contents []byte
	stat     wire.Stat
	entries  []wire.DirEntry
	// proxy is the proxy instance whose read cache served it (0: the
	// master did): see proxied.go.
	proxy uint64
}

func cachedSize(v cached) int64 {
	n := int64(len(v.contents)) + 128 + holdersSize(v.stat.Holders) + waitersSize(v.stat.Waiters)
	for _, e := range v.entries {
		n += int64(len(e.Name)) + 24
	}
	return n
}

// cacheKey says whether this handle's read of kind may use the cache: not
// with caching off, and not with a sequencer attached (the master must
// check it on every call).
func (h *Handle) cacheKey(kind uint8) (cache.Key, bool) {
	if h.noCache || len(h.sequencer()) > 0 {
		return cache.Key{}, false
	}
	return cache.Key{Name: h.path, Kind: kind}, true
}

// cacheGet returns a cached entry only if the local lease as it stood
// before the lookup was still running after it. The master completes a
// write without our acknowledgement only once the lease we held when it
// queued the invalidation ran out, and a KeepAlive reply that extends the
// lease first applies the invalidations it carries. So an entry read
// within the lease taken before the read (checked after the read: a pause
// between the two only makes us refuse) cannot be older than a completed
// write, even if the KeepAlive goroutine has not yet noticed a lapse (a
// process paused past its lease serves nothing stale on resume) or extends
// the lease between the lookup and the check.
func (c *Client) cacheGet(key cache.Key, use bool) (cached, bool) {
	if !use {
		return cached{}, false
	}
	end, running := c.sess.leaseUntil()
	if !running {
		return cached{}, false
	}
	v, ok := c.cache.Get(key)
	if !ok || !c.sess.clock.Now().Before(end) {
		return cached{}, false
	}
	return v, true
}

// readResult is what cachedRead returns.
type readResult struct {
	v   cached
	hit bool // served from the cache
	// kept: the cache holds v (a hit, or the answer filled it), so its
	// slices are shared and must be copied before they are handed out.
	kept bool
}

// cachedRead is the one path of every cached read. It serves the read of
// kind from the cache when the handle may use it (cacheKey), the entry is
// of the node instance the handle opened, and the lease allows
// (cacheGet). Otherwise it calls fetch, telling it whether to ask the
// master for a cacheable answer (fill: the cache is usable and mayFill),
// and puts what fetch returns in the cache when fetch reports it
// cacheable; the fill is conditional on a token taken before the call, so
// an invalidation that arrives meanwhile keeps the answer out.
func (h *Handle) cachedRead(ctx context.Context, op string, kind uint8, mayFill bool, fetch func(fill bool) (cached, bool, error)) (readResult, error) {
	if err := h.check(); err != nil {
		return readResult{}, opErr(op, h.path, err)
	}
	key, useCache := h.cacheKey(kind)
	if v, ok := h.c.cacheGet(key, useCache); ok && (kind == kindDir || v.stat.Instance == h.instance.Load()) {
		return readResult{v: v, hit: true, kept: true}, nil
	}
	fill := useCache && mayFill
	var tok cache.Token
	if fill {
		tok = h.c.cache.Token(h.path)
	}
	v, cacheable, err := fetch(fill)
	if err != nil {
		return readResult{}, err
	}
	if fill && cacheable {
		if v.proxy != 0 {
			if !h.c.proxied.put(h.c.cache, key, v, tok, v.proxy) {
				return readResult{v: v}, nil
			}
		} else {
			h.c.cache.PutIf(key, v, tok)
		}
		return readResult{v: v, kept: true}, nil
	}
	return readResult{v: v}, nil
}
