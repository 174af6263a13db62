package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/vmihailenco/msgpack/v5"

	"lockcell/cell/certs"
	"lockcell/frame"
	"lockcell/wire"
)

// upstream is the proxy's way to the master: one yamux connection to the
// replica believed to lead, found by asking the peers in turn and
// following their NotMaster answers. Its lock is a leaf: no dial or call
// is made holding it.
type upstream struct {
	peers   []string
	tls     *tls.Config
	timeout time.Duration // dial and handshake
	dialer  func(ctx context.Context, network, addr string) (net.Conn, error)

	m *metrics
	// epoch is the highest master epoch an answer carried.
	epoch atomic.Uint64

	mu     sync.Mutex
	master string // the replica believed to lead ("" when none is)
	conn   *upConn
	next   int // the next peer to try when none is believed to lead
	closed bool
	// probed: a probe has finished; probeErr is why the last one found
	// no master serving (nil: it found one).
	probed   bool
	probeErr error
}

// upConn is one connection to a replica.
type upConn struct {
	addr string
	mux  *yamux.Session
	// vouched: the replica answered an empty BatchKeepAlive, so it knows
	// proxies (wire.Header.OnBehalfOf) and trusts this one (vouch).
	vouched atomic.Bool
}

// errNoMaster is every try of a call failing to find a master.
var errNoMaster = errors.New("proxy: no master reachable")

func newUpstream(peers []string, cfg *tls.Config, timeout time.Duration, m *metrics) *upstream {
	return &upstream{peers: peers, tls: cfg, timeout: timeout, m: m}
}

// get returns a connection to the believed master, dialling it (or the
// next peer, when none is believed to lead) if there is none.
func (u *upstream) get(ctx context.Context) (*upConn, error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, net.ErrClosed
	}
	if u.conn != nil && !u.conn.mux.IsClosed() {
		cn := u.conn
		u.mu.Unlock()
		return cn, nil
	}
	addr := u.master
	if addr == "" {
		addr = u.peers[u.next%len(u.peers)]
		u.next++
		u.master = addr
	}
	u.mu.Unlock()
	cn, err := u.dial(ctx, addr)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		if u.master == addr {
			u.master = ""
		}
		return nil, err
	}
	if u.closed || u.master != addr || (u.conn != nil && !u.conn.mux.IsClosed()) {
		// Closed, redirected or raced meanwhile: this one is not needed.
		cn.mux.Close()
		if u.closed {
			return nil, net.ErrClosed
		}
		if u.conn != nil && !u.conn.mux.IsClosed() {
			return u.conn, nil
		}
		return nil, fmt.Errorf("proxy: %s is no longer the master", addr)
	}
	u.conn = cn
	return cn, nil
}

// dial opens a connection to the replica at addr: TCP, TLS when
// configured (its certificate must name the host dialled), the protocol
// byte, then yamux.
func (u *upstream) dial(ctx context.Context, addr string) (*upConn, error) {
	dctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	dial := u.dialer
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if u.tls != nil {
		cfg, err := certs.ForAddr(u.tls, addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		c = tc
	}
	c.SetWriteDeadline(time.Now().Add(u.timeout))
	if _, err := c.Write([]byte{wire.RPCMultiplex}); err != nil {
		c.Close()
		return nil, err
	}
	c.SetWriteDeadline(time.Time{})
	cfg := yamux.DefaultConfig()
	cfg.KeepAliveInterval = 5 * time.Second
	cfg.ConnectionWriteTimeout = 5 * time.Second
	cfg.LogOutput = io.Discard
	mux, err := yamux.Client(frame.NewBatchConn(c), cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &upConn{addr: addr, mux: mux}, nil
}

// drop forgets cn (it failed) and the master with it; the search for
// a master starts at the peer after cn's, so a frozen replica, whose
// kernel still accepts connections, is not the first one asked again.
func (u *upstream) drop(cn *upConn) {
	u.mu.Lock()
	if u.conn == cn {
		u.conn = nil
	}
	if u.master == cn.addr {
		u.master = ""
		if i := slices.Index(u.peers, cn.addr); i >= 0 {
			u.next = i + 1
		}
	}
	u.mu.Unlock()
	cn.mux.Close()
}

// redirect follows a NotMaster from cn's replica naming leader ("" when
// it knows none).
func (u *upstream) redirect(cn *upConn, leader string) {
	u.mu.Lock()
	if u.conn == cn {
		u.conn = nil
	}
	u.master = leader
	if leader == cn.addr {
		u.master = "" // it leads but cannot serve: look elsewhere
	}
	u.mu.Unlock()
	cn.mux.Close()
}

// close ends the connection; calls fail from now on.
func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	cn := u.conn
	u.conn = nil
	u.mu.Unlock()
	if cn != nil {
		cn.mux.Close()
	}
}

// masterAddr is the replica believed to lead, if any.
func (u *upstream) masterAddr() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.master
}

// call sends one call (header and an encoded body) to the master and
// returns its status and encoded reply body. It follows NotMaster
// answers and tries each peer at most about twice; a call sent again
// after a lost connection is safe as the client's own retry would be
// (a mutating call carries its request id). An answer other than
// NotMaster, whatever its code, is returned as is.
func (u *upstream) call(ctx context.Context, h *wire.Header, body []byte) (wire.Status, []byte, error) {
	return u.callWithin(ctx, h, body, false)
}

// callDue is call for a call that a serving master answers before ctx's
// deadline: the keeper's batches, which ask to be held for less. When
// the deadline passes first, the replica waited on is frozen or cut off
// though its connection is open (a stopped process's kernel keeps it
// so, and yamux's pings take seconds to notice), so the connection is
// dropped and the next call searches the peers afresh, as a client
// whose KeepAlive went unanswered for its lease does.
func (u *upstream) callDue(ctx context.Context, h *wire.Header, body []byte) (wire.Status, []byte, error) {
	return u.callWithin(ctx, h, body, true)
}

// vouchTimeout bounds the first call on a new connection, an empty
// batch that a serving master answers at once: a frozen replica accepts
// the connection and never answers, and the search must move on.
const vouchTimeout = 2 * time.Second

// callWithin is call, or callDue when due.
func (u *upstream) callWithin(ctx context.Context, h *wire.Header, body []byte, due bool) (wire.Status, []byte, error) {
	var last error = errNoMaster
	for try := 0; try < 2*len(u.peers)+1; try++ {
		if err := ctx.Err(); err != nil {
			return wire.Status{}, nil, err
		}
		cn, err := u.get(ctx)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return wire.Status{}, nil, err
			}
			last = err
			continue
		}
		vctx, vcancel := ctx, context.CancelFunc(func() {})
		if !cn.vouched.Load() {
			vctx, vcancel = context.WithTimeout(ctx, min(u.timeout, vouchTimeout))
		}
		st, resp, err := cn.vouch(vctx)
		vcancel()
		if err == nil && st.Code == wire.CodeOK {
			st, resp, err = cn.roundTrip(ctx, h, body)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			if due && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				u.drop(cn)
			}
			return wire.Status{}, nil, ctx.Err()
		case errors.Is(err, errOldMaster):
			return wire.Status{}, nil, err
		case err != nil:
			u.drop(cn)
			last = err
		case st.Code == wire.CodeNotMaster:
			u.redirect(cn, st.Leader)
			last = st.Err()
		default:
			u.noteEpoch(st.Epoch)
			return st, resp, nil
		}
	}
	return wire.Status{}, nil, fmt.Errorf("%w: %v", errNoMaster, last)
}

// noteEpoch records the master epoch an answer carried; a higher one than
// any before, after the first, is a master change.
func (u *upstream) noteEpoch(e uint64) {
	for {
		old := u.epoch.Load()
		if e <= old {
			return
		}
		if u.epoch.CompareAndSwap(old, e) {
			if old != 0 {
				u.m.masterChanges.Inc()
			}
			return
		}
	}
}

// probe asks the master for an empty BatchKeepAlive (answered at once, by
// a serving master that trusts the proxy), records whether it was
// answered, for hasMaster, and returns why not. A proxy without clients
// sends no other call, so without the probe it would never know whether
// it could serve one.
func (u *upstream) probe(ctx context.Context) error {
	st, _, err := u.call(ctx, &wire.Header{Method: wire.MethodBatchKeepAlive}, emptyBatch)
	if err == nil {
		err = st.Err()
	}
	u.mu.Lock()
	u.probed, u.probeErr = true, err
	u.mu.Unlock()
	return err
}

// hasMaster reports whether the proxy has a master: the last probe found
// one serving, and the connection to it is still open and vouched for
// (a master that dies closes it at once, before the next probe); else
// why not.
func (u *upstream) hasMaster() (bool, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.closed:
		return false, "the proxy is closing"
	case !u.probed:
		return false, "the master has not been probed yet"
	case u.probeErr != nil:
		return false, u.probeErr.Error()
	case u.conn == nil || u.conn.mux.IsClosed():
		return false, "the connection to the master closed"
	case !u.conn.vouched.Load():
		return false, "the replica at " + u.conn.addr + " has not answered as master yet"
	}
	return true, ""
}

// emptyBatch is a BatchKeepAlive of no sessions: vouch's probe.
var emptyBatch, _ = msgpack.Marshal(&wire.BatchKeepAliveRequest{})

// errOldMaster: the master does not know proxies.
var errOldMaster = errors.New("proxy: the master does not know BatchKeepAlive (a replica older than proxies): " +
	"no call is forwarded, since it would take it for the proxy's own")

// vouch makes sure, once per connection, that its replica knows proxies
// before any call is forwarded: a replica older than proxies would
// ignore wire.Header.OnBehalfOf and serve the call as the proxy's own
// principal. It returns the probe's status (OK when vouched) or a
// transport error; a replica that does not know the method is errOldMaster.
func (cn *upConn) vouch(ctx context.Context) (wire.Status, []byte, error) {
	if cn.vouched.Load() {
		return wire.Status{Code: wire.CodeOK}, nil, nil
	}
	st, resp, err := cn.roundTrip(ctx, &wire.Header{Method: wire.MethodBatchKeepAlive}, emptyBatch)
	switch {
	case err != nil:
		return st, nil, err
	case st.Code == wire.CodeOK:
		cn.vouched.Store(true)
	case st.Code == wire.CodeBadRequest:
		return st, nil, fmt.Errorf("%w: %s", errOldMaster, st.Msg)
	}
	return st, resp, nil
}

// roundTrip makes one call on a stream of its own; ctx's end closes the
// stream, which ends the call at the master (a parked call is
// abandoned, as a client leaving it would).
func (cn *upConn) roundTrip(ctx context.Context, h *wire.Header, body []byte) (wire.Status, []byte, error) {
	st, err := cn.mux.OpenStream()
	if err != nil {
		return wire.Status{}, nil, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() {
		st.Close()
		st.SetReadDeadline(time.Now()) // the answer is nobody's now
	})
	defer stop()
	if err := wire.WriteMessage(st, h, msgpack.RawMessage(body)); err != nil {
		return wire.Status{}, nil, err
	}
	var status wire.Status
	if err := wire.ReadMessage(st, &status); err != nil {
		return wire.Status{}, nil, err
	}
	resp, err := wire.ReadFrame(st)
	if err != nil {
		return wire.Status{}, nil, err
	}
	return status, resp, nil
}

// callDecoded is callDue with req encoded and the reply decoded into
// resp; an answer other than OK is its *wire.Error.
func (u *upstream) callDecoded(ctx context.Context, h *wire.Header, req, resp any) error {
	body, err := msgpack.Marshal(req)
	if err != nil {
		return err
	}
	st, b, err := u.callDue(ctx, h, body)
	if err != nil {
		return err
	}
	if err := st.Err(); err != nil {
		return err
	}
	return wire.Decode(b, resp)
}
