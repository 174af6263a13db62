package client

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"lockcell/wire"
)

// Follower reads (docs/spec.md, "Reads of bounded staleness"). A read
// given MaxStaleness(d) goes to a replica that is not the master, in
// rotation, which answers it from its own state if it can prove that
// state holds every write acknowledged more than d before it answered,
// and holds everything this Client has seen (its writes included). When
// it cannot, or does not answer, the read goes to the master as an
// ordinary linearizable read. Such a read never reads, nor fills, the
// cache: a stale answer is only ever what the caller asked for.

// ReadOption adjusts a read: GetContentsAndStat, GetStat, ReadDir.
type ReadOption func(*readOptions)

type readOptions struct {
	maxStale time.Duration
	info     *ReadInfo
}

// MaxStaleness lets the read be answered by a replica that is not the
// master, from a state that may miss writes acknowledged less than d
// before the answer, and never one older than a state this Client has
// already read or written (etcd's serializable reads and ZooKeeper's
// local reads, with a bound). d at or below zero leaves the read
// linearizable. The answer is not cached, and the cache is not consulted.
func MaxStaleness(d time.Duration) ReadOption {
	return func(o *readOptions) { o.maxStale = d }
}

// WithReadInfo makes the read report in info which replica answered it
// and from which state (only reads given MaxStaleness fill it).
func WithReadInfo(info *ReadInfo) ReadOption {
	return func(o *readOptions) { o.info = info }
}

// ReadInfo says who answered a read given MaxStaleness: filled for an
// answer, and for an error a follower answered (Replica and Index unset).
type ReadInfo struct {
	// Replica is the id of the replica that answered ("" when the master
	// answered after a follower refused).
	Replica string
	// Addr is the client address the answer came from ("" when the master
	// answered after a follower refused).
	Addr string
	// Index is the command index of the state the answer came from,
	// comparable with a Stat's generations.
	Index uint64
	// Age bounds how old that state was: every write acknowledged more
	// than Age before the answer is in it (0 for the master's answer).
	Age time.Duration
	// Follower says a replica other than the master answered from its own
	// state; false when the read fell back to the master.
	Follower bool
}

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// staleIndex is the highest command index the Client has seen: the
// floor of its follower reads (MinIndex), so it never reads a state
// older than one it saw or wrote.
type staleIndex struct{ seen atomic.Uint64 }

func (s *staleIndex) note(v uint64) {
	for {
		old := s.seen.Load()
		if v <= old || s.seen.CompareAndSwap(old, v) {
			return
		}
	}
}

// noteStat raises the floor to the generations of st.
func (c *Client) noteStat(st wire.Stat) {
	c.stale.note(max(st.Instance, st.ContentGen, st.LockGen, st.ACLGen))
}

// followerTry bounds one follower read's try before it falls back.
const followerTry = 2 * time.Second

// followerRead sends read m with req to a replica other than the master
// (MethodFollowerRead). It reports whether that replica answered (out is
// filled); a refusal, a transport failure or no other replica known is not
// an error (the caller asks the master), but an answer the master would
// give too (permission denied, a directory, a stale sequencer) is.
func (h *Handle) followerRead(ctx context.Context, m wire.Method, req wire.HandleRequest, o *readOptions, out *wire.FollowerReadResponse) (bool, error) {
	c := h.c
	if err := h.check(); err != nil {
		return false, nil // the master path reports it
	}
	if err := c.sess.usableIn(0, false); err != nil {
		return false, nil
	}
	cn, err := c.route.followerConn(ctx)
	if err != nil || cn == nil {
		return false, nil
	}
	hd := c.header(callSpec{method: wire.MethodFollowerRead})
	// Session and handle ids are command indexes: a state at or past
	// both knows them.
	freq := wire.FollowerReadRequest{Read: m, Req: req, MaxStaleMillis: max(1, o.maxStale.Milliseconds()), MinIndex: max(c.stale.seen.Load(), hd.Session, req.Handle)}
	tctx, cancel := c.withDeadline(ctx, c.clock.Now().Add(followerTry))
	st, err := cn.call(tctx, &hd, &freq, out)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, errTransport) || tctx.Err() != nil {
			c.route.drop(cn)
		}
		return false, nil
	}
	switch st.Code {
	case wire.CodeOK:
		c.stale.note(out.Index)
		if o.info != nil {
			*o.info = ReadInfo{Replica: out.Replica, Addr: cn.addr, Index: out.Index, Age: time.Duration(out.AgeMillis) * time.Millisecond, Follower: !out.Master}
		}
		return true, nil
	case wire.CodeStaleRead, wire.CodeNotMaster, wire.CodeUnavailable, wire.CodeBadRequest, wire.CodeBadEpoch,
		wire.CodeTooMany, wire.CodeSessionExpired, wire.CodeUnknownSession, wire.CodeHandleInvalid, wire.CodeNotFound:
		return false, nil // the master answers
	}
	if o.info != nil {
		*o.info = ReadInfo{Addr: cn.addr, Follower: true}
	}
	return true, st.Err()
}

// masterAnswered fills o's info for a read the master answered.
func (o *readOptions) masterAnswered() {
	if o.info != nil {
		*o.info = ReadInfo{}
	}
}

// staleContents is GetContentsAndStat with MaxStaleness.
func (h *Handle) staleContents(ctx context.Context, o *readOptions) ([]byte, Stat, error) {
	req := wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer()}
	var out wire.FollowerReadResponse
	answered, err := h.followerRead(ctx, wire.MethodGetContentsAndStat, req, o, &out)
	if err != nil {
		return nil, Stat{}, opErr("read", h.path, err)
	}
	if answered && out.Contents != nil {
		h.c.noteStat(out.Contents.Stat)
		return out.Contents.Contents, statFrom(out.Contents.Stat), nil
	}
	var resp wire.ContentsResponse
	if err := h.do(ctx, "read", wire.MethodGetContentsAndStat, &req, &resp); err != nil {
		return nil, Stat{}, err
	}
	o.masterAnswered()
	h.c.noteStat(resp.Stat)
	return resp.Contents, statFrom(resp.Stat), nil
}

// staleStat is GetStat with MaxStaleness.
func (h *Handle) staleStat(ctx context.Context, o *readOptions) (Stat, error) {
	req := wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer()}
	var out wire.FollowerReadResponse
	answered, err := h.followerRead(ctx, wire.MethodGetStat, req, o, &out)
	if err != nil {
		return Stat{}, opErr("stat", h.path, err)
	}
	if answered && out.Stat != nil {
		h.c.noteStat(out.Stat.Stat)
		return statFrom(out.Stat.Stat), nil
	}
	var resp wire.StatResponse
	if err := h.do(ctx, "stat", wire.MethodGetStat, &req, &resp); err != nil {
		return Stat{}, err
	}
	o.masterAnswered()
	h.c.noteStat(resp.Stat)
	return statFrom(resp.Stat), nil
}

// staleReadDir is ReadDir with MaxStaleness: each page a follower read of
// its own (or the master's, page by page).
func (h *Handle) staleReadDir(ctx context.Context, o *readOptions) ([]DirEntry, error) {
	var all []wire.DirEntry
	after := ""
	for {
		req := wire.HandleRequest{Handle: h.id.Load(), Sequencer: h.sequencer(), After: after}
		var out wire.FollowerReadResponse
		answered, err := h.followerRead(ctx, wire.MethodReadDir, req, o, &out)
		if err != nil {
			return nil, opErr("readdir", h.path, err)
		}
		page := out.Dir
		if !answered || page == nil {
			page = &wire.ReadDirResponse{}
			if err := h.do(ctx, "readdir", wire.MethodReadDir, &req, page); err != nil {
				return nil, err
			}
			o.masterAnswered()
		}
		if page.More && (len(page.Entries) == 0 || page.Entries[len(page.Entries)-1].Name <= after) {
			return nil, opErr("readdir", h.path, wire.Errorf(wire.CodeInternal, "the cell answered a listing page that does not move past %q", after))
		}
		all = append(all, page.Entries...)
		if !page.More {
			return dirEntries(all), nil
		}
		after = page.Entries[len(page.Entries)-1].Name
	}
}

// followerConn returns a connection to a replica other than the believed
// master, the next in rotation, or nil when the Client knows no other.
func (r *routing) followerConn(ctx context.Context) (*conn, error) {
	r.mu.Lock()
	master := r.master
	r.mu.Unlock()
	addrs := r.addrs.list()
	var addr string
	for range addrs {
		if a := r.addrs.pickFollower(); a != master {
			addr = a
			break
		}
	}
	if addr == "" {
		return nil, nil
	}
	return r.connTo(ctx, addr)
}

// connTo returns a connection to addr, dialling one if none is open,
// without touching the believed master.
func (r *routing) connTo(ctx context.Context, addr string) (*conn, error) {
	r.mu.Lock()
	if cn := r.conns[addr]; cn != nil && cn.alive() {
		r.mu.Unlock()
		return cn, nil
	}
	r.mu.Unlock()
	cn, err := r.dialAddr(ctx, addr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.adoptLocked(addr, cn)
}
