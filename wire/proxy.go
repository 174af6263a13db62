package wire

// Proxies (docs/subsystems.md#proxies). A proxy speaks this wire to its
// clients exactly as a replica does and forwards their calls to the
// master under its own principal, naming on each the principal it speaks
// for (Header.OnBehalfOf). The master admits such a call only from a
// principal it trusts as a proxy. The proxy answers its clients'
// KeepAlives itself and keeps their sessions' leases with one
// BatchKeepAlive for many sessions at a time.

// MethodBatchKeepAlive carries the KeepAlives of many sessions in one
// call, each as the master serves a KeepAlive (the same lease rules, one
// session at a time). The call is held until any of its sessions has an
// event to deliver, a quarter of any one's lease is left, or
// BatchKeepAliveRequest.HoldMillis has passed, whichever is first; every
// session is then answered together. Only a principal the cell trusts as
// a proxy may send it. Session-less in its header; not mutating.
const MethodBatchKeepAlive Method = 36

func init() {
	methodNames[MethodBatchKeepAlive] = "BatchKeepAlive"
}

// MaxBatchKeepAlive caps the sessions of one BatchKeepAlive.
const MaxBatchKeepAlive = 1024

// MaxBatchEventBytes bounds the events of all sessions of one
// BatchKeepAlive reply, well inside a frame: each session's events are
// cut to its share (and at least one event), and a session whose events
// would still overflow the reply is answered CodeUnavailable with no
// lease (its events come again on its next KeepAlive, as after a lost
// reply).
const MaxBatchEventBytes = 768 << 10

// BatchKeepAliveEntry is one session's KeepAlive within a batch: what its
// own KeepAlive's header and request would have carried, and the
// principal the proxy learnt from the client's certificate.
type BatchKeepAliveEntry struct {
	Session     uint64 `msgpack:"s"`
	Incarnation uint64 `msgpack:"in,omitempty"`
	// Epoch is the master epoch the session's client last heard of (its
	// KeepAlive header's), so the master can queue the fail-over event.
	Epoch     uint64 `msgpack:"e,omitempty"`
	AckEvent  uint64 `msgpack:"a,omitempty"`
	Prompt    bool   `msgpack:"p,omitempty"`
	Principal string `msgpack:"pr"`
	// SilentMillis is how long before the batch was sent the proxy last
	// heard from the session's client (its latest KeepAlive, or its
	// CreateSession, arrived). The master extends the session's lease
	// no further than that moment plus seven quarters of a lease: what a
	// KeepAlive the client sent then could have earned talking to the
	// master directly (held up to three quarters, then a lease). A
	// client that falls silent behind a proxy (paused, cut off) thus
	// loses its session as soon as it would without one, though the
	// proxy's batches go on carrying it for a while.
	SilentMillis int64 `msgpack:"q,omitempty"`
}

// BatchKeepAliveRequest is a BatchKeepAlive's body. HoldMillis, when not
// zero, is the longest the master may hold it (a proxy keeps the leases
// it relays fresher than a quarter lease).
type BatchKeepAliveRequest struct {
	Entries    []BatchKeepAliveEntry `msgpack:"v"`
	HoldMillis int64                 `msgpack:"h,omitempty"`
	// CacheSession, from a proxy that caches reads, names its cache
	// session (a session of the proxy's own principal). Every batch of
	// such a proxy names it: the leases the batch relays are then what
	// that session's invalidations wait out when the proxy does not
	// acknowledge them (the proxy handed its cache's entries to those
	// clients), and the reply says how far that session's events go
	// (BatchKeepAliveResponse.CacheSeq).
	CacheSession uint64 `msgpack:"cs,omitempty"`
	// Served, in a batch whose entries include CacheSession, lists for
	// each name the proxy's cache session was told to invalidate the
	// sessions the proxy's cache had served that name as cacheable.
	// The master invalidates the name to each of them as to its own
	// cachers (a write in flight waits for them) before it takes the
	// cache session's acknowledgement.
	Served []ServedName `msgpack:"sv,omitempty"`
}

// ServedName is one name a proxy's cache served as cacheable to
// Sessions, since the master registered the proxy's cache for it.
type ServedName struct {
	Name     string   `msgpack:"n"`
	Sessions []uint64 `msgpack:"s"`
}

// CacheSessionGoneMsg opens the message of a BatchKeepAlive refused
// because its CacheSession has ended: the proxy drops its cache and
// starts another cache session before it sends the batch again.
const CacheSessionGoneMsg = "cache session gone"

// MaxServedSessions bounds the session ids of one request's Served, all
// names together: a proxy with more to report sends them over several
// batches, acknowledging its cache session's events only up to what it
// has reported.
const MaxServedSessions = 16384

// BatchKeepAliveResult is one session's answer: Code and Msg as a
// KeepAlive's Status would carry them, and when Code is CodeOK the
// KeepAlive's reply (held, lease, events) exactly as the master would
// have answered the session's own KeepAlive sent when the batch was.
type BatchKeepAliveResult struct {
	Session     uint64  `msgpack:"s"`
	Code        Code    `msgpack:"c,omitempty"`
	Msg         string  `msgpack:"g,omitempty"`
	HeldMillis  int64   `msgpack:"h,omitempty"`
	LeaseMillis int64   `msgpack:"l,omitempty"`
	Events      []Event `msgpack:"v,omitempty"`
}

// BatchKeepAliveResponse answers every entry of the request, in its
// order. Epoch is the master's; TTLMillis the lease it grants now (the
// proxy's measure of a quarter lease).
type BatchKeepAliveResponse struct {
	Epoch     uint64                 `msgpack:"e"`
	TTLMillis int64                  `msgpack:"t"`
	Results   []BatchKeepAliveResult `msgpack:"v"`
	// CacheSeq, when the request named a CacheSession, is the newest
	// event queued for that session and not yet acknowledged, read after
	// every lease of this reply was granted (0: none). A proxy that has
	// not taken in its cache session's events up to it relays none of
	// these leases to a client its cache served until it has: one of
	// those events may be an invalidation it must report first.
	CacheSeq uint64 `msgpack:"cq,omitempty"`
	// NoCache lists the principals among Served's sessions' that may
	// not cache now (barred, see docs/flows.md): the proxy serves them
	// nothing cacheable for NoCacheMillis.
	NoCache       []string `msgpack:"nc,omitempty"`
	NoCacheMillis int64    `msgpack:"nm,omitempty"`
}
