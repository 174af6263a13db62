package master

import (
	"context"
	"slices"
	"sync"
	"time"

	"lockcell/acl"
	"lockcell/wire"
)

// Proxies (docs/subsystems.md#proxies): a principal the cell trusts as a
// proxy may make calls on behalf of the principals of its own clients
// (Behalf), and keeps its clients' sessions' leases with BatchKeepAlive,
// one call for many sessions, each session served exactly as its own
// KeepAlive would be (keepalive.go).

// trustedProxy reports whether principal may speak for others: it is in
// Config.ProxyPrincipals, or it is AnonymousPrincipal while that is the
// cell's admin (a cell without TLS and with the default admin: every
// caller is then the admin, who could do anything anyway). A plain cell
// given another admin does not let anonymous callers name it, or anyone.
func (s *parts) trustedProxy(principal string) bool {
	if principal == AnonymousPrincipal && s.cfg.Admin == AnonymousPrincipal {
		return true
	}
	return slices.Contains(s.cfg.ProxyPrincipals, principal)
}

// Behalf is the caller a call is made for: caller itself, or, when the
// header names another principal (wire.Header.OnBehalfOf), that
// principal, with caller kept as its Proxy. Only a trusted proxy may
// name another principal: anyone else is refused with CodePermission
// (and the refusal audited), so a certificate names its holder and
// nobody else unless the cell says so. A proxied call carries no
// connection id: the proxy bounds its clients' connections itself.
func (s *Server) Behalf(caller Caller, h *wire.Header) (Caller, error) {
	if caller.Principal == "" {
		caller.Principal = AnonymousPrincipal
	}
	if h.OnBehalfOf == "" {
		return caller, nil
	}
	if !s.trustedProxy(caller.Principal) {
		s.cfg.Audit.Info("audit", "principal", caller.Principal, "op", h.Method.String(), "on_behalf_of", h.OnBehalfOf,
			"session", h.Session, "result", wire.CodePermission.String())
		return caller, wire.Errorf(wire.CodePermission,
			"principal %q is not trusted as a proxy (--proxy-principals): it may not call on behalf of %q", caller.Principal, h.OnBehalfOf)
	}
	if err := assertable(h.OnBehalfOf); err != nil {
		return caller, err
	}
	return Caller{Principal: h.OnBehalfOf, Proxy: caller.Principal}, nil
}

// assertable checks a principal a proxy names: one a certificate could
// name (never the wildcard).
func assertable(principal string) error {
	if principal == acl.Wildcard || acl.ValidPrincipal(principal) != nil {
		return wire.Errorf(wire.CodeBadRequest, "a proxy named principal %q, which no certificate can name", principal)
	}
	return nil
}

// entryCall is a BatchKeepAlive entry as the KeepAlive call it stands
// for: the entry's principal as the caller, through the proxy c.
func entryCall(p *parts, c *call, en *wire.BatchKeepAliveEntry) *call {
	return &call{caller: Caller{Principal: en.Principal, Proxy: c.caller.Principal}, admin: en.Principal == p.cfg.Admin,
		h:     &wire.Header{Method: wire.MethodKeepAlive, Session: en.Session, Epoch: en.Epoch, Incarnation: en.Incarnation},
		epoch: c.epoch}
}

// maxSilentMillis bounds an entry's SilentMillis (a day: far past any
// lease) so that its duration cannot overflow.
const maxSilentMillis = int64(24 * time.Hour / time.Millisecond)

// proxyEndpoint serves the calls only a proxy makes: BatchKeepAlive.
type proxyEndpoint struct{ p *parts }

// batchKeepAlive serves the KeepAlives of many sessions in one call. Each
// entry is admitted as its own KeepAlive would be (the session's owner,
// its incarnation) and served by the same lease table path
// (keepAliveAsync): the lease extended on arrival, the acknowledgement
// recorded, and the reply's lease proven and bounded per session exactly
// as a KeepAlive's. The call is held until the first of its sessions is
// answered (an event for it, a quarter of its lease left, its end), the
// request's HoldMillis, the term's end or the proxy leaving; then every
// session still held is answered at once, as an event would answer it.
func (e *proxyEndpoint) batchKeepAlive(ctx context.Context, c *call, req *wire.BatchKeepAliveRequest) (*wire.BatchKeepAliveResponse, error) {
	p := e.p
	if !p.trustedProxy(c.caller.Principal) {
		p.audit(c, wire.ErrPermission)
		return nil, wire.Errorf(wire.CodePermission, "principal %q is not trusted as a proxy (--proxy-principals)", c.caller.Principal)
	}
	n := len(req.Entries)
	if n > wire.MaxBatchKeepAlive {
		return nil, wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive of %d sessions exceeds %d", n, wire.MaxBatchKeepAlive)
	}
	out := &wire.BatchKeepAliveResponse{Epoch: c.epoch, Results: make([]wire.BatchKeepAliveResult, n)}
	if n == 0 {
		out.TTLMillis = p.sess.grantTTL().Milliseconds()
		return out, nil
	}
	b := &kaBatch{out: out.Results, left: n, room: wire.MaxBatchEventBytes, first: make(chan struct{}), all: make(chan struct{})}
	parked := make([]*parkedCall, n)
	share := max(wire.MaxBatchEventBytes/n, 1)
	for i := range req.Entries {
		en := &req.Entries[i]
		out.Results[i].Session = en.Session
		if err := assertable(en.Principal); err != nil {
			b.finish(i, nil, err)
			continue
		}
		ec := entryCall(p, c, en)
		if en.Session == 0 {
			b.finish(i, nil, wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive entry names no session"))
			continue
		}
		if err := p.checkSessionOwner(ec, route{}); err != nil {
			p.audit(ec, err)
			b.finish(i, nil, err)
			continue
		}
		args := keepAliveArgs{session: en.Session, epoch: c.epoch, clientEpoch: en.Epoch, ack: en.AckEvent,
			prompt: en.Prompt, incarnation: en.Incarnation, eventBytes: share, batched: true,
			silent: time.Duration(min(max(en.SilentMillis, 0), maxSilentMillis)) * time.Millisecond}
		// The answer makes the entry's call again for its audit line
		// rather than hold it: a batch parks up to 1,024 sessions for
		// half a lease, and a proxy's 100,000 would hold as many calls.
		parked[i] = p.sess.keepAliveAsync(args, 0, func(resp *wire.KeepAliveResponse, err error) {
			err = toWire(err)
			if err != nil { // a KeepAlive's audit line is for its refusals alone
				p.audit(entryCall(p, c, en), err)
			}
			b.finish(i, resp, err)
		})
	}
	// One timer for the batch: the first of its sessions' holds (a
	// quarter of its lease left) or the request's HoldMillis.
	now := p.cfg.Clock.Now()
	until := time.Time{}
	if req.HoldMillis > 0 {
		until = now.Add(time.Duration(req.HoldMillis) * time.Millisecond)
	}
	for _, pc := range parked {
		if pc != nil && (until.IsZero() || pc.until.Before(until)) {
			until = pc.until
		}
	}
	hold := make(chan struct{})
	if !until.IsZero() {
		t := p.cfg.Clock.AfterFunc(max(until.Sub(now), 0), func() { close(hold) })
		defer t.Stop()
	}
	select {
	case <-b.first:
	case <-hold:
	case <-c.stop:
	case <-ctx.Done():
		// The proxy left the call: nobody reads the answers.
		for _, pc := range parked {
			if pc != nil {
				p.sess.cancelParked(pc, errClientLeft)
			}
		}
		<-b.all
		return nil, wire.Errorf(wire.CodeCanceled, "the proxy left the call")
	}
	// Answer everyone still held now, as an event would, under one proof
	// of leadership (answerBatch).
	p.sess.answerBatch(parked)
	<-b.all
	out.TTLMillis = p.sess.grantTTL().Milliseconds()
	for i := range out.Results {
		if out.Results[i].Code != wire.CodeNotMaster {
			return out, nil
		}
	}
	return nil, wire.ErrNotMaster // no session was served: the proxy looks for the master
}

// kaBatch gathers a BatchKeepAlive's answers.
type kaBatch struct {
	mu    sync.Mutex
	out   []wire.BatchKeepAliveResult
	left  int
	room  int // event bytes the reply may still carry
	fired bool
	first chan struct{} // closed at the first answer
	all   chan struct{} // closed at the last
}

// finish records entry i's answer (a reply or a *wire.Error).
func (b *kaBatch) finish(i int, resp *wire.KeepAliveResponse, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := &b.out[i]
	if err == nil {
		if size := batchEventBytes(resp.Events); size > b.room {
			// Its events would overflow the frame: no lease without
			// them (every extension travels with the events it could
			// cover); they come again, as after a lost reply.
			err = wire.Errorf(wire.CodeUnavailable, "session %d: its events did not fit this batch", r.Session)
		} else {
			b.room -= size
		}
	}
	if err != nil {
		we := toWire(err).(*wire.Error)
		r.Code, r.Msg = we.Code, we.Msg
	} else {
		r.HeldMillis, r.LeaseMillis, r.Events = resp.HeldMillis, resp.LeaseMillis, resp.Events
	}
	if !b.fired {
		b.fired = true
		close(b.first)
	}
	if b.left--; b.left == 0 {
		close(b.all)
	}
}

// batchEventBytes over-estimates the encoding of evs (wire.EventSize).
func batchEventBytes(evs []wire.Event) int {
	n := 0
	for i := range evs {
		n += wire.EventSize(&evs[i])
	}
	return n
}

// answerBatch ends the hold of every call of ps still parked and answers
// them in this goroutine, as finish answers one: leadership proven by one
// quorum round begun within a tenth of a lease (shared, as every
// KeepAlive's is), then each session's reply bounded by that round's
// start plus a lease (reply). nil entries are passed over.
func (ss *sessions) answerBatch(ps []*parkedCall) {
	ss.mu.Lock()
	mine := make([]*parkedCall, 0, len(ps))
	for _, pc := range ps {
		if pc != nil && ss.unparkLocked(pc) {
			mine = append(mine, pc)
		}
	}
	if len(mine) > 0 {
		ss.wg.Add(1) // as finish: the replies are made before the term's end is waited out
	}
	ss.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	var proven time.Time
	err := error(nil)
	if !ss.auth.leads() {
		err = errStopped // never extend a lease once deposed
	} else if proven, err = ss.auth.provenSince(mine[0].ctx, ss.clock.Now().Add(-ss.ttl/10), ss.ttl/8); err != nil {
		err = errStopped
	}
	type answer struct {
		resp *wire.KeepAliveResponse
		err  error
	}
	out := make([]answer, len(mine))
	for i, pc := range mine {
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].resp, out[i].err = ss.reply(pc.l, pc.a, pc.arrived, proven)
	}
	ss.wg.Done()
	for i, pc := range mine {
		pc.done(out[i].resp, out[i].err)
	}
}
