package master

import (
	"bytes"
	"context"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Follower reads (docs/flows.md, "Flow: a follower read"). A replica whose
// master does not serve answers a read of bounded staleness from its own
// applied state, through the very handlers the master answers reads with
// (getContentsAndStat, getStat, readDir: the session's owner, the caller's
// right to read, a sequencer, the same read ration), with one difference:
// where the master proves its leadership (reads.verify), a follower read
// proves the state is fresh enough (verifyRead). So a caller denied a read
// is denied it in the same words on every replica, and learns nothing more
// of the name from a follower than from the master.

// Follower is what a replica that is not the master offers for reads of
// bounded staleness. The master takes it from its Consensus when that
// implements it (replica.Replica does).
type Follower interface {
	// ID is the replica's id, which answers name.
	ID() string
	// ReadProof reports how old, at most, the state at Raft index applied
	// is: every write the cell acknowledged more than age ago is in it;
	// ok is false when the replica cannot show any bound.
	ReadProof(applied uint64) (age time.Duration, ok bool)
}

// staleRead is what a follower read carries through the read handlers:
// the caller's bound and floor, the replica's proof, and what answered.
type staleRead struct {
	max      time.Duration
	minIndex uint64
	proof    func(applied uint64) (time.Duration, bool)
	// Set by verifyRead and the answering view.
	age   time.Duration
	index uint64
}

// verifyRead is a read's proof: of leadership for the master's read
// (verify), of freshness for a follower read.
func (r *reads) verifyRead(ctx context.Context, c *call) error {
	st := c.stale
	if st == nil {
		return r.verify(ctx)
	}
	var applied, command uint64
	r.read(func(v fsm.View) { applied, command = v.Indexes() })
	if command < st.minIndex {
		return wire.Errorf(wire.CodeStaleRead, "replica holds index %d, the caller has seen %d", command, st.minIndex)
	}
	age, ok := st.proof(applied)
	switch {
	case !ok:
		return wire.Errorf(wire.CodeStaleRead, "replica cannot bound its staleness (no recent commit index from the leader, or not yet applied)")
	case age > st.max:
		return wire.Errorf(wire.CodeStaleRead, "replica state may be %v old, past the bound of %v", age.Round(time.Millisecond), st.max)
	}
	st.age = age
	return nil
}

// noteAnswered records, for a follower read, the index of the view that
// answers it (at or past the one verifyRead proved fresh).
func (c *call) noteAnswered(v fsm.View) {
	if c.stale != nil {
		_, c.stale.index = v.Indexes()
	}
}

// DispatchFollowerRead serves wire.MethodFollowerRead. The serving master
// answers it as the linearizable read it names (Dispatch, with every
// admission step); a follower answers it from its own state when its
// proof of freshness is within the caller's bound, else CodeStaleRead.
// What a lagging follower cannot know yet (a session or handle made
// after its state, or a node deleted since) is answered CodeStaleRead too,
// so the caller asks the master, which answers with authority.
func (s *Server) DispatchFollowerRead(ctx context.Context, caller Caller, h *wire.Header, body []byte) (any, uint64, error) {
	var req wire.FollowerReadRequest
	if err := wire.Decode(body, &req); err != nil {
		return nil, 0, err
	}
	if !wire.FollowerReadable(req.Read) {
		return nil, 0, wire.Errorf(wire.CodeBadRequest, "a follower read serves GetContentsAndStat, GetStat or ReadDir, not %s", req.Read)
	}
	if req.MaxStaleMillis <= 0 {
		return nil, 0, wire.Errorf(wire.CodeBadRequest, "a follower read needs a staleness bound of at least 1 ms, not %d", req.MaxStaleMillis)
	}
	req.Req.Cache = false // a possibly stale answer is never cached
	inner := *h
	inner.Method = req.Read
	if serving, _ := s.Serving(); serving {
		return s.followerReadAtMaster(ctx, caller, &inner, &req)
	}
	if s.follower == nil {
		return nil, 0, wire.ErrNotMaster
	}
	if caller.Principal == "" {
		caller.Principal = AnonymousPrincipal
	}
	st := &staleRead{max: time.Duration(req.MaxStaleMillis) * time.Millisecond, minIndex: req.MinIndex, proof: s.follower.ReadProof}
	c := &call{caller: caller, admin: caller.Principal == s.cfg.Admin, h: &inner, stale: st}
	// Freshness first: no answer, a denial included, comes from a state
	// older than the bound.
	if err := s.awaitFresh(ctx, c); err != nil {
		return nil, 0, err
	}
	if err := s.checkSessionOwner(c, route{}); err != nil {
		if wire.CodeOf(err) == wire.CodeSessionExpired { // resumed after this state, perhaps
			return nil, 0, wire.Errorf(wire.CodeStaleRead, "replica cannot answer from its state (%v): ask the master", err)
		}
		if wire.CodeOf(err) == wire.CodePermission {
			s.cfg.Audit.Info("audit", "principal", caller.Principal, "op", inner.Method.String(), "session", inner.Session,
				"result", wire.CodePermission.String())
		}
		return nil, 0, err
	}
	rationed := caller.Principal != s.cfg.Admin
	if rationed {
		if err := s.reads.wait(ctx, caller.Principal); err != nil {
			return nil, 0, toWire(err)
		}
	}
	out := &wire.FollowerReadResponse{Replica: s.follower.ID()}
	var resp any
	var err error
	f := &s.ends.files
	switch req.Read {
	case wire.MethodGetContentsAndStat:
		out.Contents, err = f.getContentsAndStat(ctx, c, &req.Req)
		resp = out.Contents
	case wire.MethodGetStat:
		out.Stat, err = f.getStat(ctx, c, &req.Req)
		resp = out.Stat
	case wire.MethodReadDir:
		out.Dir, err = f.readDir(ctx, c, &req.Req)
		resp = out.Dir
	}
	if rationed {
		s.reads.charge(caller.Principal, replyBytes(resp))
	}
	err = toWire(err)
	switch wire.CodeOf(err) {
	case wire.CodeSessionExpired, wire.CodeUnknownSession, wire.CodeHandleInvalid, wire.CodeNotFound:
		// Perhaps only not here yet: the master knows.
		err = wire.Errorf(wire.CodeStaleRead, "replica cannot answer from its state (%v): ask the master", err)
	}
	s.audit(c, err)
	if err != nil {
		return nil, 0, err
	}
	out.Index, out.AgeMillis = st.index, st.age.Milliseconds()
	return out, 0, nil
}

// followerReadAtMaster answers a follower read that reached the serving
// master: the read it names, linearizable, admitted as every call is.
func (s *Server) followerReadAtMaster(ctx context.Context, caller Caller, h *wire.Header, req *wire.FollowerReadRequest) (any, uint64, error) {
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, &req.Req); err != nil {
		return nil, 0, wire.Errorf(wire.CodeInternal, "re-encode a follower read: %v", err)
	}
	resp, epoch, err := s.Dispatch(ctx, caller, h, buf.Bytes()[4:]) // past the frame's length
	if err != nil {
		return nil, epoch, err
	}
	out := &wire.FollowerReadResponse{Master: true}
	if s.follower != nil {
		out.Replica = s.follower.ID()
	}
	s.read(func(v fsm.View) { _, out.Index = v.Indexes() })
	switch r := resp.(type) {
	case *wire.ContentsResponse:
		out.Contents = r
	case *wire.StatResponse:
		out.Stat = r
	case *wire.ReadDirResponse:
		out.Dir = r
	}
	return out, epoch, nil
}

// followerCatchUp is the longest a follower read waits for the replica's
// state to reach the caller's floor or its proof to come within the
// bound: a new client's first read names the index of its own session,
// which a follower learns is committed one append later (within two Raft
// commit timeouts), and asking the master instead costs the read its
// point.
const followerCatchUp = 250 * time.Millisecond

// awaitFresh is verifyRead for a follower read, waiting, at most the
// bound and followerCatchUp, for an applied entry that makes the state
// fresh enough; it then answers as verifyRead does (CodeStaleRead: ask
// the master).
func (s *Server) awaitFresh(ctx context.Context, c *call) error {
	deadline := s.cfg.Clock.Now().Add(min(c.stale.max, followerCatchUp))
	for {
		next := s.applied.wait() // taken before the check: no apply is missed
		err := s.r.verifyRead(ctx, c)
		left := deadline.Sub(s.cfg.Clock.Now())
		if err == nil || wire.CodeOf(err) != wire.CodeStaleRead || left <= 0 {
			return err
		}
		// The proof may also come with an append that applies nothing
		// new: look again after a while even without an apply.
		tick := make(chan struct{})
		t := s.cfg.Clock.AfterFunc(min(left, 20*time.Millisecond), func() { close(tick) })
		select {
		case <-next:
		case <-tick:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// appliedSignal wakes every waiter at the next applied entry. Its lock is
// a leaf.
type appliedSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (a *appliedSignal) wait() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ch == nil {
		a.ch = make(chan struct{})
	}
	return a.ch
}

// fire wakes the waiters, if any (one entry applied).
func (a *appliedSignal) fire() {
	a.mu.Lock()
	if a.ch != nil {
		close(a.ch)
		a.ch = nil
	}
	a.mu.Unlock()
}
