package clientport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell/certs"
	"lockcell/frame"
	"lockcell/wire"
)

func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = 1024
	c.KeepAliveInterval = 5 * time.Second
	c.ConnectionWriteTimeout = 5 * time.Second
	c.StreamCloseTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// hello runs a new connection's TLS handshake (when configured) and reads
// its protocol byte, all within HandshakeTimeout, and returns the
// connection to speak on and its principal.
func (p *Port) hello(conn net.Conn) (net.Conn, string, error) {
	deadline := time.Now().Add(p.limits.HandshakeTimeout)
	conn.SetDeadline(deadline)
	principal := p.cfg.Anonymous
	if p.cfg.TLS != nil {
		tc := tls.Server(conn, p.cfg.TLS)
		ctx, cancel := context.WithDeadline(p.ctx, deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("TLS handshake: %w", err)
		}
		cs := tc.ConnectionState()
		p, err := certs.PrincipalOf(&cs)
		if err != nil {
			return nil, "", err
		}
		conn, principal = tc, p
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return nil, "", fmt.Errorf("protocol byte: %w", err)
	}
	if b[0] != wire.RPCMultiplex {
		return nil, "", fmt.Errorf("protocol byte %#x is not %#x", b[0], wire.RPCMultiplex)
	}
	conn.SetDeadline(time.Time{})
	return conn, principal, nil
}

func (p *Port) serveConn(raw net.Conn, ip string) {
	defer p.wg.Done()
	released := false
	defer func() {
		if !released {
			p.release(ip)
		}
	}()
	conn, principal, err := p.hello(raw)
	if err != nil {
		p.stats.handshake.Add(1)
		p.log.Debug("connection dropped", "remote", raw.RemoteAddr().String(), "err", err)
		drop(raw, err)
		return
	}
	if !p.admitPrincipal(principal) {
		// Its place goes back before its client hears why, so a client
		// that tries again at once is not refused by this connection.
		p.release(ip)
		released = true
		p.refuseConn(conn, raw, connRefusedPerPrincipal, principal)
		return
	}
	defer p.releasePrincipal(principal)
	cb := p.budget.conn(ip, principal)
	defer cb.end() // after the session has closed: nothing is read any more
	// The budget sees yamux's writes as yamux makes them; the BatchConn
	// below it puts each frame, and the frames queued meanwhile, in one
	// write.
	sess, err := yamux.Server(&budgetConn{Conn: frame.NewBatchConn(conn), raw: raw, c: cb}, yamuxConfig())
	if err != nil {
		conn.Close()
		return
	}
	p.connsMu.Lock()
	if p.closed {
		p.connsMu.Unlock()
		sess.Close()
		return
	}
	p.conns[sess] = struct{}{}
	p.connsMu.Unlock()
	caller := Caller{Principal: principal, Conn: p.connSeq.Add(1)}
	// The connection's end ends its parked KeepAlives (one list per
	// connection at the master), after the session has closed: a call
	// that parks later sees it closed (serveStream).
	defer p.h.ConnClosed(caller.Conn)
	defer func() {
		p.connsMu.Lock()
		delete(p.conns, sess)
		p.connsMu.Unlock()
		sess.Close()
	}()
	calls := &sessionCalls{max: p.limits.MaxCallsPerSession, n: map[uint64]int{}}
	var inflight atomic.Int64
	leave := func() {
		inflight.Add(-1)
		cb.leaveStream()
	}
	leaveConnOnly := func() { inflight.Add(-1) }
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		sb := cb.accepted(st.StreamID())
		cb.handling(sb, st)
		// Only this goroutine adds to inflight, so the connection's check
		// and take are one step; takeStream takes the other levels'.
		level := levelConn
		if inflight.Load() < int64(p.limits.MaxStreamsPerConn) {
			level = cb.takeStream()
		} else {
			p.budget.refusedStreams[levelConn].Add(1)
		}
		if level != levelNone {
			p.refuseStream(st, cb, sb, level)
			continue
		}
		inflight.Add(1)
		p.wg.Add(1)
		leaveThis := leave
		if cb.holdSlot(sb) {
			// The stream's place in the address's, principal's and
			// process's caps goes when yamux drops it (connBudget.forget).
			leaveThis = leaveConnOnly
		}
		go p.serveStream(st, caller, calls, cb, sb, leaveThis)
	}
}

// drop closes a connection that failed its hello. After a refused TLS
// handshake it first half-closes and drains what the client already sent
// (its protocol byte, yamux frames), for at most a second: closing with
// unread bytes would reset the connection, and a reset can discard the
// TLS alert that tells the client why (TLS 1.3 clients read it after
// their side of the handshake is done). A connection that was too slow
// is closed at once.
func drop(raw net.Conn, err error) {
	defer raw.Close()
	tcp, ok := raw.(*net.TCPConn)
	var ne net.Error
	if !ok || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return
	}
	tcp.CloseWrite()
	tcp.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(tcp, 64<<10))
}

// refuseStream answers a stream over a cap on streams (level names which:
// its connection's, address's, principal's or the process's) with TooMany
// without reading its request. It runs in the connection's accept loop,
// so a client that opens streams faster than it reads answers is slowed
// to one refusal at a time; the write deadline keeps one that reads
// nothing from stalling the loop for long. The reply is a few dozen bytes
// written one at a time, so it is not charged to the reply budget; the
// request bytes the stream holds stay charged until the client closes it.
func (p *Port) refuseStream(st *yamux.Stream, cb *connBudget, sb *streamBytes, level budgetLevel) {
	p.stats.streams.Add(1)
	var msg string
	switch l := p.limits; level {
	// takeStream refuses at the address's or principal's level for its
	// lingering streams too (answered, not yet closed by the client): the
	// message names the cap that was reached, or a client told "more
	// than 262,144 streams" while it holds a few thousand looks in vain.
	case levelIP:
		msg = fmt.Sprintf("more than %d streams open from one address", l.MaxStreamsPerIP)
		if cb.lingeringAtCap(levelIP) {
			msg = fmt.Sprintf("%d answered streams from one address not yet closed by their client (the kept-streams cap)", l.MaxKeptStreamsPerIP)
		}
	case levelPrincipal:
		msg = fmt.Sprintf("more than %d streams open of one principal", l.MaxStreamsPerPrincipal)
		if cb.lingeringAtCap(levelPrincipal) {
			msg = fmt.Sprintf("%d answered streams of one principal not yet closed by their client (the kept-streams cap)", l.MaxKeptStreamsPerPrincipal)
		}
	case levelProcess:
		msg = fmt.Sprintf("more than %d streams open on this replica", l.MaxStreams)
	default:
		msg = fmt.Sprintf("more than %d calls in flight on one connection", l.MaxStreamsPerConn)
	}
	st.SetWriteDeadline(time.Now().Add(time.Second))
	wire.WriteMessage(st, &wire.Status{Code: wire.CodeTooMany, Msg: msg}, &wire.Empty{})
	st.Close()
	cb.finished(sb, 0)
}

// streamReader counts the bytes a handler reads off its stream: they are
// released from the request budget once the call no longer holds them.
// It tells the budget what each read moves out of yamux's buffer and the
// room it reads into (budget.go, "What a held byte costs").
type streamReader struct {
	st *yamux.Stream
	cb *connBudget
	sb *streamBytes
	n  atomic.Int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	r.cb.reading(r.sb, len(p))
	n, err := r.st.Read(p)
	r.n.Add(int64(n))
	// yamux keeps a stream's receive buffer once it is drained, sized to
	// the most that ever waited in it (and doubled past its first frame):
	// memory the budget would have to keep charging while the handler
	// waits for the rest of a frame. Drop it; the next frame brings one
	// of its own size.
	r.st.Shrink()
	r.cb.read(r.sb, n)
	return n, err
}

// streamCall is one stream and the call it carries: what it holds until
// its reply is written (the stream, its request bytes, its place among its
// session's calls and its connection's streams, the server's wait group).
// A stream the client asked to keep (wire.Header.KeepStream) carries one
// call after another; between them it waits, with no goroutine, for the
// next request or its idle timeout (idle).
type streamCall struct {
	st      *yamux.Stream
	cb      *connBudget
	sb      *streamBytes
	in      streamReader // in the call: one allocation less per stream
	calls   *sessionCalls
	caller  Caller
	h       wire.Header
	entered bool        // counted in calls
	broken  atomic.Bool // the stream cannot carry another call
	leave   func()      // the connection's count of streams in flight

	// state moves a kept stream between its calls: streamBusy while a
	// call runs, streamIdle while it waits; whichever of the next
	// request and the idle timer takes it from idle runs.
	state    atomic.Int32
	idleStop *time.Timer

	// parkMu orders a parked KeepAlive's watch (serveCall) against its
	// completion, which may come first, from another goroutine: a watch
	// set after the completion would take the place of the kept stream's
	// own (idle) and swallow its next request.
	parkMu   sync.Mutex
	answered bool // the KeepAlive in flight has its answer
}

const (
	streamBusy int32 = iota
	streamIdle
)

// endCall releases what the stream holds: it is closed, its request
// bytes released, and it leaves its session's and connection's counts.
func (p *Port) endCall(c *streamCall) {
	if c.entered {
		c.calls.leave(c.h.Session)
		c.entered = false
	}
	c.st.Close()
	c.cb.finished(c.sb, c.in.n.Swap(0))
	c.leave()
	p.wg.Done()
}

// callDone follows a call whose reply is written: the stream ends, unless
// the client asked to keep it and it is sound, in which case it waits for
// the next call (idle).
func (p *Port) callDone(c *streamCall) {
	if !c.h.KeepStream || c.broken.Load() || p.ctx.Err() != nil {
		p.endCall(c)
		return
	}
	if c.entered {
		c.calls.leave(c.h.Session)
		c.entered = false
	}
	c.cb.consumed(c.sb, c.in.n.Swap(0))
	if !c.cb.takeKept() {
		p.stats.keptRefused.Add(1)
		p.endCall(c)
		return
	}
	p.idle(c)
}

// idle parks a kept stream between calls without a goroutine: the
// connection's frame reader wakes it when the next request's first bytes
// arrive, or when the client closes or resets the stream, or when the
// connection ends (watchPeer); a timer ends it after StreamIdleTimeout.
// The stream still counts against the caps on streams (MaxStreamsPerConn
// and its address's, principal's and the process's).
func (p *Port) idle(c *streamCall) {
	c.h = wire.Header{}
	c.state.Store(streamIdle)
	if c.idleStop == nil {
		c.idleStop = time.AfterFunc(p.limits.StreamIdleTimeout, func() {
			if p.unidle(c) {
				p.stats.idleStreams.Add(1)
				p.endCall(c)
			}
		})
	} else {
		c.idleStop.Reset(p.limits.StreamIdleTimeout)
	}
	if !c.cb.watchPeer(c.sb, func() { p.wake(c) }) {
		// Not counted by the frame reader (so nothing would wake it):
		// end it now rather than at its timer.
		if p.unidle(c) {
			c.idleStop.Stop()
			p.endCall(c)
		}
	}
}

// unidle takes a kept stream out of its wait, for whichever of its next
// request, its idle timer or its end comes first: it reports whether the
// caller was first.
func (p *Port) unidle(c *streamCall) bool {
	if !c.state.CompareAndSwap(streamIdle, streamBusy) {
		return false
	}
	c.cb.leaveKept()
	return true
}

// wake runs the next call of a kept stream, in the goroutine watchPeer
// started, unless its idle timer ended it first.
func (p *Port) wake(c *streamCall) {
	if !p.unidle(c) {
		return
	}
	c.idleStop.Stop()
	p.serveCall(c)
}

// serveStream runs the calls of one stream: request frames in, response
// frames out, one call at a time (serveCall). A blocking call (KeepAlive,
// waiting Acquire) is cancelled when the client closes or resets its
// stream, or sends anything after its request.
func (p *Port) serveStream(st *yamux.Stream, caller Caller, calls *sessionCalls, cb *connBudget, sb *streamBytes, leave func()) {
	c := &streamCall{st: st, cb: cb, sb: sb, in: streamReader{st: st, cb: cb, sb: sb}, calls: calls, caller: caller, leave: leave}
	p.serveCall(c)
}

// serveCall runs one call on c's stream, then hands the stream to
// callDone.
//
// A KeepAlive leaves no goroutine behind while it is parked: the master
// gets a completion (Master.DispatchKeepAlive) that writes the reply and
// releases the stream, and serveCall returns. Nothing reads a parked
// KeepAlive's stream: the connection's frame reader, which already
// charges every frame to its stream (budget.go), ends the call when the
// client sends more on it or closes or resets it (watchPeer), and the end
// of the connection ends all of its parked calls at once
// (Master.ConnClosed). A goroutine reading each stream would cost a
// stack per parked call.
func (p *Port) serveCall(c *streamCall) {
	st, cb, sb, in, calls := c.st, c.cb, c.sb, &c.in, c.calls
	// One timer bounds the whole request. A read deadline on the stream
	// would do it too, but yamux arms a new timer on every Read that has
	// to wait while one is set, and a client trickling a large request
	// (or hundreds of them) turned that into the master's top cost under
	// attack: timer allocations, clock reads and garbage.
	var reading sync.Mutex
	expired, done := false, false
	expire := time.AfterFunc(p.limits.RequestTimeout, func() {
		reading.Lock()
		defer reading.Unlock()
		if !done {
			expired = true
			st.SetReadDeadline(time.Now()) // the waiting Read returns ErrTimeout
		}
	})
	h := &c.h
	err := wire.ReadMessage(in, h)
	var body []byte
	if err == nil {
		body, err = wire.ReadFrame(in)
	}
	expire.Stop()
	reading.Lock()
	done = true
	if expired {
		st.SetReadDeadline(time.Time{})
	}
	reading.Unlock()
	if err != nil {
		p.replyErr(st, cb, err)
		p.endCall(c)
		return
	}
	// A parked call keeps its stream for minutes: let yamux drop the
	// receive buffer the request arrived in (it is empty now).
	st.Shrink()
	if !calls.enter(h.Session) {
		p.stats.streams.Add(1)
		p.writeReply(st, cb, &wire.Status{Code: wire.CodeTooMany,
			Msg: fmt.Sprintf("session %d has more than %d calls in flight", h.Session, calls.max)}, &wire.Empty{})
		p.endCall(c)
		return
	}
	c.entered = true
	started := time.Now()
	if h.Method == wire.MethodKeepAlive {
		c.parkMu.Lock()
		c.answered = false
		c.parkMu.Unlock()
		cancel := p.h.KeepAlive(c.caller, h, body, func(resp any, epoch uint64, err error) {
			c.parkMu.Lock()
			c.answered = true
			c.parkMu.Unlock()
			// Stop watching before the reply goes out: the client may
			// send its next call on a kept stream as soon as it has it.
			cb.unwatch(sb)
			p.reply(c, started, resp, epoch, err)
			p.callDone(c)
		})
		if cancel == nil {
			return // answered
		}
		// Anything more from the client on the stream, or its close or
		// reset, means it is gone or misbehaving: the connection's frame
		// reader ends the call (bytes after a request are charged to the
		// connection until the call ends and the stream closes). The
		// stream is not kept after such an end: what the client sent is
		// unread.
		c.parkMu.Lock()
		if !c.answered {
			// The request is decoded, its frames garbage: a parked
			// KeepAlive holds none of the request budget, so a
			// connection that only carries KeepAlives never stalls on
			// its bytes (budget.go, "Fair shares"). Under parkMu, so the
			// release cannot land on the stream's next call.
			cb.consumed(sb, in.n.Swap(0))
			cb.watchPeer(sb, func() {
				c.broken.Store(true)
				cancel()
			})
		}
		c.parkMu.Unlock()
		if st.Session().IsClosed() {
			// The connection closed while the call parked, maybe after
			// its ConnClosed: end it now rather than at its timer.
			p.h.ConnClosed(c.caller.Conn)
		}
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	var stopWatching func()
	if h.Method == wire.MethodAcquire || h.Method == wire.MethodAuditRead || h.Method == wire.MethodBatchKeepAlive { // calls that may wait long
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			// Any read result but the deadline below means the client
			// is gone or misbehaving (bytes after a request are charged
			// to the connection until the call ends and the stream
			// closes).
			var b [1]byte
			if _, err := in.Read(b[:]); !errors.Is(err, yamux.ErrTimeout) {
				c.broken.Store(true)
			}
			cancel()
		}()
		// Stopped before the reply goes out: the client may send its
		// next call on a kept stream as soon as it has the reply.
		stopWatching = func() {
			st.SetReadDeadline(time.Now()) // unblocks the watcher
			<-watched
			st.SetReadDeadline(time.Time{})
		}
	}
	resp, epoch, err := p.h.Call(ctx, c.caller, h, body)
	cancel()
	if stopWatching != nil {
		stopWatching()
	}
	body = nil // garbage now: p.reply releases its bytes
	p.reply(c, started, resp, epoch, err)
	p.callDone(c)
}

// reply writes a call's outcome on its stream and counts it in the
// metrics: the request's bytes are released first, so replies never wait
// on requests; a NotMaster says who leads, when that is known.
func (p *Port) reply(c *streamCall, started time.Time, resp any, epoch uint64, err error) {
	st, cb := c.st, c.cb
	if p.cfg.Observe != nil {
		defer func() { p.cfg.Observe(c.h.Method, wire.CodeOf(err), time.Since(started)) }()
	}
	// The request's frames are garbage now: release their bytes before
	// the reply waits for room, so replies never wait on requests.
	cb.consumed(c.sb, c.in.n.Swap(0))
	status := wire.Status{Code: wire.CodeOf(err), Epoch: epoch}
	if err != nil {
		status.Msg = err.(*wire.Error).Msg
		if status.Code == wire.CodeNotMaster {
			p.h.NotMaster(&status)
		}
		p.writeReply(st, cb, &status, &wire.Empty{})
		return
	}
	if wrote, werr := p.writeReply(st, cb, &status, resp); werr != nil {
		p.log.Debug("write response", "method", c.h.Method, "err", werr)
		if !wrote {
			// Nothing went out: the reply could not be encoded, most
			// likely too large for a frame. Say so instead of closing
			// the stream without a status.
			we := &wire.Error{Code: wire.CodeInternal, Msg: "reply not encoded: " + werr.Error()}
			errors.As(werr, &we)
			err = we // for the metrics
			p.writeReply(st, cb, &wire.Status{Code: we.Code, Msg: we.Msg, Epoch: epoch}, &wire.Empty{})
		}
	}
}

// writeReply writes a call's reply frames once the reply budget has room,
// charging them while they are written, with RequestTimeout to do it. It
// reports whether any byte was handed to the stream. A connection whose
// replies hold the budget and are not read within BufferStall is closed.
func (p *Port) writeReply(st *yamux.Stream, cb *connBudget, vals ...any) (wrote bool, err error) {
	deadline := time.Now().Add(p.limits.RequestTimeout)
	st.SetWriteDeadline(deadline)
	cb.outMu.Lock()
	if err := cb.await(cb.fullOut, &cb.out.used, "replies", deadline); err != nil {
		cb.outMu.Unlock()
		if errors.Is(err, errOverBudget) {
			st.Session().Close()
		}
		return false, err
	}
	w := replyWriter{st: st, cb: cb, locked: true}
	err = wire.WriteMessage(&w, vals...)
	if w.locked {
		cb.outMu.Unlock()
	}
	cb.chargeOut(-w.charged, -w.extra)
	return w.charged > 0, err
}

// replyWriter charges an encoded reply to the reply budget, then lets the
// next reply of the connection be admitted while this one is written.
type replyWriter struct {
	st      *yamux.Stream
	cb      *connBudget
	charged int64
	extra   int64
	locked  bool // holds cb.outMu
}

// Write charges the reply's bytes and the rest of the buffer they were
// encoded into (it grows by doubling, so up to as much again), which stays
// allocated until the write returns.
func (w *replyWriter) Write(b []byte) (int, error) {
	w.cb.chargeOut(int64(len(b)), int64(cap(b)-len(b)))
	w.charged += int64(len(b))
	w.extra += int64(cap(b) - len(b))
	if w.locked {
		w.locked = false
		w.cb.outMu.Unlock()
	}
	return w.st.Write(b)
}

func (p *Port) replyErr(st *yamux.Stream, cb *connBudget, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return // the stream broke; nobody to tell
	}
	p.writeReply(st, cb, &wire.Status{Code: we.Code, Msg: we.Msg}, &wire.Empty{})
}

// sessionCalls counts each session's calls in flight on one connection.
type sessionCalls struct {
	max int
	mu  sync.Mutex
	n   map[uint64]int
}

// enter admits one more call of session (0, before a session exists,
// counts as one session too), or reports the cap reached.
func (c *sessionCalls) enter(session uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[session] >= c.max {
		return false
	}
	c.n[session]++
	return true
}

func (c *sessionCalls) leave(session uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[session]--; c.n[session] <= 0 {
		delete(c.n, session)
	}
}
