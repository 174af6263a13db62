package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/wire"
)

// The read cache (Config.CacheReads; docs/subsystems.md, "Proxies"). The
// proxy answers its clients' reads of a file's contents or stat from a
// cache of its own, as Chubby's proxies do, so the master serves one
// read of a name per proxy between two writes of it rather than one per
// client.
//
// Consistency rests on the master's cache-invalidation protocol, with
// the proxy as one cacher standing for its clients:
//
//   - The proxy keeps a session of its own, the cache session, kept
//     alive by its own BatchKeepAlive loop (run). A read it forwards to
//     fill the cache names it (wire.Header.ProxyCache): the master
//     registers the cache session as a cacher of the name before the
//     read, so every later write of the name invalidates it first. An
//     answer is cached only if the master says it registered
//     (ProxyCacheable) and no invalidation of the name was taken in
//     since the fill began (fillToken).
//   - An entry is served only while the cache session's lease (from the
//     master, as a client counts its own) runs, at the epoch the client
//     names, to a client whose session the proxy keeps with a lease it
//     may tell, through a handle the client opened through this proxy on
//     the same instance of the node, and to a principal the master let
//     read the name since the fill (ACLs change only with an invalidation
//     of the names they govern).
//   - A client asking to cache an answer may get it cacheable: the proxy
//     notes whom it served each name to (served). When the cache
//     session's invalidation of the name arrives, the proxy drops the
//     entry and reports those clients with its acknowledgement
//     (wire.BatchKeepAliveRequest.Served); the master invalidates the
//     name to each before the acknowledgement counts. Until the master
//     has accepted the report, no newer lease reaches those clients
//     (keeper.gateLocked), nor does a lease from a batch whose answer
//     names a cache-session event the proxy has not yet taken in
//     (wire.BatchKeepAliveResponse.CacheSeq); and a client is served
//     cacheable only under a lease told once every such event was taken
//     in (keeper.serveCheck): an invalidation queued before a lease was
//     granted does not wait that lease out.
//   - Every client answer names the proxy's instance (a random number
//     drawn with each cache session): a client keeps what the cache
//     served it only under leases from the same instance.
//   - On a fail-over event, or when its cache session ends, the proxy
//     drops everything: entries, fills in flight and what it served.
//     It never closes its cache session; it lets it expire.
//
// Bounds (docs/limits.md, "Proxies"): the entries' bytes
// (Config.CacheBytes), a quarter of them filled by one principal's reads
// at most; the handles tracked, per session and in all; the names served
// cacheable, per session, per principal and in all. Past a bound the
// proxy forwards the read, or answers it uncacheable: never an error.
//
// Lock order: readCache.mu, then keeper.mu (the keeper never calls the
// cache holding its own).

// Bounds of the read cache, besides Config.CacheBytes.
const (
	// DefaultCacheBytes is the cache's size when Config.CacheBytes is 0.
	DefaultCacheBytes = 64 << 20
	// maxCacheHandles and maxCacheHandlesPerSession bound the handles
	// the cache tracks (to know the name a read's handle names).
	maxCacheHandles           = 1 << 20
	maxCacheHandlesPerSession = 4096
	// maxServed, maxServedPerPrincipal and maxServedPerSession bound the
	// names served cacheable and not yet invalidated (a session's each).
	maxServed             = 1 << 20
	maxServedPerPrincipal = 1 << 16
	maxServedPerSession   = 4096
	// maxAllowed bounds the principals an entry remembers as allowed.
	maxAllowed = 64
	// sweepHandlesEvery is how often the handles of sessions the proxy
	// no longer keeps are forgotten.
	sweepHandlesEvery = 10 * time.Second
)

type handleKey struct{ session, handle uint64 }

// openHandle is what the cache knows of a handle opened through the
// proxy: its node's name and instance.
type openHandle struct {
	name     string
	instance uint64
}

// cacheEntry is one name's cached answer: the stat, and the contents if a
// contents read filled it. Immutable once stored (but for allowed): an
// answer shares its contents.
type cacheEntry struct {
	contents    []byte
	hasContents bool
	stat        wire.Stat
	allowed     []string // principals the master let read it since the fill
	filler      string   // the principal whose read filled it, charged its bytes
	size        int64
}

// fillToken is one fill in flight: stale once an invalidation of its name
// (or of everything) was taken in after it began.
type fillToken struct {
	name    string
	session uint64 // the cache session it was registered under
	stale   bool
	done    chan struct{} // closed when the fill ends, stored or not
}

// servedReport is a piece of what the proxy reports with its cache
// session's acknowledgement: the sessions served name as cacheable, up to
// wire.MaxServedSessions in a piece, for the invalidation event seq.
type servedReport struct {
	seq      uint64
	name     string
	sessions []uint64
}

// readCache is the proxy's read cache.
type readCache struct {
	k         *keeper
	up        *upstream
	m         *metrics
	log       *slog.Logger
	ctx       context.Context
	principal string // the proxy's own, its cache session's owner
	maxBytes  int64

	// seen is the newest cache-session event taken in; instance the
	// number client answers carry (0 while there is no cache session);
	// sessionID the cache session batches name. Read without mu.
	seen      atomic.Uint64
	instance  atomic.Uint64
	sessionID atomic.Uint64

	mu         sync.Mutex
	session    uint64
	epoch      uint64
	leaseEnd   time.Time
	ttl        time.Duration
	gen        uint64 // bumped when everything is dropped
	entries    map[string]*cacheEntry
	bytes      int64
	filledBy   map[string]int64
	handles    map[handleKey]openHandle
	perSession map[uint64]int
	served     map[string]map[uint64]string // name -> the sessions served it cacheable -> their principals
	servedBy   map[uint64]int
	servedByP  map[string]int
	servedN    int
	reports    []servedReport
	fills      map[string][]*fillToken
	noCache    map[string]time.Time
	// hits counts answers from the cache, fills the entries stored,
	// invalidations the names invalidated, reported the sessions
	// reported with them (and accepted).
	hits, filled, invalidations, reported uint64
}

func newReadCache(ctx context.Context, k *keeper, up *upstream, m *metrics, log *slog.Logger, principal string, maxBytes int64) *readCache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	rc := &readCache{k: k, up: up, m: m, log: log, ctx: ctx, principal: principal, maxBytes: maxBytes,
		ttl: defaultTTL}
	rc.resetLocked()
	rc.handles, rc.perSession = map[handleKey]openHandle{}, map[uint64]int{}
	return rc
}

// resetLocked drops every entry, fill and record of what was served.
// rc.mu is held (or rc is new).
func (rc *readCache) resetLocked() {
	for _, ts := range rc.fills {
		for _, t := range ts {
			t.stale = true
		}
	}
	rc.gen++
	rc.entries, rc.bytes, rc.filledBy = map[string]*cacheEntry{}, 0, map[string]int64{}
	rc.served, rc.servedBy, rc.servedByP, rc.servedN = map[string]map[uint64]string{}, map[uint64]int{}, map[string]int{}, 0
	rc.reports = nil
	rc.fills = map[string][]*fillToken{}
	rc.noCache = map[string]time.Time{}
}

// usableLocked reports whether the cache may answer now: it has a cache
// session whose lease runs. rc.mu is held.
func (rc *readCache) usableLocked(now time.Time) bool {
	return rc.session != 0 && now.Before(rc.leaseEnd)
}

// serve answers a read from the cache if it may (see the top of this
// file); ok is false when the read is to be forwarded.
func (rc *readCache) serve(principal string, h *wire.Header, req *wire.HandleRequest) (resp any, epoch uint64, ok bool) {
	if len(req.Sequencer) != 0 || h.Session == 0 {
		return nil, 0, false // the master checks sequencers
	}
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.usableLocked(now) || h.Epoch != rc.epoch {
		return nil, 0, false
	}
	oh, known := rc.handles[handleKey{h.Session, req.Handle}]
	if !known {
		return nil, 0, false
	}
	e := rc.entries[oh.name]
	if e == nil || e.stat.Instance != oh.instance || (h.Method == wire.MethodGetContentsAndStat && !e.hasContents) ||
		!slices.Contains(e.allowed, principal) {
		return nil, 0, false
	}
	set := rc.served[oh.name]
	_, already := set[h.Session]
	wantCache := req.Cache && !rc.barredLocked(principal, now) && (already || rc.roomToServeLocked(principal, h.Session))
	// Served it before, and not yet reported: it is counted already.
	live, cacheable := rc.k.serveCheck(h.Session, h.Incarnation, principal, wantCache, !already, now)
	if !live {
		return nil, 0, false
	}
	if cacheable && !already {
		if set == nil {
			set = map[uint64]string{}
			rc.served[oh.name] = set
		}
		set[h.Session] = principal
		rc.servedBy[h.Session]++
		rc.servedByP[principal]++
		rc.servedN++
	}
	rc.hits++
	rc.m.cacheReads.WithLabelValues("hit").Inc()
	inst := rc.instance.Load()
	if h.Method == wire.MethodGetStat {
		return &wire.StatResponse{Stat: e.stat, Cacheable: cacheable, Proxy: inst}, rc.epoch, true
	}
	return &wire.ContentsResponse{Contents: e.contents, Stat: e.stat, Cacheable: cacheable, Proxy: inst}, rc.epoch, true
}

// roomToServeLocked reports whether one more name may be served
// cacheable to session of principal. rc.mu is held.
func (rc *readCache) roomToServeLocked(principal string, session uint64) bool {
	return rc.servedN < maxServed && rc.servedByP[principal] < maxServedPerPrincipal && rc.servedBy[session] < maxServedPerSession
}

// barredLocked reports whether the master said principal may not cache
// now (wire.BatchKeepAliveResponse.NoCache). rc.mu is held.
func (rc *readCache) barredLocked(principal string, now time.Time) bool {
	until, ok := rc.noCache[principal]
	if ok && !now.Before(until) {
		delete(rc.noCache, principal)
		return false
	}
	return ok
}

// fillStart begins a fill of the name req's handle names, for a read the
// proxy forwards: it returns the token and the cache session to name
// (wire.Header.ProxyCache), or nil when the answer is not to be cached.
func (rc *readCache) fillStart(h *wire.Header, req *wire.HandleRequest) (*fillToken, uint64) {
	if len(req.Sequencer) != 0 || h.Session == 0 {
		return nil, 0
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.usableLocked(time.Now()) {
		return nil, 0
	}
	oh, known := rc.handles[handleKey{h.Session, req.Handle}]
	if !known {
		return nil, 0
	}
	t := &fillToken{name: oh.name, session: rc.session, done: make(chan struct{})}
	rc.fills[oh.name] = append(rc.fills[oh.name], t)
	return t, rc.session
}

// filling returns, for a read the cache could not answer, a channel
// closed when a fill of the same name already in flight ends (nil: none).
// The read waits for it and asks the cache again: the reads that follow
// a write of a name many clients read arrive together, and without this
// each would go to the master before the first answer is stored.
func (rc *readCache) filling(h *wire.Header, req *wire.HandleRequest) <-chan struct{} {
	if len(req.Sequencer) != 0 || h.Session == 0 {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	oh, known := rc.handles[handleKey{h.Session, req.Handle}]
	if !known {
		return nil
	}
	for _, t := range rc.fills[oh.name] {
		if !t.stale && t.session == rc.session {
			return t.done
		}
	}
	return nil
}

// fillDone ends a fill: the master's answer (body, when st is OK) is
// stored if the master registered the cache session and nothing was
// invalidated since the fill began.
func (rc *readCache) fillDone(t *fillToken, principal string, method wire.Method, st *wire.Status, body []byte) {
	var stat wire.Stat
	var contents []byte
	registered := false
	if st != nil && st.Code == wire.CodeOK {
		if method == wire.MethodGetStat {
			var r wire.StatResponse
			if wire.Decode(body, &r) == nil {
				stat, registered = r.Stat, r.ProxyCacheable
			}
		} else {
			var r wire.ContentsResponse
			if wire.Decode(body, &r) == nil {
				stat, contents, registered = r.Stat, r.Contents, r.ProxyCacheable
			}
		}
	}
	defer close(t.done)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ts := rc.fills[t.name]
	if i := slices.Index(ts, t); i >= 0 {
		ts = slices.Delete(ts, i, i+1)
		if len(ts) == 0 {
			delete(rc.fills, t.name)
		} else {
			rc.fills[t.name] = ts
		}
	}
	if !registered || t.stale || t.session != rc.session {
		return
	}
	hasContents := method == wire.MethodGetContentsAndStat
	if e := rc.entries[t.name]; e != nil && reflect.DeepEqual(e.stat, stat) {
		// The same node as cached: one more principal may read it, and
		// a stat entry gains its contents.
		if !slices.Contains(e.allowed, principal) && len(e.allowed) < maxAllowed {
			e.allowed = append(e.allowed, principal)
		}
		if e.hasContents || !hasContents {
			return
		}
	}
	size := int64(len(t.name)+len(contents)) + 256
	if size > rc.maxBytes/4 || rc.filledBy[principal]+size > rc.maxBytes/4 {
		rc.dropEntryLocked(t.name)
		return // too big, or the principal filled its share
	}
	rc.dropEntryLocked(t.name)
	rc.entries[t.name] = &cacheEntry{contents: contents, hasContents: hasContents, stat: stat, allowed: []string{principal},
		filler: principal, size: size}
	rc.bytes += size
	rc.filledBy[principal] += size
	rc.filled++
	rc.m.cacheReads.WithLabelValues("fill").Inc()
	for name := range rc.entries { // over the budget: any others go (a map's order is as good as any)
		if rc.bytes <= rc.maxBytes {
			break
		}
		if name != t.name {
			rc.dropEntryLocked(name)
		}
	}
}

// dropEntryLocked forgets name's entry. rc.mu is held.
func (rc *readCache) dropEntryLocked(name string) {
	if e := rc.entries[name]; e != nil {
		rc.bytes -= e.size
		if rc.filledBy[e.filler] -= e.size; rc.filledBy[e.filler] <= 0 {
			delete(rc.filledBy, e.filler)
		}
		delete(rc.entries, name)
	}
}

// noteCall keeps the cache's handles in step with a call the master
// answered OK: an Open's handle names its node, a Close or Delete ends it.
func (rc *readCache) noteCall(session uint64, method wire.Method, body, resp []byte) {
	switch method {
	case wire.MethodOpen:
		var req wire.OpenRequest
		var r wire.OpenResponse
		if wire.Decode(body, &req) != nil || wire.Decode(resp, &r) != nil || r.Handle == 0 {
			return
		}
		name := req.Path
		if r.Name != "" {
			name = r.Name
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		key := handleKey{session, r.Handle}
		if _, ok := rc.handles[key]; !ok {
			if len(rc.handles) >= maxCacheHandles || rc.perSession[session] >= maxCacheHandlesPerSession {
				return // not tracked: its reads are forwarded
			}
			rc.perSession[session]++
		}
		rc.handles[key] = openHandle{name: name, instance: r.Stat.Instance}
	case wire.MethodClose, wire.MethodDelete:
		var req wire.HandleRequest
		if wire.Decode(body, &req) != nil {
			return
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.forgetHandleLocked(handleKey{session, req.Handle})
	}
}

func (rc *readCache) forgetHandleLocked(key handleKey) {
	if _, ok := rc.handles[key]; !ok {
		return
	}
	delete(rc.handles, key)
	if rc.perSession[key.session]--; rc.perSession[key.session] <= 0 {
		delete(rc.perSession, key.session)
	}
}

// sweepHandles forgets the handles of sessions the proxy no longer keeps:
// one walk of the handles, however many sessions went.
func (rc *readCache) sweepHandles() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	gone := map[uint64]bool{}
	for session := range rc.perSession {
		if !rc.k.keeps(session) {
			gone[session] = true
			delete(rc.perSession, session)
		}
	}
	if len(gone) == 0 {
		return
	}
	for key := range rc.handles {
		if gone[key.session] {
			delete(rc.handles, key)
		}
	}
}

// takeInLocked takes in the cache session's events: an invalidation drops
// its name's entry, stales its fills and turns the clients served it into
// a report; a fail-over drops everything. Each event is counted seen
// only once what it asks is done, the keeper told of the report first
// (so no lease it gates slips through). It reports whether everything
// was dropped. rc.mu is held.
func (rc *readCache) takeInLocked(events []wire.Event) (dropped bool) {
	for _, ev := range events {
		if ev.Seq <= rc.seen.Load() {
			continue
		}
		switch ev.Kind {
		case wire.EventInvalidate:
			rc.invalidations++
			rc.m.cacheReads.WithLabelValues("invalidated").Inc()
			rc.dropEntryLocked(ev.Path)
			for _, t := range rc.fills[ev.Path] {
				t.stale = true
			}
			if set := rc.served[ev.Path]; len(set) > 0 {
				ids := make([]uint64, 0, len(set))
				for id, p := range set {
					ids = append(ids, id)
					if rc.servedBy[id]--; rc.servedBy[id] <= 0 {
						delete(rc.servedBy, id)
					}
					if rc.servedByP[p]--; rc.servedByP[p] <= 0 {
						delete(rc.servedByP, p)
					}
				}
				delete(rc.served, ev.Path)
				rc.servedN -= len(ids)
				for len(ids) > 0 {
					n := min(len(ids), wire.MaxServedSessions)
					rc.reports = append(rc.reports, servedReport{seq: ev.Seq, name: ev.Path, sessions: ids[:n:n]})
					rc.k.reporting(ids[:n:n])
					ids = ids[n:]
				}
			}
		case wire.EventMasterFailover:
			rc.resetLocked()
			dropped = true
		}
		rc.seen.Store(ev.Seq)
	}
	return dropped
}

// report returns what the next cache-session batch carries: the reports
// that fit one request, and the acknowledgement that goes with them (no
// further than the first report left out).
func (rc *readCache) report() (ack uint64, served []wire.ServedName, n int, gen uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	total := 0
	for _, r := range rc.reports {
		if total+len(r.sessions) > wire.MaxServedSessions {
			break
		}
		total += len(r.sessions)
		served = append(served, wire.ServedName{Name: r.name, Sessions: r.sessions})
		n++
	}
	ack = rc.seen.Load()
	if n < len(rc.reports) {
		ack = rc.reports[n].seq - 1
	}
	return ack, served, n, rc.gen
}

// lost ends the cache session cache (it expired, or the master refused a
// batch naming it): everything is dropped, and the loop starts another.
func (rc *readCache) lost(cache uint64) {
	rc.mu.Lock()
	if rc.session != cache || cache == 0 {
		rc.mu.Unlock()
		return
	}
	rc.log.Info("proxy: the read cache's session ended; the cache starts afresh with a new one", "session", cache)
	rc.session, rc.leaseEnd = 0, time.Time{}
	rc.sessionID.Store(0)
	rc.instance.Store(0)
	rc.seen.Store(0)
	rc.resetLocked()
	rc.mu.Unlock()
	rc.k.dropServed()
}

// run keeps the cache session until the proxy closes: it makes one when
// there is none, and sends its KeepAlive in a batch of its own, with the
// acknowledgement of its events and the reports that go with it. The
// events come only in that batch's answers, so a report made of them
// goes in the very next batch.
func (rc *readCache) run() {
	sweep := time.NewTicker(sweepHandlesEvery)
	defer sweep.Stop()
	for rc.ctx.Err() == nil {
		select {
		case <-sweep.C:
			rc.sweepHandles()
		default:
		}
		if rc.sessionID.Load() == 0 {
			if err := rc.create(); err != nil {
				if rc.ctx.Err() == nil {
					rc.log.Debug("proxy: no read cache session yet", "err", err)
				}
				rc.pause(time.Second)
			}
			continue
		}
		rc.keepOnce()
	}
}

// pause waits d, or less if the proxy closes.
func (rc *readCache) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rc.ctx.Done():
	case <-t.C:
	}
}

// create makes a cache session.
func (rc *readCache) create() error {
	ctx, cancel := context.WithTimeout(rc.ctx, 5*time.Second)
	defer cancel()
	host, _ := os.Hostname()
	var resp wire.CreateSessionResponse
	err := rc.up.callDecoded(ctx, &wire.Header{Method: wire.MethodCreateSession},
		&wire.CreateSessionRequest{ClientName: "lockcelld proxy read cache", Host: host, PID: int64(os.Getpid()), Program: "lockcelld"}, &resp)
	if err != nil {
		return err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.resetLocked()
	rc.session, rc.epoch, rc.leaseEnd = resp.Session, resp.Epoch, time.Time{}
	rc.seen.Store(0)
	rc.instance.Store(rand.Uint64() | 1)
	rc.sessionID.Store(resp.Session)
	rc.log.Info("proxy: read cache session made", "session", resp.Session)
	return nil
}

// keepOnce sends one batch with the cache session's KeepAlive and takes
// its answer in.
func (rc *readCache) keepOnce() {
	ack, served, n, gen := rc.report()
	rc.mu.Lock()
	cache, epoch, ttl, leaseEnd := rc.session, rc.epoch, rc.ttl, rc.leaseEnd
	rc.mu.Unlock()
	if cache == 0 {
		return
	}
	sent := time.Now()
	due := dueBy(leaseEnd, sent, ttl) // as a client batch's (batchDue)
	hold := max(min(ttl/2, due.Sub(sent)-ttl/8), time.Millisecond)
	req := &wire.BatchKeepAliveRequest{
		// A report is answered at once, so the clients it names get
		// their held leases; so is a new session's first KeepAlive, so
		// the cache serves as soon as it can.
		Entries: []wire.BatchKeepAliveEntry{{Session: cache, Epoch: epoch, AckEvent: ack, Prompt: len(served) > 0 || leaseEnd.IsZero(),
			Principal: rc.principal}},
		HoldMillis: hold.Milliseconds(), CacheSession: cache, Served: served}
	var resp wire.BatchKeepAliveResponse
	ctx, cancel := context.WithDeadline(rc.ctx, due)
	err := rc.up.callDecoded(ctx, &wire.Header{Method: wire.MethodBatchKeepAlive}, req, &resp)
	cancel()
	if err == nil && len(resp.Results) != 1 {
		err = wire.Errorf(wire.CodeUnavailable, "a batch of one answered with %d results", len(resp.Results))
	}
	if err == nil {
		switch r := resp.Results[0]; r.Code {
		case wire.CodeOK:
		case wire.CodeNotMaster, wire.CodeUnavailable, wire.CodeCanceled, wire.CodeTooMany:
			err = &wire.Error{Code: r.Code, Msg: r.Msg}
		default:
			rc.lost(cache) // expired, closed, moved: a new one
			return
		}
	}
	if err != nil {
		rc.log.Debug("proxy: the read cache session's KeepAlive failed", "session", cache, "err", err)
		if isCacheSessionGone(err) {
			rc.lost(cache)
			return
		}
		rc.pause(50*time.Millisecond + rand.N(100*time.Millisecond))
		return
	}
	rc.taken(cache, &resp, sent, n, gen)
}

// taken takes in a cache-session batch's answer: its events first, then
// the reports it carried (accepted), then its lease.
func (rc *readCache) taken(cache uint64, resp *wire.BatchKeepAliveResponse, sent time.Time, n int, gen uint64) {
	r := &resp.Results[0]
	end := wire.TrustedLeaseEnd(sent, time.Duration(r.HeldMillis+r.LeaseMillis)*time.Millisecond)
	now := time.Now()
	var accepted []servedReport
	rc.mu.Lock()
	if rc.session != cache {
		rc.mu.Unlock()
		return
	}
	dropped := rc.takeInLocked(r.Events)
	if !dropped && gen == rc.gen && n <= len(rc.reports) {
		accepted = slices.Clone(rc.reports[:n])
		rc.reports = slices.Delete(rc.reports, 0, n)
	}
	rc.epoch = resp.Epoch
	if resp.TTLMillis > 0 {
		rc.ttl = time.Duration(resp.TTLMillis) * time.Millisecond
	}
	if end.After(rc.leaseEnd) {
		rc.leaseEnd = end
	}
	for _, p := range resp.NoCache {
		rc.noCache[p] = now.Add(time.Duration(resp.NoCacheMillis) * time.Millisecond)
	}
	for _, a := range accepted {
		rc.reported += uint64(len(a.sessions))
		rc.m.cacheReads.WithLabelValues("reported").Add(float64(len(a.sessions)))
	}
	rc.mu.Unlock()
	for _, a := range accepted {
		rc.k.reported(a.sessions)
	}
	if dropped {
		rc.k.dropServed()
	}
	rc.k.cacheProgress()
}

// CacheStats are a proxy's read-cache figures: the entries and their
// bytes now; reads answered from the cache (Hits), answers stored
// (Fills), names the master invalidated, clients reported with their
// invalidation and accepted; the cache session (0: none now).
type CacheStats struct {
	Entries                              int
	Bytes                                int64
	Hits, Fills, Invalidations, Reported uint64
	Session                              uint64
	// Serving: the cache session holds a lease; the cache may answer.
	Serving bool
}

func (rc *readCache) stats() CacheStats {
	if rc == nil {
		return CacheStats{}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return CacheStats{Entries: len(rc.entries), Bytes: rc.bytes, Hits: rc.hits, Fills: rc.filled, Invalidations: rc.invalidations,
		Reported: rc.reported, Session: rc.session, Serving: rc.usableLocked(time.Now())}
}

// ownPrincipal is the principal the proxy calls the master as: its
// upstream certificate's name, or Anonymous without TLS.
func ownPrincipal(up *tls.Config) string {
	if up == nil || len(up.Certificates) == 0 || len(up.Certificates[0].Certificate) == 0 {
		return Anonymous
	}
	leaf := up.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(up.Certificates[0].Certificate[0]); err != nil {
			return Anonymous
		}
	}
	return leaf.Subject.CommonName
}
