package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"lockcell/wire"
)

// routing is where calls go: the replica believed to be master, the
// address set tried in rotation when none is known, and one connection per
// replica. Its lock is taken before the address set's (the only nesting
// of the client's locks); no method dials or calls out while holding it.
type routing struct {
	opts    *dialOpts
	timeout time.Duration
	addrs   *addrSet
	share   bool // connections are the process's shared ones (Config.ShareConnections)

	mu     sync.Mutex
	conns  map[string]*conn
	master string // address of the replica believed to be master
	// refused, while Dial runs (nil otherwise), holds the replicas that
	// refused the connection since any replica last did anything else:
	// when it covers them all, conn fails with ErrAllRefused.
	refused map[string]bool
	closed  bool
}

func newRouting(cfg *Config, addrs *addrSet) *routing {
	o := dialOptsOf(cfg)
	return &routing{opts: o, timeout: cfg.DialTimeout, addrs: addrs, conns: map[string]*conn{},
		share: cfg.ShareConnections && canShare(o)}
}

// watchRefusals turns the all-refused fast failure on (while Dial runs)
// or off (for good, once Dial returns).
func (r *routing) watchRefusals(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.refused = map[string]bool{}
	} else {
		r.refused = nil
	}
}

// dialing reports whether Dial is running (watchRefusals is on).
func (r *routing) dialing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused != nil
}

// masterAddr returns the address believed to be master ("" if none).
func (r *routing) masterAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.master
}

// masterConnIfOpen returns the believed master and its connection if one
// is open, without dialling.
func (r *routing) masterConnIfOpen() (string, *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cn := r.conns[r.master]
	if cn != nil && !cn.alive() {
		cn = nil
	}
	return r.master, cn
}

// conn returns a connection to the believed master, or to the next
// replica in rotation when no master is known (which then becomes the
// believed master until it says otherwise).
func (r *routing) conn(ctx context.Context) (*conn, error) {
	r.mu.Lock()
	addr := r.master
	if addr == "" {
		addr = r.addrs.pick()
		r.master = addr
	}
	if cn := r.conns[addr]; cn != nil && cn.alive() {
		r.mu.Unlock()
		return cn, nil
	}
	r.mu.Unlock()
	cn, err := r.dialAddr(ctx, addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.master == addr {
			r.master = ""
		}
		if errors.Is(err, ErrCertificateRefused) {
			return nil, err // every replica would say the same: no retry
		}
		if errors.Is(err, ErrTooManyConnections) {
			clear(r.refused) // someone listens
			return nil, err  // roundTrip decides whether to try elsewhere
		}
		if r.refused != nil {
			if !refusedConn(err) {
				clear(r.refused)
			} else if r.refused[addr] = true; r.allRefusedLocked() {
				return nil, fmt.Errorf("%w: %s", ErrAllRefused, strings.Join(r.addrs.list(), ", "))
			}
		}
		return nil, fmt.Errorf("%w: dial %s: %v", errTransport, addr, err)
	}
	clear(r.refused) // someone listens
	return r.adoptLocked(addr, cn)
}

// dialAddr makes a connection to addr: one of the process's shared ones
// with Config.ShareConnections, else the client's own.
func (r *routing) dialAddr(ctx context.Context, addr string) (*conn, error) {
	if r.share {
		return acquireShared(ctx, r.opts, addr, r.timeout)
	}
	return dial(ctx, r.opts, addr, r.timeout)
}

// adoptLocked keeps cn, just dialled, as the connection to addr (r.mu
// held): unless the client closed meanwhile, or another caller's live one
// got there first, which is then kept and cn's reference given back.
func (r *routing) adoptLocked(addr string, cn *conn) (*conn, error) {
	if r.closed {
		cn.release(false)
		return nil, ErrClosed
	}
	if old := r.conns[addr]; old != nil && old.alive() {
		cn.release(false) // a shared one may be old itself: one reference back
		return old, nil
	}
	if old := r.conns[addr]; old != nil {
		old.release(false) // dead: its reference goes back
	}
	r.conns[addr] = cn
	return cn, nil
}

// allRefusedLocked reports whether every replica in the address set is in
// r.refused.
func (r *routing) allRefusedLocked() bool {
	for _, a := range r.addrs.list() {
		if !r.refused[a] {
			return false
		}
	}
	return true
}

// redirect follows a NotMaster answer from the replica at from. It
// reports whether to retry at once (a new master is named) rather than
// back off (no master is known), and whether the named master is an
// address the set did not hold (the membership changed).
//
// When another master is named, the connection to from is closed: a
// client talks to the master only, and a connection kept to the replica
// it first asked (or to a master that stepped down) would cost that
// replica a yamux session, its keep-alive pings and a slot under the
// per-address connection cap for the client's whole life, for every
// client. A call still on it ends with a transport error and retries,
// with its request id, at the named master (what NotMaster would have
// told it too).
func (r *routing) redirect(from, leader string) (retryNow, unknown bool) {
	r.mu.Lock()
	if leader != "" && leader != from {
		r.master = leader
		unknown = r.addrs.add(leader)
		stale := r.conns[from]
		delete(r.conns, from)
		r.mu.Unlock()
		if stale != nil {
			stale.release(false)
		}
		return true, unknown
	}
	defer r.mu.Unlock()
	if r.master == from {
		r.master = ""
	}
	return false, false
}

// openConns returns the addresses the client holds connections to.
func (r *routing) openConns() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for a, cn := range r.conns {
		if cn.alive() {
			out = append(out, a)
		}
	}
	return out
}

// drop closes cn and forgets it; if it led to the believed master, the
// master is forgotten too.
func (r *routing) drop(cn *conn) {
	r.mu.Lock()
	owned := r.conns[cn.addr] == cn
	if owned {
		delete(r.conns, cn.addr)
	}
	if r.master == cn.addr {
		r.master = ""
	}
	r.mu.Unlock()
	if owned || cn.shared == nil {
		// Closed for every Client sharing it: the calls this one parked
		// there must end. A shared connection another goroutine of this
		// Client dropped already holds none of its references.
		cn.release(true)
	}
}

// dropMaster closes the connection to the believed master and forgets
// it, so the next call searches the cell again.
func (r *routing) dropMaster() {
	r.mu.Lock()
	cn := r.conns[r.master]
	r.master = ""
	if cn != nil && r.conns[cn.addr] == cn {
		delete(r.conns, cn.addr)
	}
	r.mu.Unlock()
	if cn != nil {
		cn.release(true)
	}
}

// close closes every connection; a connection dialled afterwards is
// closed at once and its call fails with ErrClosed.
func (r *routing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for a, cn := range r.conns {
		cn.release(false)
		delete(r.conns, a)
	}
}

// Back-off between tries: decorrelated jitter. Each wait is drawn
// uniformly from [backoffBase, min(cap, 3 x the previous wait)], so waits
// grow about 1.5 times per try on average and clients that lost the same
// master spread their retries instead of arriving together at its
// successor. The cap is backoffFastCap until the call has waited
// backoffFastFor in all, then backoffCap. A master fail-over takes well
// under a second at the default Raft timings, and a client reaches the new
// master only at its next try after it serves: with waits up to 100 ms
// that try comes about 35 ms after, on average, where waits grown toward
// 500 ms left it 100-200 ms after (and a fail-over is two such searches in
// a row: the KeepAlive's, which ends the new master's recovery, then the
// call's). A longer outage (no quorum, a stalled master) is met with the
// slower tries, so a cell coming back is not flooded.
const (
	backoffBase    = 10 * time.Millisecond
	backoffFastCap = 100 * time.Millisecond
	backoffFastFor = time.Second
	backoffCap     = 500 * time.Millisecond
)

// backoff yields the waits between the tries of one call. The zero value
// is ready to use.
type backoff struct {
	prev  time.Duration // the last wait
	slept time.Duration // the sum of the waits so far
}

func (b *backoff) next() time.Duration {
	limit := backoffCap
	if b.slept < backoffFastFor {
		limit = backoffFastCap
	}
	hi := min(limit, 3*max(b.prev, backoffBase))
	b.prev = backoffBase + rand.N(hi-backoffBase+1)
	b.slept += b.prev
	return b.prev
}

// callSpec is one call for roundTrip to carry to the master.
type callSpec struct {
	method    wire.Method
	seq       uint64 // request id of a mutating call, the same on every try; 0 for others
	req, resp any
	// budget bounds the search for a master: once it has passed the call
	// fails with ErrNoMaster. Zero leaves the bound to ctx alone.
	budget time.Duration
	// try bounds one attempt: one that runs out drops that connection and
	// moves on to the next replica at once. Zero: no bound but ctx.
	try time.Duration
	// gen is the session generation the call belongs to (0: any); it is
	// never sent in another (renew.go). renewal: the call opens the
	// session that replaces an expired one.
	gen     uint64
	renewal bool
}

// roundTrip is the client's one routing and retry loop, used by every
// call and by the KeepAlive. It sends s to the believed master, follows a
// NotMaster redirect at once, adopts a new epoch and retries at once,
// and on a transport failure, an Unavailable answer or no known master
// backs off (with jitter) and tries again, until an answer other than
// those, ctx's end, s.budget (ErrNoMaster) or the client's close
// (ErrClosed). A certificate refusal, and during Dial every replica
// refusing the connection (ErrAllRefused), fail at once; so does, during
// Dial, a refusal over a cap on connections (ErrTooManyConnections) by
// the replica named as master or by every replica. After Dial such a
// refusal is retried like a transport failure. It returns when
// the try that got the answer was sent: a lease is measured from there,
// not from the first try of a long search.
func (c *Client) roundTrip(ctx context.Context, s callSpec) (time.Time, error) {
	var deadline time.Time
	if s.budget > 0 {
		deadline = c.clock.Now().Add(s.budget)
	}
	var wait backoff
	var lastErr error
	// named is the master a replica last named in a redirect, and
	// tooMany the replicas that refused the connection over a cap: while
	// Dial runs, a refusal by the named master, or by every replica, ends
	// the call at once (ErrTooManyConnections).
	var named string
	var tooMany map[string]bool
	doubt := false // a try went unanswered: a mutating call may have taken effect
	for {
		if err := c.sess.usableIn(s.gen, s.renewal); err != nil {
			if errors.Is(err, ErrSessionExpired) {
				return time.Time{}, &sessionGone{err: err, doubt: doubt}
			}
			return time.Time{}, err
		}
		retryNow, addr := false, ""
		cn, err := c.route.conn(ctx)
		if errors.Is(err, ErrCertificateRefused) || errors.Is(err, ErrAllRefused) || errors.Is(err, ErrClosed) {
			return time.Time{}, err
		}
		if err == nil {
			addr = cn.addr
			h := c.header(s)
			sent := c.clock.Now()
			tctx, tcancel := ctx, context.CancelFunc(func() {})
			if s.try > 0 {
				tctx, tcancel = c.withDeadline(ctx, sent.Add(s.try))
			}
			var st wire.Status
			st, err = cn.call(tctx, &h, s.req, s.resp)
			tryOver := err != nil && tctx.Err() != nil && ctx.Err() == nil
			tcancel()
			doubt = doubt || err != nil && !errors.Is(err, ErrTooManyConnections)
			switch {
			case tryOver:
				// Frozen or cut off: try the next replica.
				c.route.drop(cn)
				retryNow = true
			case errors.Is(err, ErrTooManyConnections):
				c.route.drop(cn) // refused: the connection is closed
			case err == nil:
				switch st.Code {
				case wire.CodeOK:
					return sent, nil
				case wire.CodeNotMaster:
					if s.method == wire.MethodKeepAlive {
						// The session's master is no longer this replica.
						// Calls still parked on its connection could wait
						// forever (a master whose Raft hangs on a stalled
						// disk never finishes them): closing it ends them
						// with a transport error, and each retries, with
						// its request id, at the master the session finds.
						c.route.drop(cn)
					}
					var unknown bool
					named = st.Leader
					retryNow, unknown = c.route.redirect(cn.addr, st.Leader)
					if unknown {
						c.refreshAddrs() // a master we did not know of: the membership changed
					}
				case wire.CodeBadEpoch:
					c.noteEpoch(st.Epoch)
					retryNow = true
				case wire.CodeUnavailable:
				case wire.CodeSessionExpired:
					err := st.Err()
					// A resume told its session has ended has none yet
					// to mark (Dial may go on to create one).
					if s.method != wire.MethodCloseSession && s.method != wire.MethodResumeSession {
						c.markEnded(h.Session, err)
					}
					return time.Time{}, &sessionGone{err: asMoved(err), doubt: doubt}
				default:
					return time.Time{}, st.Err()
				}
				err = st.Err()
			case ctx.Err() != nil:
				return time.Time{}, ctx.Err()
			case !errors.Is(err, errTransport):
				return time.Time{}, err
			default:
				c.route.drop(cn)
			}
		}
		lastErr = err
		if at, ok := refusedAt(err); ok && c.route.dialing() {
			if tooMany == nil {
				tooMany = map[string]bool{}
			}
			tooMany[at] = true
			if at == named || c.route.addrs.allIn(tooMany) {
				return time.Time{}, err
			}
		}
		if err != nil {
			// Why a call wandered (a redirect, a frozen replica, no
			// master yet) is what an operator needs after a fail-over.
			c.log.Debug("lockcell: try failed", "method", s.method, "replica", addr, "err", err, "retry_now", retryNow)
		}
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if !deadline.IsZero() && c.clock.Now().After(deadline) {
			// Calls are bounded by RetryTimeout even in jeopardy: the
			// caller hears "no master" and may retry; the session itself
			// keeps hunting until the grace period ends.
			if errors.Is(lastErr, ErrTooManyConnections) {
				// The cause, not only its text: the caller can tell a
				// full cap from a cell without quorum.
				return time.Time{}, fmt.Errorf("%w: %s: last error: %w", ErrNoMaster, s.method, lastErr)
			}
			return time.Time{}, fmt.Errorf("%w: %s: last error: %v", ErrNoMaster, s.method, lastErr)
		}
		if retryNow {
			continue
		}
		if err := c.sleep(ctx, wait.next()); err != nil {
			return time.Time{}, err
		}
	}
}

// header is the Header of one try of s: the session and epoch as they
// stand now, and for calls other than KeepAlive the request id and the
// acknowledgement of completed ones.
func (c *Client) header(s callSpec) wire.Header {
	id, epoch, incarnation := c.sess.callIdentity()
	h := wire.Header{Method: s.method, Session: id, Epoch: epoch, Incarnation: incarnation}
	if sessionless(s.method) || s.method == wire.MethodCreateSession {
		h.Session = 0
	}
	if s.method != wire.MethodKeepAlive {
		h.Seq, h.Ack = s.seq, c.ids.ack()
	}
	return h
}
