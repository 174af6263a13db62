package master

import (
	"slices"

	"lockcell/fsm"
	"lockcell/wire"
)

// A proxy's read cache (docs/subsystems.md#proxies). A proxy that caches
// reads keeps a session of its own principal, its cache session, and is
// a cacher through it like any client: a read it forwards naming that
// session (wire.Header.ProxyCache) registers it as a cacher of the name
// too, and every change of the name first invalidates it there. The
// proxy then serves its clients' reads of the name from its cache, and
// may let them cache what it served. Of those clients the master knows
// nothing until the proxy acknowledges the invalidation: it reports them
// with the acknowledgement (wire.BatchKeepAliveRequest.Served), and the
// master invalidates the name to each as to a cacher of its own, the
// change in flight waiting for them too (invalidator.transfer).
//
// A proxy that never acknowledges (it crashed, it is cut off) cannot
// report them, so its cache session's invalidation waits out the cache
// session's lease, which every batch naming it extends to the end of
// every lease it tells a client (sessions.noteRelayedLocked): those are
// the leases under which a client may trust what the proxy served it,
// and the cache session (with its registrations) cannot expire before
// they all have. A lease a batch grants after the invalidation was
// queued is not relayed to a client the proxy served until the proxy
// has taken in the invalidation and reported that client
// (wire.BatchKeepAliveResponse.CacheSeq); a client drops what a proxy
// served it when its leases stop coming from that proxy's cache session
// (wire.ContentsResponse.Proxy: a new cache session is a new instance).
// So a change waits at most one lease for a silent proxy, as for any
// cacher. The proxy never closes its cache session: it lets it expire.

// fillRegister registers a trusted proxy's cache session as a cacher of
// name, for a read it forwards to fill its cache (wire.Header.ProxyCache):
// only a session of the proxy's own principal, under the same rules as
// any cacher (invalidator.register). owner is the cache session's
// principal, read in the read's own view ("" if it has none). It reports
// whether it did.
func (e *fileEndpoint) fillRegister(c *call, owner, name string) bool {
	cache := c.h.ProxyCache
	if cache == 0 || c.caller.Proxy == "" || owner != c.caller.Proxy { // Proxy is set only for a trusted one (Server.Behalf)
		return false
	}
	return e.inv.register(cache, owner, name)
}

// takeServed checks a batch's cache session and, when the batch reports
// the clients its proxy's cache served names to, invalidates each name
// to them (invalidator.transfer) before any of the batch's KeepAlives is
// taken in, the cache session's acknowledgement among them.
func (e *proxyEndpoint) takeServed(c *call, req *wire.BatchKeepAliveRequest, out *wire.BatchKeepAliveResponse) error {
	p := e.p
	cache := req.CacheSession
	if cache == 0 {
		return wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive reports served clients without a cache session")
	}
	owner, ok := p.state.SessionPrincipal(cache)
	if ok && owner != c.caller.Principal {
		return wire.Errorf(wire.CodePermission, "cache session %d belongs to another principal", cache)
	}
	if !ok || !p.sess.cacheSession(cache) {
		// No lease of the batch may be relayed under a cache session
		// that no longer holds back the writes its clients' caches
		// depend on: the proxy starts a new one (a new instance, whose
		// clients drop what the old one served them).
		return wire.Errorf(wire.CodeSessionExpired, "%s: cache session %d has expired or was closed", wire.CacheSessionGoneMsg, cache)
	}
	if len(req.Served) == 0 {
		return nil
	}
	carried := false
	for i := range req.Entries {
		carried = carried || req.Entries[i].Session == cache
	}
	if !carried {
		// The report and the acknowledgement travel together, or the
		// acknowledgement could be taken first.
		return wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive reports served clients without its cache session's KeepAlive")
	}
	total := 0
	for _, sv := range req.Served {
		total += len(sv.Sessions)
		if err := wire.ValidateName(p.cfg.Cell, sv.Name); err != nil {
			return wire.Errorf(wire.CodeInvalidName, "served name %q: %v", sv.Name, err)
		}
	}
	if total > wire.MaxServedSessions {
		return wire.Errorf(wire.CodeBadRequest, "a BatchKeepAlive reports %d served sessions, over %d", total, wire.MaxServedSessions)
	}
	principals := make(map[uint64]string, total)
	p.r.read(func(v fsm.View) {
		for _, sv := range req.Served {
			for _, s := range sv.Sessions {
				principals[s], _ = v.SessionPrincipal(s)
			}
		}
	})
	principal := func(s uint64) string { return principals[s] }
	for _, sv := range req.Served {
		barred, until := p.inv.transfer(cache, sv.Name, sv.Sessions, principal)
		for _, b := range barred {
			if !slices.Contains(out.NoCache, b) {
				out.NoCache = append(out.NoCache, b)
			}
		}
		if ms := until.Sub(p.cfg.Clock.Now()).Milliseconds(); ms > out.NoCacheMillis {
			out.NoCacheMillis = ms
		}
	}
	return nil
}
