package master

import (
	"context"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// The session endpoints: CreateSession, KeepAlive, CloseSession and
// ListSessions. The lease table they serve through is sessions.go.
func (e *sessionEndpoint) createSession(ctx context.Context, c *call, req *wire.CreateSessionRequest) (*wire.CreateSessionResponse, error) {
	if len(req.ClientName) > 256 {
		return nil, wire.Errorf(wire.CodeBadRequest, "client name of %d bytes exceeds 256", len(req.ClientName))
	}
	if err := wire.CheckIdentity(req.Host, req.PID, req.Program); err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	unreserve, err := e.reserveSession(ctx, c.caller)
	if err != nil {
		return nil, err
	}
	defer unreserve() // after the lease below counts it on its connection
	res, err := e.w.apply(ctx, c, &fsm.Command{Client: req.ClientName, Payload: &fsm.CreateSessionArgs{Host: req.Host, PID: req.PID, Program: req.Program}})
	if err != nil {
		return nil, err
	}
	e.sess.created(res.Session, c.caller.Conn)
	return &wire.CreateSessionResponse{Session: res.Session, Epoch: c.epoch, LeaseMillis: e.cfg.LeaseTTL.Milliseconds(),
		ResumeSecret: e.sessionSecret(c, res.Session)}, nil
}

// adopt admits a KeepAlive of session id that has no lease (leaseState):
// only a session the state has live, while Raft believes this replica
// leads.
func (s *parts) adopt(id uint64) error {
	if !s.cons.IsLeader() {
		return errStopped
	}
	var live bool
	var applied uint64
	s.read(func(v fsm.View) {
		live = v.SessionExists(id)
		_, _, _, applied = v.Counts()
	})
	if id == 0 || !live {
		if id == 0 || id > applied {
			return wire.Errorf(wire.CodeUnknownSession, "session %d was never created in this cell", id)
		}
		return wire.Errorf(wire.CodeSessionExpired, "session %d has expired or was closed", id)
	}
	return nil
}

func (e *sessionEndpoint) closeSession(ctx context.Context, c *call) (*wire.Empty, error) {
	res, err := e.w.applyInvalidating(ctx, c.stop, &fsm.Command{Session: c.h.Session, Time: e.w.now(),
		Principal: c.caller.Principal, Admin: c.isAdmin(), Proxy: c.caller.Proxy, Incarnation: c.h.Incarnation,
		Payload: &fsm.CloseSessionArgs{}})
	if err != nil {
		return nil, err
	}
	return &wire.Empty{}, resultErr(res)
}

// listSessions reports live sessions with the lease this master grants
// each (memory), what each holds and the identity its client declared
// (replicated state): every session to the admin, to anyone else only the
// sessions of its own principal, and Total counts only what the caller
// may see. Others' sessions would name their principals, clients, hosts
// and the locks they hold. The list stops short of MaxListedSessions when
// it would outgrow listSessionsBytes (Total still counts them all).
func (e *sessionEndpoint) listSessions(ctx context.Context, c *call) (*wire.ListSessionsResponse, error) {
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	var views []fsm.SessionView
	var ids []fsm.Identity
	e.r.read(func(v fsm.View) {
		views = v.Sessions()
		if !c.isAdmin() {
			own := views[:0]
			for _, sv := range views {
				if sv.Principal == c.caller.Principal {
					own = append(own, sv)
				}
			}
			views = own
		}
		ids = make([]fsm.Identity, min(len(views), wire.MaxListedSessions))
		for i := range ids {
			ids[i], _ = v.SessionIdentity(views[i].ID)
		}
	})
	now := e.cfg.Clock.Now()
	out := &wire.ListSessionsResponse{Total: uint64(len(views))}
	views = views[:len(ids)]
	sids := make([]uint64, len(views))
	for i, v := range views {
		sids[i] = v.ID
	}
	left := e.sess.leaseLeft(sids, now)
	out.Sessions = sessionInfos(views, ids, left, listSessionsBytes)
	return out, nil
}

// sessionInfos turns listed sessions, with their identities (ids[i] is
// views[i]'s) and lease left, into their wire form, in order, until they
// would add up to more than budget bytes (sessionInfoBytes). The first is
// always kept.
func sessionInfos(views []fsm.SessionView, ids []fsm.Identity, left map[uint64]time.Duration, budget int) []wire.SessionInfo {
	out := make([]wire.SessionInfo, 0, len(views))
	for i, v := range views {
		size := sessionInfoBytes(v, ids[i])
		if size > budget && len(out) > 0 {
			break
		}
		budget -= size
		out = append(out, wire.SessionInfo{ID: v.ID, Client: v.Client, Principal: v.Principal, Created: v.Created,
			Handles: uint32(v.Handles), Locks: v.Locks, LeaseMillis: left[v.ID].Milliseconds(),
			Host: ids[i].Host, PID: ids[i].PID, Program: ids[i].Program})
	}
	return out
}

// listSessionsBytes bounds what a ListSessions reply's sessions may add
// up to (sessionInfoBytes, an over-estimate of their encoding), well
// inside a frame: MaxListedSessions sessions that declared the longest
// hosts and programs would not fit one.
const listSessionsBytes = wire.MaxFrameSize / 2

// sessionInfoBytes over-estimates the encoding of one listed session.
func sessionInfoBytes(v fsm.SessionView, id fsm.Identity) int {
	n := 64 + len(v.Client) + len(v.Principal) + len(id.Host) + len(id.Program)
	for _, l := range v.Locks {
		n += len(l) + 4
	}
	return n
}

// DispatchKeepAlive serves a KeepAlive (h.Method must be it) without
// holding the caller's goroutine while the call is parked: it admits the
// call and decodes it as Dispatch does, then done gets the response value
// (or a *wire.Error) and the master's epoch exactly once. A call answered
// at once (refused, events waiting, a prompt KeepAlive) gets it in this
// goroutine before DispatchKeepAlive returns; a parked one later, from
// another goroutine that holds none of the master's locks, when its hold
// ends (its timer, an event, the master going unproven, Stop, or
// ConnClosed for caller.Conn, or the cancel it returns). done may block
// writing the reply. cancel, nil when the call was answered at once, ends
// a parked call early (its client left it): done gets a CodeCanceled
// error nobody will read; once the hold has ended it does nothing.
func (s *Server) DispatchKeepAlive(caller Caller, h *wire.Header, body []byte, done func(resp any, epoch uint64, err error)) (cancel func()) {
	if h.Method != wire.MethodKeepAlive {
		done(nil, 0, wire.Errorf(wire.CodeBadRequest, "method %s is not a KeepAlive", h.Method))
		return nil
	}
	r := s.routes[h.Method]
	epoch, _, err := s.checkServing(h, r)
	if err != nil {
		done(nil, epoch, err)
		return nil
	}
	conn := caller.Conn // a parked call ends with its connection, proxied or not
	if caller, err = s.Behalf(caller, h); err != nil {
		done(nil, epoch, err)
		return nil
	}
	c := &call{caller: caller, admin: caller.Principal == s.cfg.Admin, h: h, epoch: epoch}
	if err := s.checkSessionOwner(c, r); err != nil {
		if wire.CodeOf(err) == wire.CodePermission { // not the moved session's old process
			s.cfg.Audit.Info("audit", "principal", caller.Principal, "op", h.Method.String(), "session", h.Session,
				"result", wire.CodePermission.String())
		}
		done(nil, epoch, err)
		return nil
	}
	// Decoded into a pooled request (it holds no strings or slices, so
	// nothing decoded can alias one): the master's most frequent call.
	req := keepAliveReqs.Get().(*wire.KeepAliveRequest)
	*req = wire.KeepAliveRequest{}
	err = wire.Decode(body, req)
	args := keepAliveArgs{session: h.Session, epoch: epoch, clientEpoch: h.Epoch,
		ack: req.AckEvent, prompt: req.Prompt, incarnation: h.Incarnation}
	keepAliveReqs.Put(req)
	if err != nil {
		err = toWire(err)
		s.audit(c, err)
		done(nil, epoch, err)
		return nil
	}
	p := s.sess.keepAliveAsync(args, conn, func(resp *wire.KeepAliveResponse, err error) {
		err = toWire(err)
		s.audit(c, err)
		if err != nil {
			done(nil, epoch, err)
			return
		}
		done(resp, epoch, nil)
	})
	if p == nil {
		return nil
	}
	return func() { s.sess.cancelParked(p, errClientLeft) }
}

// keepAliveReqs are DispatchKeepAlive's requests, decoded into and
// copied out of (into keepAliveArgs) at once.
var keepAliveReqs = sync.Pool{New: func() any { return new(wire.KeepAliveRequest) }}

// ParkedKeepAlives reports how many KeepAlives are parked at this master
// (DispatchKeepAlive), and over how many client connections.
func (s *Server) ParkedKeepAlives() (calls, conns int) { return s.sess.parkedCount() }

// ConnClosed ends every KeepAlive parked by DispatchKeepAlive for a call
// that came over conn (Caller.Conn), which closed: each one's done is
// called, in this goroutine, with a CodeCanceled error nobody will read.
// A client that resets only its KeepAlive's stream keeps the call parked
// until its hold ends; the transport bounds how many a session may have.
func (s *Server) ConnClosed(conn uint64) { s.sess.connClosed(conn) }

// keepAliveWaiting is Dispatch's KeepAlive: DispatchKeepAlive, waiting
// for its answer, so there is one KeepAlive path. The caller giving up
// (ctx) ends a parked call as its client leaving it would; Stop answers
// every parked call NotMaster.
func (s *Server) keepAliveWaiting(ctx context.Context, caller Caller, h *wire.Header, body []byte) (any, uint64, error) {
	type result struct {
		resp  any
		epoch uint64
		err   error
	}
	ch := make(chan result, 1)
	cancel := s.DispatchKeepAlive(caller, h, body, func(resp any, epoch uint64, err error) { ch <- result{resp, epoch, err} })
	if cancel != nil {
		select {
		case r := <-ch:
			return r.resp, r.epoch, r.err
		case <-ctx.Done():
			cancel()
		}
	}
	r := <-ch // the answer, or the end of the park on its way
	return r.resp, r.epoch, r.err
}
