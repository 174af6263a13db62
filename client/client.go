// Package client is the library Go programs link to use a lockcell cell:
// a Client holds one session with the cell's master (discovered from the
// replica list and followed across fail-overs), and Handles behave like
// os.File for the cell's files and directories, which double as
// reader/writer locks.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"lockcell/cache"
	"lockcell/cell/wire"
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
	// ReplicaRefresh is how often the client asks the master for the
	// cell's membership, on top of asking after every fail-over and
	// whenever a replica names a master the client does not know.
	// Default DefaultReplicaRefresh.
	ReplicaRefresh time.Duration
	// ClientName identifies this client to operators (default: none).
	ClientName string
	// RetryTimeout bounds how long a call keeps looking for a master
	// (fail-over, no quorum) before it fails with ErrNoMaster. Default 30 s.
	RetryTimeout time.Duration
	// DialTimeout bounds one TCP connect. Default 2 s.
	DialTimeout time.Duration
	// GracePeriod is how long a session in jeopardy keeps hunting for a
	// master before it is declared expired (SPEC 4). Default 45 s.
	GracePeriod time.Duration
	// CacheBytes bounds the cache of contents, stats and listings
	// (default 32 MiB). DisableCache turns the cache off for every handle;
	// WithoutCache turns it off for one.
	CacheBytes   int64
	DisableCache bool
	// Dialer opens the TCP connection to a replica (default net.Dialer).
	// Proxies and fault-injection tests substitute their own.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
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
	// RetryTimeout and the waits between tries (default RealClock).
	// Tests substitute a rate-skewed clock.
	//
	// The library assumes this clock runs no more than 1 % slower than
	// the master's. The master times a lease from when a KeepAlive
	// arrives; the client times it from when it sent the call, on its
	// own clock, and shortens it by 1 % + 20 ms (the drift margin). A
	// lease of L master-seconds then ends locally after at most
	// (0.99 L - 20 ms) / r real seconds on a clock of rate r, which is
	// before the master's end for any r >= 0.99: the client enters
	// jeopardy (disabling its cache, SPEC 4) before the master can expire
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
		c.Clock = RealClock{}
	}
	if c.ReplicaRefresh <= 0 {
		c.ReplicaRefresh = DefaultReplicaRefresh
	}
	return nil
}

// Client is a session with a cell. It is safe for concurrent use.
type Client struct {
	cfg   Config
	log   *slog.Logger
	clock Clock // cfg.Clock: every lease, jeopardy, grace and retry timing

	mu       sync.Mutex
	conns    map[string]*conn
	master   string // address of the replica believed to be master
	epoch    uint64
	session  uint64
	seq      uint64
	inflight map[uint64]struct{}
	expired  bool
	closed   bool
	closing  bool // Close has begun: the session's end is the application's doing
	// refused, while Dial runs (nil after), holds the replicas that
	// refused the connection since any replica last did anything else:
	// when it covers them all, Dial fails with ErrAllRefused.
	refused map[string]bool

	// cache holds what reads returned, kept fresh by invalidations on
	// KeepAlive replies; nil with Config.DisableCache.
	cache *cache.Cache[cached]
	// pool holds idle open handles for reuse (handlepool.go); guarded by mu.
	pool   map[poolKey][]pooledHandle
	pooled int

	events    chan Event
	eventsMu  sync.Mutex
	eventsOff bool
	sess      *sessionState
	stop      chan struct{}
	base      context.Context // cancelled by Close; parent of background calls
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	// addrs are the replicas tried when no master is known; refresh asks
	// addrLoop to bring them up to date with the cell's membership.
	addrs   *addrSet
	refresh chan struct{}
}

// Dial connects to the cell, finds its master and creates a session. The
// session is kept alive in the background until Close. Finding the master
// is retried for up to Config.RetryTimeout (ErrNoMaster after that), except
// when every configured replica refuses the connection: then Dial fails
// at once with ErrAllRefused.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, conns: map[string]*conn{}, inflight: map[uint64]struct{}{},
		events: make(chan Event, 256), stop: make(chan struct{}), addrs: newAddrSet(cfg.Replicas), refresh: make(chan struct{}, 1)}
	c.base, c.cancel = context.WithCancel(context.Background())
	if !cfg.DisableCache {
		c.cache = cache.New(cache.Config{MaxBytes: cfg.CacheBytes}, cachedSize)
	}
	var resp wire.CreateSessionResponse
	sent := c.clock.Now()
	c.refused = map[string]bool{}
	err := c.call(ctx, wire.MethodCreateSession, false, &wire.CreateSessionRequest{ClientName: cfg.ClientName}, &resp)
	c.mu.Lock()
	c.refused = nil
	c.mu.Unlock()
	if err != nil {
		c.cancel()
		c.closeConns()
		return nil, opErr("dial", "", err)
	}
	c.mu.Lock()
	c.session, c.epoch = resp.Session, resp.Epoch
	c.mu.Unlock()
	c.sess = newSessionState(c.clock, sent.Add(time.Duration(resp.LeaseMillis)*time.Millisecond), resp.LeaseMillis)
	c.wg.Add(1)
	go c.keepAliveLoop()
	c.learnAddrs(ctx)
	return c, nil
}

// Session returns the session id.
func (c *Client) Session() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// Cell returns the cell name.
func (c *Client) Cell() string { return c.cfg.Cell }

// Master returns the address of the replica the client believes is master.
func (c *Client) Master() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.master
}

// Close ends the session cleanly (its locks are released at once, without
// lock-delay, and its ephemeral nodes deleted) and closes the connections.
// Handles fail with ErrClosed afterwards.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	expired := c.expired
	c.closing = true
	c.mu.Unlock()
	var err error
	if !expired {
		ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.RetryTimeout, 5*time.Second))
		err = c.call(ctx, wire.MethodCloseSession, false, &wire.CloseSessionRequest{}, &wire.Empty{})
		cancel()
		if errors.Is(err, ErrSessionExpired) {
			err = nil
		}
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.cancel()
	c.wg.Wait()
	c.closeConns()
	c.eventsMu.Lock()
	c.eventsOff = true
	close(c.events)
	c.eventsMu.Unlock()
	return opErr("close session", "", err)
}

func (c *Client) closeConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cn := range c.conns {
		cn.close()
		delete(c.conns, a)
	}
}

// beginSeq allocates the request id of a mutating call.
func (c *Client) beginSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.inflight[c.seq] = struct{}{}
	return c.seq
}

func (c *Client) endSeq(q uint64) {
	c.mu.Lock()
	delete(c.inflight, q)
	c.mu.Unlock()
}

// ackLocked is the highest request id at or below which every call has
// completed: the cell may forget their de-duplication entries.
func (c *Client) ackLocked() uint64 {
	ack := c.seq
	for q := range c.inflight {
		ack = min(ack, q-1)
	}
	return ack
}

// call runs one call against the master, following redirects and retrying
// across a master change until it gets an answer or RetryTimeout passes.
// Mutating calls carry one request id for all their tries, so the cell
// applies them at most once.
func (c *Client) call(ctx context.Context, m wire.Method, mutating bool, req, resp any) error {
	var seq uint64
	if mutating {
		seq = c.beginSeq()
		defer c.endSeq(seq)
	}
	return c.callSeq(ctx, m, seq, req, resp)
}

func (c *Client) callSeq(ctx context.Context, m wire.Method, seq uint64, req, resp any) error {
	deadline := c.clock.Now().Add(c.cfg.RetryTimeout)
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		if err := c.usable(m); err != nil {
			return err
		}
		retryNow := false
		cn, err := c.masterConn(ctx)
		if errors.Is(err, ErrCertificateRefused) || errors.Is(err, ErrAllRefused) {
			return err
		}
		if err == nil {
			c.mu.Lock()
			h := wire.Header{Method: m, Session: c.session, Epoch: c.epoch, Seq: seq, Ack: c.ackLocked()}
			c.mu.Unlock()
			if sessionless(m) {
				h.Session = 0
			}
			var st wire.Status
			st, err = cn.call(ctx, &h, req, resp)
			if err == nil {
				switch st.Code {
				case wire.CodeOK:
					return nil
				case wire.CodeNotMaster:
					retryNow = c.redirect(cn.addr, st.Leader)
				case wire.CodeBadEpoch:
					c.noteEpoch(st.Epoch)
					retryNow = true
				case wire.CodeUnavailable:
				case wire.CodeSessionExpired:
					if m != wire.MethodCloseSession {
						c.markExpired()
					}
					return st.Err()
				default:
					return st.Err()
				}
				err = st.Err()
			} else if ctx.Err() != nil {
				return ctx.Err()
			} else if !errors.Is(err, errTransport) {
				return err
			} else {
				c.dropConn(cn)
			}
		}
		lastErr = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c.clock.Now().After(deadline) {
			// Calls are bounded by RetryTimeout even in jeopardy: the
			// caller hears "no master" and may retry; the session itself
			// keeps hunting until the grace period ends.
			return fmt.Errorf("%w: %s: last error: %v", ErrNoMaster, m, lastErr)
		}
		if retryNow {
			continue
		}
		if err := c.sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

func (c *Client) usable(m wire.Method) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.expired:
		return wire.Errorf(wire.CodeSessionExpired, "session %d has expired", c.session)
	}
	return nil
}

// masterConn returns a connection to the believed master, or to the next
// replica in rotation when no master is known.
func (c *Client) masterConn(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	addr := c.master
	if addr == "" {
		addr = c.addrs.pick()
		c.master = addr
	}
	if cn := c.conns[addr]; cn != nil && cn.alive() {
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	cn, err := dial(ctx, dialOptsOf(&c.cfg), addr, c.cfg.DialTimeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.master == addr {
			c.master = ""
		}
		if errors.Is(err, ErrCertificateRefused) {
			return nil, err // every replica would say the same: no retry
		}
		if c.refused != nil {
			if !refusedConn(err) {
				clear(c.refused)
			} else if c.refused[addr] = true; c.allRefusedLocked() {
				return nil, fmt.Errorf("%w: %s", ErrAllRefused, strings.Join(c.addrs.list(), ", "))
			}
		}
		return nil, fmt.Errorf("%w: dial %s: %v", errTransport, addr, err)
	}
	clear(c.refused) // someone listens
	if c.closed {
		cn.close()
		return nil, ErrClosed
	}
	if old := c.conns[addr]; old != nil && old.alive() {
		cn.close()
		return old, nil
	}
	c.conns[addr] = cn
	return cn, nil
}

// allRefusedLocked reports whether every replica the client knows is in
// c.refused.
func (c *Client) allRefusedLocked() bool {
	for _, a := range c.addrs.list() {
		if !c.refused[a] {
			return false
		}
	}
	return true
}

// redirect follows a NotMaster answer. It reports whether to retry at once
// (a new master is named) rather than back off (no master is known).
func (c *Client) redirect(from, leader string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if leader != "" && leader != from {
		c.master = leader
		if c.addrs.add(leader) {
			// A master we did not know of: the membership changed.
			c.refreshAddrs()
		}
		return true
	}
	if c.master == from {
		c.master = ""
	}
	return false
}

func (c *Client) dropConn(cn *conn) {
	cn.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns[cn.addr] == cn {
		delete(c.conns, cn.addr)
	}
	if c.master == cn.addr {
		c.master = ""
	}
}

// dropMaster closes the connection to the replica believed to be master
// and forgets it, so the next call searches the cell again.
func (c *Client) dropMaster() {
	c.mu.Lock()
	cn := c.conns[c.master]
	c.mu.Unlock()
	if cn != nil {
		c.dropConn(cn)
		return
	}
	c.mu.Lock()
	c.master = ""
	c.mu.Unlock()
}

// noteEpoch adopts a new master epoch; the application hears of the
// fail-over.
func (c *Client) noteEpoch(epoch uint64) {
	c.mu.Lock()
	changed := epoch != 0 && epoch != c.epoch
	old := c.epoch
	if changed {
		c.epoch = epoch
	}
	c.mu.Unlock()
	if changed {
		// A new master knows nothing of what we cached: invalidations
		// may have been lost with the old one (SPEC 6, 7).
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
}

// CacheStats reports the client cache's hits, misses, invalidations,
// evictions and size (all zero with Config.DisableCache).
func (c *Client) CacheStats() cache.Stats {
	if c.cache == nil {
		return cache.Stats{}
	}
	return c.cache.Stats()
}

func (c *Client) markExpired() {
	c.mu.Lock()
	was, closing := c.expired, c.closing
	c.expired = true
	c.mu.Unlock()
	if c.cache != nil {
		c.cache.Disable()
	}
	// A session ended by Close is not an expiry, though the master answers
	// the KeepAlive parked there as one: the application asked for it.
	if !was && !closing {
		c.emit(Event{Kind: Expired})
	}
}
