package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"lockcell/cache"
	"lockcell/wire"
)

// Config configures a Client.
type Config struct {
	// Cell is the cell name; names look like /ls/<Cell>/...
	Cell string
	// Replicas are client addresses of the cell's replicas: the seeds.
	// One live member is enough: once Dial has found the master, the
	// client tries the members the master lists instead (Client.ReplicaAddrs),
	// and follows membership changes from then on.
	Replicas []string
	// CellsFile and CellsDomain say where a cell is found by name (a
	// cells file, ParseCellsFile; DNS SRV records under the domain,
	// SRVResolver), asked in that order: by Dial when Replicas is empty,
	// and by Cells for every cell it reaches. NetResolver does the DNS
	// look-ups (nil: net.DefaultResolver).
	CellsFile   string
	CellsDomain string
	NetResolver *net.Resolver
	// ReplicaRefresh is how often the client asks the master for the
	// cell's membership, on top of asking after every fail-over and
	// whenever a replica names a master the client does not know.
	// Default DefaultReplicaRefresh.
	ReplicaRefresh time.Duration
	// ClientName identifies this client to operators (default: none).
	ClientName string
	// Identity is what the session declares about this process (see
	// Identity): each empty field is filled in from ProcessIdentity (the
	// host name, pid and program name), so the zero value declares the
	// process as it is. A field given here is sent as it is, and Dial
	// fails with ErrBadRequest if the cell refuses it. NoIdentity declares
	// nothing at all.
	Identity   Identity
	NoIdentity bool
	// RetryTimeout bounds how long a call keeps looking for a master
	// (fail-over, no quorum) before it fails with ErrNoMaster. Default 30 s.
	RetryTimeout time.Duration
	// CloseTimeout bounds Client.Close and Handle.Close, which wait this
	// long at most for the cell to answer (CloseContext takes the bound
	// from its context instead). Default DefaultCloseTimeout, or
	// RetryTimeout if that is shorter.
	CloseTimeout time.Duration
	// DialTimeout bounds one TCP connect. Default 2 s.
	DialTimeout time.Duration
	// GracePeriod is how long a session in jeopardy keeps hunting for a
	// master before it is declared expired
	// (docs/spec.md#jeopardy-and-grace). Default 45 s.
	GracePeriod time.Duration
	// RenewSession: when the session expires, the Client opens a new
	// session and re-opens its open handles in it. Client.Events tells
	// the program (Expired, then Renewed with the new session id), and
	// each handle's stream how its re-open went (Reopened, or
	// ReopenFailed when its node is gone). No lock survives: every lock
	// context ends at the expiry (ErrLockLost), stays ended, and a handle
	// holds no lock in the new session until Acquire is called again.
	// Calls made during the renewal wait for it (within their ctx and
	// RetryTimeout) and run in the new session; a write that may have
	// taken effect in the old one fails with ErrSessionExpired instead.
	// Without it, Expired is final: every call fails from then on.
	RenewSession bool
	// CacheBytes bounds the cache of contents, stats and listings
	// (default 32 MiB). DisableCache turns the cache off for every handle;
	// WithoutCache turns it off for one.
	CacheBytes   int64
	DisableCache bool
	// ResumeTicket, when set, makes Dial resume the session a
	// SessionTicket of an earlier process names instead of creating one
	// (see Client.ResumedHandles): the caller must authenticate as that
	// session's principal. A ticket that is malformed or of another cell
	// fails Dial with ErrBadRequest; one whose secret or principal does
	// not match, with ErrUnknownSession (whether or not the session
	// exists); one whose session has ended, with ErrSessionExpired,
	// unless ResumeOrCreate is set: then Dial creates a new session
	// (Client.Resumed tells which happened), and the program saves the
	// new SessionTicket.
	ResumeTicket   []byte
	ResumeOrCreate bool
	// Dialer opens the TCP connection to a replica (default net.Dialer).
	// Proxies and fault-injection tests substitute their own.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// ShareConnections lets this Client share its connections with the
	// other Clients of the process that set it and reach the replica the
	// same way (the same TLS configuration, by pointer, and DialTimeout;
	// never with a Dialer of their own, which is then ignored): each
	// session's calls are streams of one connection per replica, so a
	// process can hold many sessions without meeting the replica's
	// per-address cap on connections (--max-conns-per-ip, 64). Without
	// it each Client dials its own. A shared connection is closed with
	// its last Client; one Client that finds it frozen, or whose master
	// stepped down, closes it for all, and the others' calls on it are
	// retried as after any lost connection. Dialling one Client and
	// sharing it among goroutines is cheaper still (one session).
	ShareConnections bool
	// TLS, when set, makes every connection mutual TLS (a cell started
	// with TLS accepts nothing else): it wraps the connection Dialer
	// returns before the protocol byte. It should hold the user's
	// certificate (whose name is the principal the cell sees) and the
	// cell's CA; when its ServerName is empty, each connection checks the
	// replica's certificate against the host of the address it dialled.
	TLS *tls.Config
	// Logger receives the library's logs (default slog.Default()).
	Logger *slog.Logger
	// Clock measures the session lease, jeopardy, the grace period,
	// RetryTimeout and the waits between tries (default the real clock:
	// time.Now and time.AfterFunc). Tests substitute a rate-skewed clock.
	//
	// The library assumes this clock runs no more than 1 % slower than
	// the master's. The master times a lease from when a KeepAlive
	// arrives; the client times it from when it sent the call, on its
	// own clock, and shortens it by 1 % + 20 ms (the drift margin). A
	// lease of L master-seconds then ends locally after at most
	// (0.99 L - 20 ms) / r real seconds on a clock of rate r, which is
	// before the master's end for any r >= 0.99: the client enters
	// jeopardy (disabling its cache: docs/spec.md#jeopardy-and-grace)
	// before the master can expire
	// the session and hand its locks on. A faster clock is safe (the
	// client only gives up early); a clock more than 1 % slow is not:
	// the local lease can outlast the master's, and a cached read or a
	// lock the client still believes it holds may then be stale. Only
	// differences between readings are used, so wall-clock steps change
	// nothing if Now carries a monotonic reading.
	Clock Clock
}

func (c *Config) setDefaults() error {
	if err := wire.ValidCellName(c.Cell); err != nil {
		return err
	}
	if len(c.Replicas) == 0 {
		return errors.New("lockcell: no replica addresses configured")
	}
	if c.RetryTimeout <= 0 {
		c.RetryTimeout = 30 * time.Second
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = min(c.RetryTimeout, DefaultCloseTimeout)
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = 45 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = 32 << 20
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.ReplicaRefresh <= 0 {
		c.ReplicaRefresh = DefaultReplicaRefresh
	}
	return nil
}

// Client is a session with a cell. It is safe for concurrent use.
//
// Names are full (/ls/<cell>/a/b) or, when they do not start with "/",
// relative to the cell root /ls/<cell> on every call that takes one, as
// on the command line (ResolveName). "" is no name (ErrInvalidName: an
// unset variable must not open the root).
//
// Closing is bounded whether the cell is reachable or not: Close waits at
// most Config.CloseTimeout, CloseContext until its context ends, and both
// release the local state (handles, lock contexts, event channels,
// connections) before they return. A handle close that did not reach the
// cell goes on in the background, so a session that lives on does not
// keep its lock.
//
// A held lock tells its holder when to stop: Handle.LockContext ends the
// moment the lock may be lost, and a ReleaseRequested event on
// Handle.Events carries another session's request (Handle.RequestRelease:
// a waiter, or the cell's admin, with a reason). A request is advice; the
// holder decides when to Release.
//
// Events have one home each, and are never dropped silently: a handle's
// (those it asked for WithEvents, its lock's, its renewal's) arrive on
// Handle.Events, never nil and closed with the handle; the session's
// (Jeopardy, Safe, Expired, Renewed, MasterFailover) on Client.Events. A
// reader that falls behind gets an Overflow event telling it to re-read,
// and each handle event carries where it happened. With
// Config.RenewSession a Client outlives its session's expiry: it opens a
// new one and re-opens its handles, but no lock carries over.
//
// MkdirAll creates a directory and its missing parents, and Open
// WithParents does the same for the node it creates; both take an
// existing directory, also one another client creates at the same moment,
// as success.
type Client struct {
	// Its state is split by concern, each part behind its own lock: route
	// (route.go: the known master, the address set, the connections),
	// sess (session.go: id, epoch, lifecycle and lease), ids (ids.go:
	// request ids) and pool (handlepool.go: idle handles). Only route's
	// lock is ever held while another is taken (the address set's, then
	// nothing else); the pool's lock is held across the cache's, which is
	// a leaf. No lock is held across a call or a dial.

	cfg   Config
	log   *slog.Logger
	clock Clock // cfg.Clock: every lease, jeopardy, grace and retry timing

	route *routing
	sess  *sessionState
	ids   requestIDs
	pool  handlePool
	locks lockTable  // handles granted a lock, by name (lockctx.go)
	adopt adoption   // handles of a resumed session not yet taken back (resume.go)
	stale staleIndex // the floor of follower reads (followerread.go)

	// cache holds what reads returned, kept fresh by invalidations on
	// KeepAlive replies; nil with Config.DisableCache.
	cache *cache.Cache[cached]
	// proxied tracks the entries a proxy's read cache served (proxied.go).
	proxied proxiedEntries

	events    chan Event
	streams   handleStreams // each handle's own events (events.go)
	eventsMu  sync.Mutex
	eventsOff bool
	stop      chan struct{}
	base      context.Context // cancelled by Close; parent of background calls
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	// addrs are the replicas tried when no master is known (route tries
	// them); refresh asks addrLoop to bring them up to date with the
	// cell's membership.
	addrs   *addrSet
	refresh chan struct{}
}

// Dial connects to the cell, finds its master and creates a session. The
// session is kept alive in the background until Close. Finding the master
// is retried for up to Config.RetryTimeout (ErrNoMaster after that), except
// when every configured replica refuses the connection: then Dial fails
// at once with ErrAllRefused; and when the master (or every replica)
// refuses it over a cap on connections: then Dial fails at once with
// ErrTooManyConnections, naming the cap. With no Replicas but a cells
// file or an SRV domain (Config.CellsFile, CellsDomain) it looks the cell
// up there first; a cell found nowhere fails with an *UnknownCellError.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := wire.ValidCellName(cfg.Cell); err != nil {
		return nil, err
	}
	if err := cfg.resolveSeeds(ctx); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	sess := newSessionState(cfg.Clock, time.Time{}, 0)
	sess.renew = cfg.RenewSession
	c := &Client{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, sess: sess,
		events: make(chan Event, SessionEventBuffer+1), stop: make(chan struct{}), addrs: newAddrSet(cfg.Replicas), refresh: make(chan struct{}, 1)}
	c.route = newRouting(&c.cfg, c.addrs)
	c.base, c.cancel = context.WithCancel(context.Background())
	if !cfg.DisableCache {
		c.cache = cache.New(cache.Config{MaxBytes: cfg.CacheBytes}, cachedSize)
	}
	var resp wire.CreateSessionResponse
	c.route.watchRefusals(true)
	resumed, err := c.resumeFromConfig(ctx)
	var sent time.Time
	if err == nil && !resumed {
		sent, err = c.roundTrip(ctx, callSpec{method: wire.MethodCreateSession, budget: cfg.RetryTimeout,
			req: identityRequest(cfg.ClientName, declaredIdentity(&cfg)), resp: &resp})
	}
	c.route.watchRefusals(false)
	if err != nil {
		c.cancel()
		c.route.close()
		return nil, opErr("dial", "", err)
	}
	if !resumed {
		c.sess.start(resp.Session, resp.Epoch, sent.Add(time.Duration(resp.LeaseMillis)*time.Millisecond), resp.LeaseMillis)
		c.sess.setSecret(resp.ResumeSecret)
	}

	c.wg.Add(1)
	go c.keepAliveLoop()
	c.learnAddrs(ctx)
	return c, nil
}

// Session returns the session id: with Config.RenewSession, the current
// session's (a new one after each Renewed event).
func (c *Client) Session() uint64 {
	id, _ := c.sess.identity()
	return id
}

// Cell returns the cell name.
func (c *Client) Cell() string { return c.cfg.Cell }

// Close is CloseContext bounded by Config.CloseTimeout (default 5 s):
// it never blocks longer, even while the cell is unreachable.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext ends the session cleanly (its locks are released at once,
// without lock-delay, and its ephemeral nodes deleted) and closes the
// connections. It waits for the cell's answer until ctx ends (and for no
// longer than Config.RetryTimeout); whatever the answer, the client's
// local state is released before it returns: every handle and call fails
// with ErrClosed, every lock context has ended, Events is closed, the
// background goroutines have stopped and the connections are closed. When
// ctx ends first it returns ctx's error (wrapped): the cell then ends the
// session when its lease runs out, and releases its locks after their
// lock-delay, as for a process that died. Calling it again returns nil.
func (c *Client) CloseContext(ctx context.Context) error {
	closed, expired := c.sess.beginClose()
	if closed {
		return nil
	}
	var err error
	if !expired {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.RetryTimeout)
		_, err = c.roundTrip(cctx, callSpec{method: wire.MethodCloseSession, req: &wire.CloseSessionRequest{}, resp: &wire.Empty{},
			budget: c.cfg.RetryTimeout})
		cancel()
		switch {
		case errors.Is(err, ErrSessionExpired):
			err = nil
		case err != nil && ctx.Err() != nil:
			err = fmt.Errorf("%w (the cell ends the session when its lease runs out)", ctx.Err())
		}
	}
	c.sess.finishClose()
	close(c.stop)
	c.cancel()
	c.wg.Wait()
	c.route.close()
	c.eventsMu.Lock()
	c.eventsOff = true
	close(c.events)
	c.eventsMu.Unlock()
	return opErr("close session", "", err)
}

// call runs one call against the master, following redirects and retrying
// across a master change until it gets an answer or RetryTimeout passes.
// Mutating calls carry one request id for all their tries, so the cell
// applies them at most once.
func (c *Client) call(ctx context.Context, m wire.Method, mutating bool, req, resp any) error {
	var seq uint64
	if mutating {
		seq = c.ids.begin()
		defer c.ids.end(seq)
	}
	return c.callSeq(ctx, m, seq, req, resp)
}

// callSeq is call under the request id seq (0: not mutating), which the
// caller allocated and ends. With Config.RenewSession it follows the
// session into its renewal (callAt).
func (c *Client) callSeq(ctx context.Context, m wire.Method, seq uint64, req, resp any) error {
	_, err := c.callAt(ctx, m, seq, req, resp, nil)
	return err
}

// noteEpoch adopts a new master epoch; the application hears of the
// fail-over.
func (c *Client) noteEpoch(epoch uint64) {
	changed, old := c.sess.adoptEpoch(epoch)
	if changed {
		// A new master knows nothing of what we cached: invalidations
		// may have been lost with the old one (docs/spec.md#caching,
		// #fail-over).
		c.purgeCache()
	}
	if changed && old != 0 {
		c.emit(Event{Kind: MasterFailover, Epoch: epoch})
		c.refreshAddrs() // the new master may serve another membership
	}
}

func (c *Client) purgeCache() {
	if c.cache != nil {
		c.cache.Purge()
		c.dropPooled("")
	}
	c.proxied.purged()
}

// cacheStats reports the client cache's hits, misses, invalidations,
// evictions and size (all zero with Config.DisableCache).
func (c *Client) cacheStats() cache.Stats {
	if c.cache == nil {
		return cache.Stats{}
	}
	return c.cache.Stats()
}

// markExpired ends the session id (a late answer about an earlier
// session changes nothing): every lock context ends with ErrLockLost
// before the application hears Expired, each handle that held a lock
// hears LockLost, and the idle handles are forgotten (they died with the
// session).
func (c *Client) markExpired(id uint64) {
	cause := fmt.Errorf("%w (%w)", ErrLockLost, c.sess.endedErr()) // ErrSessionMoved when another process resumed it
	was, closing := c.sess.expire(id, cause)
	if was {
		return
	}
	if c.cache != nil {
		c.cache.Disable()
	}
	c.pool.drop("")
	c.locks.loseAll(cause, c.clock.Now())
	// A session ended by Close is not an expiry, though the master answers
	// the KeepAlive parked there as one: the application asked for it.
	if !closing {
		c.emit(Event{Kind: Expired})
	}
}
