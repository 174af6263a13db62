package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"lockcell/fsm"
)

// maxAppendEntries is the most entries the leader puts in one
// AppendEntries (raft's MaxAppendEntries), which sizes the largest legal
// request the Raft port accepts.
const maxAppendEntries = 256

// Bounds on what one Raft request may claim. Every byte field of a legal
// request is a log entry's command (at most MaxCommandSize), a raft
// configuration or an address, so MaxRaftFieldBytes leaves room to spare;
// the largest legal request is maxAppendEntries commands of
// MaxCommandSize each plus their framing. hashicorp/raft decodes a byte
// field by growing it in 256 KiB steps, copying what it has at each step:
// quadratic in the field's size, so the field bound is also what keeps a
// request's decoding linear (at most four steps per field).
const (
	// MaxRaftFieldBytes caps one byte or string field of a Raft request.
	MaxRaftFieldBytes = 2 * fsm.MaxCommandSize
	// MaxRaftRequestBytes caps one Raft request (type byte and msgpack
	// value; an InstallSnapshot's streamed state is not part of it).
	MaxRaftRequestBytes = maxAppendEntries*(fsm.MaxCommandSize+1024) + 64<<10
	// maxRaftContainer caps the items of one msgpack array or map (a
	// request carries at most maxAppendEntries entries).
	maxRaftContainer = 4096
	// maxRaftDepth caps msgpack nesting (legal requests nest 3 deep).
	maxRaftDepth = 16
)

// RaftLimits bound what connections to the Raft port may cost a replica.
// Zero fields take the defaults of DefaultRaftLimits.
type RaftLimits struct {
	// IdleTimeout closes an accepted connection that delivers nothing for
	// this long (default: the larger of 30 s and twice the heartbeat
	// timeout). Raft's own connections carry a heartbeat or a pipelined
	// append every fraction of the heartbeat timeout; a pooled one that
	// sits idle is replaced before reuse (see redialConn).
	IdleTimeout time.Duration
	// MaxPendingPerIP caps connections from one IP address whose TLS
	// handshake has not finished; more are closed at once.
	MaxPendingPerIP int
	// MaxPending caps connections whose TLS handshake has not finished.
	MaxPending int
	// MaxConnsPerIP caps connections, pending or established, from one IP
	// address. A peer holds about a dozen (raft pools up to eight per
	// target, plus its pipeline and calls in flight); a development cell
	// has all its replicas on one address.
	MaxConnsPerIP int
	// MaxConns caps the Raft port's connections, pending or established.
	MaxConns int
	// LogInterval is how often refused, failed and dropped connections
	// are reported, as one line with counts (default 10 s). The first
	// one of a quiet period is reported at once.
	LogInterval time.Duration
}

// DefaultRaftLimits are the Raft port's limits when none are set.
var DefaultRaftLimits = RaftLimits{MaxPendingPerIP: 16, MaxPending: 64, MaxConnsPerIP: 128, MaxConns: 256,
	LogInterval: 10 * time.Second}

// DefaultRaftIdleTimeout is the least idle time after which an accepted
// Raft connection is closed.
const DefaultRaftIdleTimeout = 30 * time.Second

func (l RaftLimits) withDefaults(heartbeat time.Duration) RaftLimits {
	d := DefaultRaftLimits
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = max(DefaultRaftIdleTimeout, 2*heartbeat)
	}
	if l.MaxPendingPerIP <= 0 {
		l.MaxPendingPerIP = d.MaxPendingPerIP
	}
	if l.MaxPending <= 0 {
		l.MaxPending = d.MaxPending
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = d.MaxConnsPerIP
	}
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.LogInterval <= 0 {
		l.LogInterval = d.LogInterval
	}
	return l
}

// RaftPortStats counts what the Raft port refused or dropped since the
// replica started.
type RaftPortStats struct {
	// Refused connections were closed at accept: a cap was reached.
	Refused int64
	// HandshakeFailed connections failed or timed out their TLS handshake
	// (or presented a certificate that is not a replica's).
	HandshakeFailed int64
	// Idle connections were closed after IdleTimeout without a byte.
	Idle int64
	// Malformed connections sent a request beyond the bounds above or
	// that is no Raft request; they were closed before raft decoded it.
	Malformed int64
	// Errors are connection errors raft itself reported (e.g. a response
	// that could not be written).
	Errors int64
}

// portStats counts the Raft port's refusals and drops and reports them at
// most once per interval.
type portStats struct {
	log      *slog.Logger
	interval time.Duration
	total    [5]atomic.Int64 // since start, as in RaftPortStats
	mu       sync.Mutex
	pending  [5]int64 // since the last report
	last     string   // an example of the latest kind reported
	quietEnd time.Time
}

const (
	statRefused = iota
	statHandshake
	statIdle
	statMalformed
	statErrors
)

var statNames = [5]string{"refused", "handshake_failed", "idle_closed", "malformed", "errors"}

// count records one event. The first event after a quiet interval is
// logged at once; later ones are summed into the next report, so the port
// logs at most one line per interval.
func (s *portStats) count(kind int, what string) {
	s.total[kind].Add(1)
	s.mu.Lock()
	s.pending[kind]++
	if what != "" {
		s.last = what
	}
	s.mu.Unlock()
	s.reportDue()
}

// reportDue reports when the last report is at least an interval old.
func (s *portStats) reportDue() {
	s.mu.Lock()
	now := time.Now()
	if now.Before(s.quietEnd) || s.pending == [5]int64{} {
		s.mu.Unlock()
		return
	}
	s.quietEnd = now.Add(s.interval)
	s.mu.Unlock()
	s.report()
}

// report logs one line with the counts since the last report, if any.
func (s *portStats) report() {
	s.mu.Lock()
	var args []any
	sum := int64(0)
	for k, n := range s.pending {
		if n > 0 {
			args = append(args, statNames[k], n)
			sum += n
		}
	}
	s.pending = [5]int64{}
	last := s.last
	s.mu.Unlock()
	if sum == 0 {
		return
	}
	args = append(args, "example", last, "next_report_in", s.interval)
	// Idle closes alone are routine: pooled peer connections age out.
	lvl := slog.LevelWarn
	if sum == args[1] && args[0] == statNames[statIdle] {
		lvl = slog.LevelDebug
	}
	s.log.Log(context.Background(), lvl, "raft port: connections refused or dropped (counted, not logged one by one)", args...)
}

// run reports every interval until done closes.
func (s *portStats) run(done <-chan struct{}) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.reportDue()
		case <-done:
			s.report()
			return
		}
	}
}

func (s *portStats) snapshot() RaftPortStats {
	return RaftPortStats{Refused: s.total[statRefused].Load(), HandshakeFailed: s.total[statHandshake].Load(),
		Idle: s.total[statIdle].Load(), Malformed: s.total[statMalformed].Load(), Errors: s.total[statErrors].Load()}
}

// serverConn is an accepted Raft connection as raft's transport sees it.
// Every Read refreshes an idle deadline, and every byte read passes a
// msgGuard before raft decodes it. Any read failure reaches raft as io.EOF,
// which raft's connection handler ends on without logging, so a stranger
// costs at most one counted event, never a log line of its own.
type serverConn struct {
	net.Conn
	layer *streamLayer
	raw   net.Conn // the TCP connection under Conn
	ip    string
	idle  time.Duration
	guard msgGuard
	once  sync.Once
}

// Read reads within the idle deadline and checks what it read.
func (c *serverConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Read(p)
	if n > 0 {
		if gerr := c.guard.feed(p[:n]); gerr != nil {
			c.layer.stats.count(statMalformed, fmt.Sprintf("%s: %v", c.RemoteAddr(), gerr))
			c.Close()
			return 0, io.EOF
		}
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.layer.stats.count(statIdle, fmt.Sprintf("%s: idle for %v", c.RemoteAddr(), c.idle))
		}
		c.Close()
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	return n, nil
}

// Write writes within the idle timeout, so a peer that never reads its
// responses cannot hold raft's connection handler forever.
func (c *serverConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// Close closes the connection and frees its place under the caps.
func (c *serverConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.layer.release(c) })
	return err
}

// redialConn is a dialled Raft connection. raft pools dialled
// connections last-in first-out, so all but the most used can sit idle
// for as long as the cell is calm (a follower's vote connections until
// the next election), while the peer closes connections idle for its
// IdleTimeout. A redialConn idle for half that is replaced by a fresh
// connection at its next Write, when raft is about to send a request on
// it and has no reply pending: the bytes of one request and its reply
// always travel on one connection, and raft notices nothing.
type redialConn struct {
	dial  func() (net.Conn, error)
	stale time.Duration

	mu      sync.Mutex
	cur     net.Conn
	last    time.Time // last byte read or written
	reading int       // Reads in progress
	closed  bool
	rdl     time.Time // deadlines raft set, applied to a replacement too
	wdl     time.Time
	// unanswered: bytes were written since the last byte read, so a
	// request may be on its way with no answer yet (Close aborts then).
	unanswered bool
}

func (c *redialConn) conn() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Read reads from the current connection.
func (c *redialConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	cur := c.cur
	c.reading++
	c.mu.Unlock()
	n, err := cur.Read(p)
	c.mu.Lock()
	c.reading--
	c.last = time.Now()
	if n > 0 {
		c.unanswered = false // the peer answers: it read the request
	}
	c.mu.Unlock()
	return n, err
}

// Write replaces a connection idle for longer than stale, then writes.
func (c *redialConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.closed && c.reading == 0 && time.Since(c.last) > c.stale {
		fresh, err := c.dial()
		if err != nil {
			c.mu.Unlock()
			return 0, err
		}
		c.cur.Close()
		c.cur = fresh
		fresh.SetReadDeadline(c.rdl)
		fresh.SetWriteDeadline(c.wdl)
	}
	cur := c.cur
	c.last = time.Now()
	c.mu.Unlock()
	n, err := cur.Write(p)
	c.mu.Lock()
	c.last = time.Now()
	c.unanswered = true
	c.mu.Unlock()
	return n, err
}

// Close closes the current connection for good. One closed with a request
// unanswered (raft gave up on it: a timeout, an error) is aborted, so
// what it did not deliver is dropped, not sent after the requests raft
// sends next on other connections: followers rely on receiving a
// leader's appends in the order it sent them (freshness.go).
func (c *redialConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.unanswered {
		abortOnClose(c.cur)
	}
	return c.cur.Close()
}

// abortOnClose makes c's Close discard unsent bytes and reset the
// connection (SO_LINGER 0) instead of delivering them.
func abortOnClose(c net.Conn) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
}

func (c *redialConn) LocalAddr() net.Addr  { return c.conn().LocalAddr() }
func (c *redialConn) RemoteAddr() net.Addr { return c.conn().RemoteAddr() }

// SetDeadline sets both deadlines, remembered for a replacement.
func (c *redialConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl, c.wdl = t, t
	return c.cur.SetDeadline(t)
}

// SetReadDeadline sets the read deadline, remembered for a replacement.
func (c *redialConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	return c.cur.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline, remembered for a replacement.
func (c *redialConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	return c.cur.SetWriteDeadline(t)
}

// msgGuard follows the Raft requests on one connection as its bytes
// arrive, without buffering them: an RPC type byte, one msgpack map (the
// request), and for InstallSnapshot the request's Size bytes of state.
// It refuses what no peer sends: an unknown RPC type, a field, container,
// nesting or request beyond the bounds above, or msgpack that is invalid.
// Field payloads are skipped by counting, so checking costs a few
// operations per field, not per byte.
type msgGuard struct {
	inRequest bool  // past the type byte of a request
	rpcType   byte  // of the current request
	reqBytes  int64 // bytes of the current request so far
	raw       int64 // InstallSnapshot state bytes still to pass
	skip      int64 // payload bytes of the current str/bin/ext still to pass

	hdr     [9]byte // the bytes of a multi-byte header being collected
	hdrHave int
	hdrNeed int
	hdrKind byte // the header's first byte

	stack []frame // open containers

	// InstallSnapshot's Size: the value after the top-level key "Size".
	key      []byte // top-level map key being captured
	capture  bool
	sizeNext bool // the last top-level key was "Size"
	sizeVal  bool // the value being read is the one after "Size"
	size     int64
}

// frame is one open msgpack container.
type frame struct {
	left  int64 // items still to come (a map's pairs count twice)
	isMap bool
	total int64
}

const rpcInstallSnapshotType = 2 // hashicorp/raft's rpcInstallSnapshot

var errGuardType = errors.New("unknown Raft RPC type")

// feed checks the next bytes of the connection.
func (g *msgGuard) feed(p []byte) error {
	for len(p) > 0 {
		switch {
		case g.raw > 0:
			k := min(g.raw, int64(len(p)))
			g.raw -= k
			p = p[k:]
			if g.raw == 0 {
				g.inRequest = false
			}
			continue
		case !g.inRequest:
			if p[0] > 4 {
				return fmt.Errorf("%w %d", errGuardType, p[0])
			}
			g.inRequest, g.rpcType, g.reqBytes = true, p[0], 1
			g.sizeNext, g.size = false, 0
			p = p[1:]
			continue
		}
		var k int
		if g.skip > 0 {
			k = int(min(g.skip, int64(len(p))))
			if g.capture {
				g.key = append(g.key, p[:k]...)
			}
			g.skip -= int64(k)
			if g.skip == 0 {
				if err := g.stringDone(); err != nil {
					return err
				}
			}
		} else if g.hdrNeed > 0 {
			k = min(g.hdrNeed-g.hdrHave, len(p))
			copy(g.hdr[g.hdrHave:], p[:k])
			g.hdrHave += k
			if g.hdrHave == g.hdrNeed {
				if err := g.headerDone(); err != nil {
					return err
				}
			}
		} else {
			k = 1
			if err := g.start(p[0]); err != nil {
				return err
			}
		}
		p = p[k:]
		if g.inRequest {
			if g.reqBytes += int64(k); g.reqBytes > MaxRaftRequestBytes {
				return fmt.Errorf("request over %d bytes", MaxRaftRequestBytes)
			}
		}
	}
	return nil
}

// headerLen is, for each msgpack first byte that a header follows, the
// header's length: a str, bin, array or map length, an ext's length and
// type, a number, or a fixext's type and data (fixext 16, too long for
// msgGuard.hdr, is passed as a payload instead).
var headerLen = [256]uint8{
	0xc4: 1, 0xc5: 2, 0xc6: 4, // bin
	0xc7: 2, 0xc8: 3, 0xc9: 5, // ext: length, then type
	0xca: 4, 0xcb: 8, // float
	0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, // uint
	0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8, // int
	0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, // fixext: type, data
	0xd9: 1, 0xda: 2, 0xdb: 4, // str
	0xdc: 2, 0xdd: 4, 0xde: 2, 0xdf: 4, // array, map
}

// start reads the first byte of a value.
func (g *msgGuard) start(b byte) error {
	if len(g.stack) == 0 && !(b>>4 == 0x8 || b == 0xde || b == 0xdf) {
		return fmt.Errorf("request is no map (0x%02x)", b)
	}
	atKey := g.atTopKey()
	if len(g.stack) == 1 {
		// Only a top-level integer right after the key "Size" is the
		// InstallSnapshot's size, as raft decodes it.
		g.sizeVal = !atKey && g.sizeNext
		g.sizeNext = false
	}
	g.capture = atKey && (b>>5 == 0x5 || b == 0xd9)
	switch {
	case b <= 0x7f:
		return g.scalar(int64(b))
	case b <= 0x8f:
		return g.open(int64(b&0x0f), true)
	case b <= 0x9f:
		return g.open(int64(b&0x0f), false)
	case b <= 0xbf:
		return g.payload(int64(b & 0x1f))
	case b >= 0xe0:
		return g.scalar(int64(int8(b)))
	}
	switch b {
	case 0xc0, 0xc2, 0xc3:
		return g.scalar(-1)
	case 0xc1:
		return errors.New("invalid msgpack byte 0xc1")
	case 0xd8:
		return g.payload(17)
	}
	g.hdrKind, g.hdrHave, g.hdrNeed = b, 0, int(headerLen[b])
	return nil
}

// headerDone acts on a complete multi-byte header.
func (g *msgGuard) headerDone() error {
	b, h := g.hdrKind, g.hdr[:g.hdrNeed]
	g.hdrNeed, g.hdrHave = 0, 0
	be := func(x []byte) int64 {
		var v uint64
		for _, c := range x {
			v = v<<8 | uint64(c)
		}
		if v > 1<<62 {
			return 1 << 62
		}
		return int64(v)
	}
	switch b {
	case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb:
		return g.payload(be(h))
	case 0xc7, 0xc8, 0xc9:
		return g.payload(be(h[:len(h)-1]))
	case 0xcc, 0xcd, 0xce, 0xcf:
		return g.scalar(be(h))
	case 0xd0:
		return g.scalar(int64(int8(h[0])))
	case 0xd1:
		return g.scalar(int64(int16(binary.BigEndian.Uint16(h))))
	case 0xd2:
		return g.scalar(int64(int32(binary.BigEndian.Uint32(h))))
	case 0xd3:
		return g.scalar(int64(binary.BigEndian.Uint64(h)))
	case 0xdc, 0xdd:
		return g.open(be(h), false)
	case 0xde, 0xdf:
		return g.open(be(h), true)
	}
	return g.scalar(-1) // float, fixext, ext
}

// payload starts a str, bin or ext payload of n bytes.
func (g *msgGuard) payload(n int64) error {
	g.sizeVal = false
	if n > MaxRaftFieldBytes {
		return fmt.Errorf("field of %d bytes over %d", n, MaxRaftFieldBytes)
	}
	if g.capture {
		if n > 16 {
			g.capture = false
		} else {
			g.key = g.key[:0]
		}
	}
	if n == 0 {
		return g.stringDone()
	}
	g.skip = n
	return nil
}

// stringDone ends a str, bin or ext value.
func (g *msgGuard) stringDone() error {
	if g.capture {
		g.capture = false
		g.sizeNext = string(g.key) == "Size"
	}
	return g.done()
}

// scalar ends a value that carries no payload; v is its integer value,
// or -1.
func (g *msgGuard) scalar(v int64) error {
	if g.sizeVal {
		g.size, g.sizeVal = v, false
	}
	return g.done()
}

// open starts a container of n items.
func (g *msgGuard) open(n int64, isMap bool) error {
	g.sizeVal = false
	if n > maxRaftContainer {
		return fmt.Errorf("container of %d items over %d", n, maxRaftContainer)
	}
	if len(g.stack) >= maxRaftDepth {
		return fmt.Errorf("nesting deeper than %d", maxRaftDepth)
	}
	items := n
	if isMap {
		items = 2 * n
	}
	if items == 0 {
		return g.done()
	}
	g.stack = append(g.stack, frame{left: items, isMap: isMap, total: items})
	return nil
}

// atTopKey reports whether the next value is a key of the request's map.
func (g *msgGuard) atTopKey() bool {
	if len(g.stack) != 1 {
		return false
	}
	f := g.stack[0]
	return f.isMap && (f.total-f.left)%2 == 0
}

// done ends one value, closing the containers it completes; the end of
// the request's map ends the request.
func (g *msgGuard) done() error {
	for {
		if len(g.stack) == 0 {
			g.endRequest()
			return nil
		}
		top := &g.stack[len(g.stack)-1]
		top.left--
		if top.left > 0 {
			return nil
		}
		g.stack = g.stack[:len(g.stack)-1]
	}
}

// endRequest follows a complete request: an InstallSnapshot's state
// comes next, raw.
func (g *msgGuard) endRequest() {
	g.inRequest = false
	if g.rpcType == rpcInstallSnapshotType && g.size > 0 {
		g.raw, g.inRequest = g.size, true
	}
}

// transportLogWriter receives the lines of raft's network transport. The
// per-connection errors raft logs there are counted into the Raft port's
// reports instead of written one per connection; the rest pass to the
// replica's log.
type transportLogWriter struct {
	next  *hclogWriter
	stats *portStats
}

// perConnTransportErrors are hashicorp/raft's per-connection log lines.
var perConnTransportErrors = []string{"failed to decode incoming command", "failed to flush response",
	"failed to accept connection"}

func (w *transportLogWriter) Write(p []byte) (int, error) {
	line := string(p)
	for _, s := range perConnTransportErrors {
		if strings.Contains(line, s) {
			if i := strings.Index(line, "] "); i >= 0 {
				line = line[i+2:]
			}
			w.stats.count(statErrors, strings.TrimSpace(line))
			return len(p), nil
		}
	}
	return w.next.Write(p)
}

// newTransportHCLogger is newHCLogger for raft's network transport.
func newTransportHCLogger(l *slog.Logger, stats *portStats) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "raft-net",
		Level:  hclog.Info,
		Output: &transportLogWriter{next: &hclogWriter{l: l}, stats: stats},
	})
}
