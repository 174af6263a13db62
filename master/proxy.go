package master

import (
	"context"
	"slices"
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
// its incarnation) and served by the same lease table path (arriveLocked,
// reply): the lease extended on arrival, the acknowledgement recorded,
// and the reply's lease proven and bounded per session exactly as a
// KeepAlive's. The sessions are held together as one record
// (heldbatch.go) until the first of them is to be answered (an event for
// it, a quarter of its lease left, its end), the request's HoldMillis,
// the term's end or the proxy leaving; then every session is answered at
// once, as an event would answer it.
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
	out := &wire.BatchKeepAliveResponse{Epoch: c.epoch}
	if req.CacheSession != 0 || len(req.Served) > 0 {
		if err := e.takeServed(c, req, out); err != nil {
			return nil, err
		}
		defer func() { out.CacheSeq = p.sess.pendingEventSeq(req.CacheSession) }() // after every lease below
	}
	if n == 0 {
		out.TTLMillis = p.sess.grantTTL().Milliseconds()
		return out, nil
	}
	share := max(wire.MaxBatchEventBytes/n, 1)
	// The entries refused before the hold, answered after it with the
	// others: the reply's results are made only then, not held for half
	// a lease with every session of a proxy's batches.
	var early []batchEntryAnswer
	refuse := func(i int, err error, audited bool) {
		if audited { // a KeepAlive's audit line is for its refusals
			p.audit(entryCall(p, c, &req.Entries[i]), toWire(err))
		}
		early = append(early, batchEntryAnswer{entry: i, err: err})
	}
	args := make([]keepAliveArgs, 0, n)
	entries := make([]int, 0, n)
	for i := range req.Entries {
		en := &req.Entries[i]
		if err := assertable(en.Principal); err != nil {
			refuse(i, err, false)
			continue
		}
		if en.Session == 0 {
			refuse(i, wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive entry names no session"), false)
			continue
		}
		if err := p.checkSessionOwner(entryCall(p, c, en), route{}); err != nil {
			refuse(i, err, true)
			continue
		}
		args = append(args, keepAliveArgs{session: en.Session, epoch: c.epoch, clientEpoch: en.Epoch, ack: en.AckEvent,
			prompt: en.Prompt, incarnation: en.Incarnation, eventBytes: share, batched: true, cacheSession: req.CacheSession,
			silent: time.Duration(min(max(en.SilentMillis, 0), maxSilentMillis)) * time.Millisecond})
		entries = append(entries, i)
	}
	held, until, refused := p.sess.holdBatch(args, entries)
	for _, r := range refused {
		refuse(r.entry, r.err, true)
	}
	var answers []batchEntryAnswer
	if held != nil {
		// One timer for the batch: the first of its sessions' holds (a
		// quarter of its lease left) or the request's HoldMillis. A
		// refused entry is an answer (its session ended, or is not the
		// caller's): the batch is answered at once, so the proxy tells
		// that client without waiting out the others' hold.
		now := p.cfg.Clock.Now()
		if len(early) > 0 {
			until = time.Time{}
		} else if h := now.Add(time.Duration(req.HoldMillis) * time.Millisecond); req.HoldMillis > 0 && h.Before(until) {
			until = h
		}
		var cancel error
		if !until.IsZero() {
			hold := make(chan struct{})
			t := p.cfg.Clock.AfterFunc(max(until.Sub(now), 0), func() { close(hold) })
			select {
			case <-held.woken:
			case <-hold:
			case <-c.stop:
			case <-ctx.Done():
				cancel = errClientLeft // the proxy left the call: nobody reads the answers
			}
			t.Stop()
		}
		answers = p.sess.endBatch(held, cancel)
		for _, a := range answers {
			if a.err != nil { // a KeepAlive's audit line is for its refusals
				p.audit(entryCall(p, c, &req.Entries[a.entry]), toWire(a.err))
			}
		}
		if cancel != nil {
			return nil, wire.Errorf(wire.CodeCanceled, "the proxy left the call")
		}
	}
	// The reply, each entry's result in the request's order: the
	// refusals, then the answers (each reply's events within what is
	// left of the frame's room).
	out.Results = make([]wire.BatchKeepAliveResult, n)
	for i := range req.Entries {
		out.Results[i].Session = req.Entries[i].Session
	}
	b := &kaBatch{out: out.Results, room: wire.MaxBatchEventBytes}
	for _, a := range early {
		b.finish(a.entry, nil, a.err)
	}
	for _, a := range answers {
		b.finish(a.entry, a.resp, a.err)
	}
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
	out  []wire.BatchKeepAliveResult
	room int // event bytes the reply may still carry
}

// finish records entry i's answer (a reply or a *wire.Error).
func (b *kaBatch) finish(i int, resp *wire.KeepAliveResponse, err error) {
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
}

// batchEventBytes over-estimates the encoding of evs (wire.EventSize).
func batchEventBytes(evs []wire.Event) int {
	n := 0
	for i := range evs {
		n += wire.EventSize(&evs[i])
	}
	return n
}
