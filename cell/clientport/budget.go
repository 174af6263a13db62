package clientport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/frame"
)

// Memory budgets of the client port.
//
// Every byte a client sends in a yamux data frame is charged, the moment it
// comes off the socket, to its connection, the connection's remote IP, its
// principal and the process (the request budget), together with the
// memory that holding it costs beyond its own size (see "What a held byte
// costs"); every encoded reply is charged the same way while it is being
// written (the reply budget). A connection may read from its socket only
// while the connection, IP and process levels are below their caps (the
// process level with the exception of fair shares, below; a principal has
// no cap of its own, only a share); one read is at most budgetReadChunk
// bytes, so a level exceeds its cap by at most one read per connection
// reading at that level. A connection whose reads wait and that frees none
// of its own bytes for BufferStall is closed: it holds bytes that cannot
// turn into a served call (partial frames whose rest is behind the bytes
// we refuse to read).
//
// Fair shares. The process level is shared by everyone: left to itself, a
// few addresses each under its own cap (16 of them at 4 MiB each fill
// 64 MiB) stop every connection from being read, those of callers that
// hold nothing included, until the holders are closed for stalling, and
// they redial at once. So the process level is full for a connection only
// if it also holds its share. The fair share of an address is the process
// cap divided by the addresses holding request bytes (the connection's own
// counted in, if it holds none yet), and at least fairShareFloor; a
// principal's is the same among principals (with TLS only: on a plain cell
// every caller is one principal, and the addresses alone tell them apart).
// Once the process holds MaxBuffer, a connection whose address and
// principal hold less than their shares may still read, into
// BufferReserve, room beyond the cap that no one else may use; one whose
// address or principal holds its share or more is not read and, holding
// bytes it does not free for BufferStall, is closed as before. An address
// or principal that had a connection closed over a budget in the last
// cutMemory BufferStalls has shown that it holds bytes it does not free:
// it reads under the cap only, not into the reserve. Without that, the
// holders that were cut redial holding nothing, look like newcomers, and
// fill the reserve again before the next cut (measured: with sixteen
// addresses churning so, the reserve stayed full and a small holder
// waited up to 1.9 s).
//
//   - the bound is fixed: the process holds at most MaxBuffer +
//     BufferReserve (plus one read per connection reading, as above),
//     whatever the number of addresses;
//   - the big holders wait and are closed, not the small: n addresses
//     holding at least the cap together cannot all be under cap/n, so
//     someone is over its share and the wait always names one;
//   - a caller that holds little is read at once while the reserve has
//     room. The reserve can itself run out only while holders that were
//     under their shares when they read have grown past them (the shares
//     fall as holders join) and have not yet been closed, at most about
//     BufferStall, and once closed they do not come back into it; while
//     it is out, as before fair shares, every connection that stalls
//     holding bytes is closed, and one that holds nothing waits.
//     A parked KeepAlive holds none of its request (serveCall releases it
//     once dispatched), so a connection carrying only sessions'
//     KeepAlives is never closed by a budget and is read as soon as the
//     reserve has room.
//
// The number of holders is counted at most once per budgetPoll, and only
// while the process level is full: a share is a policy over who waits,
// not part of the bound, so a count a few milliseconds old does no harm.
//
// Why the count does not drift. yamux holds a stream's received bytes in
// its receive buffer until the handler reads them; the handler holds them
// in its frame buffers until the call is dispatched. The reader parses
// yamux's frame headers and charges each data payload to its stream
// (streamBytes.held); bytes for a stream yamux does not know are not
// charged, because yamux discards them (it has no buffer for them). A
// stream's bytes are released in two steps:
//
//   - the bytes its handler consumed (read off the stream) are released
//     when the call has been dispatched (consumed): they were in frame
//     buffers that are garbage then;
//   - the rest, bytes yamux still buffers for the stream (a client that
//     sent more than its request, or a stream refused unread), stay
//     charged until yamux drops the stream: when our side is done and the
//     client's FIN or RST has been seen, when yamux resets the stream
//     itself (its accept backlog overflowed, or the client never closed
//     its side within StreamCloseTimeout: we see the RST yamux writes), or
//     when the connection ends, which releases everything it holds.
//
// Honest clients send exactly their request, so nothing stays charged
// after a call. A handler holds its stream's record itself (taken when the
// stream is accepted: yamux queues new streams in the order their SYNs
// arrive, which is the order the reader saw them), so a stream id the
// client reuses after yamux dropped the stream gets a record of its own;
// a SYN for an id yamux still holds ends the connection (yamux refuses it
// too). Releasing consumed bytes never exceeds what the stream holds, and
// a stream's bytes are released once (its record is marked gone when they
// are), so the count never goes below what is held.
//
// What a held byte costs. A byte is held in one of two places, and the
// memory around it is charged too, so that the heap the request path holds
// stays near the budget rather than a multiple of it:
//
//   - yamux's receive buffer for the stream, a bytes.Buffer that yamux
//     allocates at the size of the first data frame it gets while empty and
//     that ReadFrom then grows by doubling (at the end of every frame that
//     fills it: 2L+512 bytes for an L-byte frame). The reader follows the
//     frames and keeps an estimate of that capacity (streamBytes.bufCap);
//     the part of it not holding bytes is charged on top of them, until the
//     handler has read the buffer empty (its reads shrink it, so yamux
//     drops it).
//   - the handler's frame buffers (wire.ReadFrame): exact allocations, but
//     the chunk being filled is allocated before its bytes arrive. Each
//     read the handler makes charges the room it reads into (ahead) until
//     bytes fill it.
//
// A stream's extra charges (bufCap beyond its bytes, and ahead) go with its
// bytes when it is forgotten or the connection ends, and ahead goes when
// the handler is done reading. They cannot wedge an honest connection:
// yamux's buffers empty as handlers read them, which needs no read from
// the socket, and the room counted ahead is part of requests the client
// has yet to send, so a client that keeps at most half a connection's
// budget unanswered (the client library does) stays under the cap.

// Streams. Every stream a handler holds, from its acceptance to its end
// (a call in flight, a parked KeepAlive or Acquire, a kept stream waiting
// for its next call), is counted at its connection, its address, its
// principal and the process, against MaxStreamsPerConn, MaxStreamsPerIP,
// MaxStreamsPerPrincipal and MaxStreams. A stream costs memory whether it
// carries bytes or not (yamux's stream, its channels and deadlines, our
// record of it and its idle timer: BenchmarkKeptStreamMemory), so the
// counts, not the byte budgets, bound it: the byte budgets are sized for
// requests in transit, and a hundred thousand sessions each parking a
// KeepAlive would fill them. takeStream checks and takes every level in
// one step (compare-and-swap below each cap, given back if a later level
// refuses), so no count ever passes its cap; an address's or principal's
// record lives while any connection or stream holds it, so a stream that
// outlives its connection is still counted where it was taken.

// budgetReadChunk bounds one read from a client connection, and so how far
// a read may take a budget past its cap.
const budgetReadChunk = 32 << 10

// fairShareFloor is the least fair share of the process's request budget
// an address or a principal has, however many hold bytes (at most a
// sixteenth of the budget, for small budgets).
const fairShareFloor = 1 << 20

// cutMemory is how many BufferStalls an address or principal that had a
// connection closed over a budget stays out of the reserve.
const cutMemory = 10

// budgetLevel is where a budget or a count bound: the connection, its
// IP, its principal or the process.
type budgetLevel int

const (
	levelNone budgetLevel = iota
	levelConn
	levelIP
	levelPrincipal
	levelProcess
)

func (l budgetLevel) String() string {
	switch l {
	case levelConn:
		return "connection"
	case levelIP:
		return "ip"
	case levelPrincipal:
		return "principal"
	case levelProcess:
		return "process"
	}
	return "none"
}

// byteCount is one level's bytes held against its cap: the bytes
// themselves (used), and the memory that holding them costs beyond their
// size (extra; see "What a held byte costs"). A level is full when the two
// together reach its cap, so used alone passes the cap by at most one read
// per connection, as before extra was counted.
type byteCount struct {
	max   int64
	used  atomic.Int64
	extra atomic.Int64
}

// held is what the level holds against its cap.
func (b *byteCount) held() int64 { return b.used.Load() + b.extra.Load() }

// errOverBudget ends a connection that held its bytes without progress
// while over a memory budget.
var errOverBudget = errors.New("over its memory budget")

// errStreamReused ends a connection that opened a stream id it still has
// open.
var errStreamReused = errors.New("stream id reused")

// budgets are the client port's memory budgets and stream counts: the
// process-wide levels and one record per remote IP and per principal with
// connections or streams.
type budgets struct {
	limits Limits
	log    *slog.Logger
	in     byteCount // request bytes held, process-wide
	out    byteCount // reply bytes being written, process-wide
	inPeak atomic.Int64
	// inHeldPeak is the most request bytes and the memory around them
	// (byteCount.held) held process-wide.
	inHeldPeak atomic.Int64
	// reserve is BufferReserve: request room beyond in.max for
	// connections under their fair shares.
	reserve int64
	// floor is the least fair share.
	floor int64
	// byPrincipal: principals tell callers apart (TLS), so a principal's
	// share counts; on a plain cell every caller is one principal.
	byPrincipal bool
	shares      atomic.Pointer[shareCount] // the last count of holders
	// reserveReads are reads admitted beyond in.max, under fair shares.
	reserveReads atomic.Uint64

	// streams open process-wide, kept streams among them waiting for
	// their next call, those lingering (closed by us, not yet by the
	// client), and the most ever open.
	streams, kept, lingering, streamsPeak atomic.Int64
	// refusedStreams are streams refused at accept, by the level whose
	// count was at its cap (connection, ip, principal, process).
	refusedStreams [levelProcess + 1]atomic.Uint64

	mu         sync.Mutex
	ips        map[string]*holder
	principals map[string]*holder
	// cut are the addresses and principals ("ip " or "principal " and the
	// name) that had a connection closed over a budget, and when (unix
	// nanoseconds); entries older than cutMemory BufferStalls are dropped
	// as new ones come, so it holds the cuts of that window at most.
	cut     map[string]int64
	cutNext int64 // when the oldest entry of cut may have aged out

	over    [levelProcess + 1]atomic.Uint64 // connections closed, by level
	slowed  atomic.Int64                    // nanoseconds reads waited on MaxIPRate
	lastLog atomic.Int64                    // unix nanoseconds of the last warning
	quiet   atomic.Uint64                   // closures not logged since
}

// holder is what one remote IP, or one principal, holds across its
// connections: request bytes (in), reply bytes (out, IPs only), the read
// rate (IPs only) and streams.
type holder struct {
	// refs are the connections and streams holding the record: it stays
	// in its map until the last of them is gone.
	refs    atomic.Int64
	in, out byteCount
	rate    rateBucket // bytes read per second (IPs)
	streams atomic.Int64
	// kept are the streams among them kept idle for a next call
	// (takeKept); lingering those our side has closed and the client has
	// not (lingerLocked).
	kept, lingering atomic.Int64
}

// shareCount is how many addresses and principals held request bytes
// when last counted (unix nanoseconds).
type shareCount struct {
	at              int64
	ips, principals int
}

// rateBucket is a token bucket of bytes: it fills at rate bytes per
// second up to one second's worth, and every byte read takes one. A read
// waits while the bucket is empty; the read that empties it may take it
// below zero by at most one read, which the next reads wait out.
type rateBucket struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

// wait is how long a read must wait before it may read now.
func (r *rateBucket) wait(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill(now)
	if r.tokens > 0 {
		return 0
	}
	return time.Duration((1 - r.tokens) / r.rate * float64(time.Second))
}

// take counts n bytes read.
func (r *rateBucket) take(now time.Time, n int) {
	r.mu.Lock()
	r.refill(now)
	r.tokens -= float64(n)
	r.mu.Unlock()
}

func (r *rateBucket) refill(now time.Time) {
	if r.last.IsZero() {
		r.tokens, r.last = r.rate, now
		return
	}
	if d := now.Sub(r.last); d > 0 {
		r.tokens = min(r.rate, r.tokens+d.Seconds()*r.rate)
		r.last = now
	}
}

// budgetLogEvery is the most often a budget closure is logged.
const budgetLogEvery = 10 * time.Second

// newBudgets makes the budgets of limits l; byPrincipal says that
// principals tell callers apart (the client port has TLS).
func newBudgets(l Limits, byPrincipal bool, log *slog.Logger) *budgets {
	b := &budgets{limits: l, log: log, ips: map[string]*holder{}, principals: map[string]*holder{}, cut: map[string]int64{},
		reserve: l.BufferReserve, floor: min(fairShareFloor, l.MaxBuffer/16), byPrincipal: byPrincipal}
	b.in.max, b.out.max = l.MaxBuffer, l.MaxBuffer
	return b
}

// conn starts the accounting of a new connection from ip, of principal.
func (b *budgets) conn(ip, principal string) *connBudget {
	b.mu.Lock()
	e := b.ips[ip]
	if e == nil {
		e = &holder{}
		e.in.max, e.out.max = b.limits.MaxIPBuffer, b.limits.MaxIPBuffer
		e.rate.rate = float64(b.limits.MaxIPRate)
		b.ips[ip] = e
	}
	e.refs.Add(1)
	p := b.principals[principal]
	if p == nil {
		p = &holder{}
		b.principals[principal] = p
	}
	p.refs.Add(1)
	b.mu.Unlock()
	c := &connBudget{b: b, ipName: ip, ip: e, principal: principal, pr: p, streams: map[uint32]*streamBytes{}, done: make(chan struct{})}
	c.in.max, c.out.max = b.limits.MaxConnBuffer, b.limits.MaxConnBuffer
	return c
}

// unref drops one reference to the record of name in m (b.ips or
// b.principals), removing it with the last. A reference is only ever
// added while another is held (a stream's while its connection's is,
// conn's under mu), so a record that reaches none is not revived.
func (b *budgets) unref(m map[string]*holder, name string, e *holder) {
	if e.refs.Add(-1) > 0 {
		return
	}
	b.mu.Lock()
	if e.refs.Load() == 0 && m[name] == e {
		delete(m, name)
	}
	b.mu.Unlock()
}

// processIn is the process level for c's next read: levelNone while the
// process holds less than its cap, or less than its cap and reserve and
// c's address and principal hold less than their fair shares.
func (b *budgets) processIn(c *connBudget) budgetLevel {
	held := b.in.held()
	if held < b.in.max {
		return levelNone
	}
	if held < b.in.max+b.reserve && b.underShares(c) {
		b.reserveReads.Add(1)
		return levelNone
	}
	return levelProcess
}

// underShares reports whether c's address, and with byPrincipal its
// principal, hold less than their fair shares of the request budget, and
// neither had a connection cut over a budget lately.
func (b *budgets) underShares(c *connBudget) bool {
	n := b.holders()
	if !underShare(c.ip.in.held(), n.ips, b.in.max, b.floor) ||
		b.byPrincipal && !underShare(c.pr.in.held(), n.principals, b.in.max, b.floor) {
		return false
	}
	return !b.wasCut(c)
}

// wasCut reports whether c's address, or with byPrincipal its principal,
// had a connection closed over a budget in the last cutMemory
// BufferStalls.
func (b *budgets) wasCut(c *connBudget) bool {
	since := time.Now().UnixNano() - cutMemory*int64(b.limits.BufferStall)
	b.mu.Lock()
	defer b.mu.Unlock()
	if at, ok := b.cut["ip "+c.ipName]; ok && at > since {
		return true
	}
	at, ok := b.cut["principal "+c.principal]
	return b.byPrincipal && ok && at > since
}

// markCut remembers that c was closed over a budget.
func (b *budgets) markCut(c *connBudget) {
	now := time.Now().UnixNano()
	window := cutMemory * int64(b.limits.BufferStall)
	b.mu.Lock()
	defer b.mu.Unlock()
	if now >= b.cutNext {
		// Drop what aged out; the next sweep is due when what is left
		// may start to, so the sweeps cost no more than the entries.
		oldest := now
		for k, at := range b.cut {
			if at <= now-window {
				delete(b.cut, k)
			} else {
				oldest = min(oldest, at)
			}
		}
		b.cutNext = oldest + window
	}
	b.cut["ip "+c.ipName] = now
	b.cut["principal "+c.principal] = now
}

// underShare reports whether held is under the fair share of limit among
// holders (one more if held is nothing: the one asking is about to hold),
// the share being at least floor.
func underShare(held int64, holders int, limit, floor int64) bool {
	n := int64(holders)
	if held <= 0 {
		n++
	}
	return held < max(limit/max(n, 1), floor)
}

// holders counts the addresses and principals holding request bytes, or
// returns the count made less than budgetPoll ago.
func (b *budgets) holders() *shareCount {
	now := time.Now().UnixNano()
	if s := b.shares.Load(); s != nil && now-s.at < int64(budgetPoll) {
		return s
	}
	s := &shareCount{at: now}
	b.mu.Lock()
	for _, e := range b.ips {
		if e.in.held() > 0 {
			s.ips++
		}
	}
	for _, e := range b.principals {
		if e.in.held() > 0 {
			s.principals++
		}
	}
	b.mu.Unlock()
	b.shares.Store(s)
	return s
}

// takeStream counts a new stream of c at its address, its principal and
// the process, or names the first level at its cap (and counts the
// refusal there). Each count is taken by compare-and-swap below its cap
// and given back if a later level refuses, so none ever passes its cap: a
// stream racing for the last place may be refused a moment early, never
// let past. The connection's own cap is the caller's (one goroutine
// takes its streams). leaveStream gives a taken stream back.
func (c *connBudget) takeStream() budgetLevel {
	l := c.b.limits
	level := levelNone
	switch {
	case c.lingeringAtCap(levelIP):
		level = levelIP
	case c.lingeringAtCap(levelPrincipal):
		level = levelPrincipal
	case !takeBelow(&c.ip.streams, l.MaxStreamsPerIP):
		level = levelIP
	case !takeBelow(&c.pr.streams, l.MaxStreamsPerPrincipal):
		c.ip.streams.Add(-1)
		level = levelPrincipal
	case !takeBelow(&c.b.streams, l.MaxStreams):
		c.ip.streams.Add(-1)
		c.pr.streams.Add(-1)
		level = levelProcess
	}
	if level != levelNone {
		c.b.refusedStreams[level].Add(1)
		return level
	}
	// The stream holds the records, so they outlive the connection as
	// long as it does (the connection holds a reference now: none is
	// revived).
	c.ip.refs.Add(1)
	c.pr.refs.Add(1)
	raisePeak(&c.b.streamsPeak, c.b.streams.Load())
	return levelNone
}

// lingeringAtCap reports whether c's address (levelIP) or principal
// (levelPrincipal) leaves as many streams lingering as it may keep idle:
// takeStream then refuses its new streams at that level, and the
// refusal says which cap it met.
func (c *connBudget) lingeringAtCap(level budgetLevel) bool {
	l := c.b.limits
	switch level {
	case levelIP:
		return l.MaxKeptStreamsPerIP > 0 && c.ip.lingering.Load() >= int64(l.MaxKeptStreamsPerIP)
	case levelPrincipal:
		return l.MaxKeptStreamsPerPrincipal > 0 && c.pr.lingering.Load() >= int64(l.MaxKeptStreamsPerPrincipal)
	}
	return false
}

// takeKept counts one more stream kept idle for its next call against
// MaxKeptStreamsPerIP, MaxKeptStreamsPerPrincipal and MaxKeptStreams, in
// one step (each level by compare-and-swap, undone if a later one is
// full), or reports false: the stream is then closed instead of kept. A
// kept stream needs no session and holds no request bytes, so it is the
// cheapest thing to hoard; keeping one only saves its client a stream's
// setup, so a stream over these caps loses nothing but that (the client
// library sends its next call on a new stream).
func (c *connBudget) takeKept() bool {
	l := c.b.limits
	switch {
	case !takeBelow(&c.ip.kept, l.MaxKeptStreamsPerIP):
		return false
	case !takeBelow(&c.pr.kept, l.MaxKeptStreamsPerPrincipal):
		c.ip.kept.Add(-1)
		return false
	case !takeBelow(&c.b.kept, l.MaxKeptStreams):
		c.ip.kept.Add(-1)
		c.pr.kept.Add(-1)
		return false
	}
	return true
}

// leaveKept gives back what takeKept took.
func (c *connBudget) leaveKept() {
	c.ip.kept.Add(-1)
	c.pr.kept.Add(-1)
	c.b.kept.Add(-1)
}

// leaveStream gives back a stream takeStream counted.
func (c *connBudget) leaveStream() {
	c.ip.streams.Add(-1)
	c.pr.streams.Add(-1)
	c.b.streams.Add(-1)
	c.b.unref(c.b.ips, c.ipName, c.ip)
	c.b.unref(c.b.principals, c.principal, c.pr)
}

// takeBelow adds one to n unless it is at max or more.
func takeBelow(n *atomic.Int64, max int) bool {
	for {
		v := n.Load()
		if v >= int64(max) {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// closed counts, remembers (markCut) and (at most once per
// budgetLogEvery) logs a connection closed over its budget.
func (b *budgets) closed(level budgetLevel, c *connBudget, what string) {
	b.over[level].Add(1)
	b.markCut(c)
	ip := c.ipName
	now := time.Now().UnixNano()
	last := b.lastLog.Load()
	if now-last < int64(budgetLogEvery) || !b.lastLog.CompareAndSwap(last, now) {
		b.quiet.Add(1)
		return
	}
	b.log.Warn("client connection closed: over its memory budget", "level", level.String(), "ip", ip, "held", what,
		"also_closed_since_last_warning", b.quiet.Swap(0))
}

// connBudget is one connection's share of the budgets and the per-stream
// accounting of its bytes.
type connBudget struct {
	b         *budgets
	ipName    string
	ip        *holder
	principal string
	pr        *holder
	in, out   byteCount
	done      chan struct{} // closed when the connection ends
	endOnce   sync.Once

	// outMu admits one reply at a time: a reply waits for room before it
	// is encoded, so replies waiting hold no encoded bytes.
	outMu sync.Mutex

	mu       sync.Mutex // guards what follows and every charge and release
	streams  map[uint32]*streamBytes
	pending  []*streamBytes // opened, in SYN order, not yet accepted
	detached bool           // the connection ended: nothing is charged any more
}

// streamBytes are the request bytes charged for one stream.
type streamBytes struct {
	id     uint32
	held   int64 // charged, not yet released
	local  bool  // our side is done with the stream
	remote bool  // the client closed or reset it
	gone   bool  // released and forgotten
	// slot: the stream holds its place in the caps on streams (its
	// address's, principal's and the process's: takeStream) until yamux
	// drops it (forget, end), not only while its handler runs: a stream
	// our side closed stays in yamux's session, with its memory, until
	// the client closes its side too or StreamCloseTimeout resets it, and
	// a client that never does must not get a new place for each.
	slot bool
	// lingering: our side has closed the stream and the client has not
	// yet (it still holds its slot and yamux's memory for it).
	lingering bool
	// onPeer, if set, is called once (in a goroutine of its own) when the
	// client sends anything more on the stream or closes or resets it
	// (watchPeer): a parked call's end without a goroutine reading.
	onPeer func()
	// waits is the stream, once a handler has it (handling): the end of
	// the connection ends its waits (end).
	waits streamWaits

	// The memory around the bytes (see "What a held byte costs"):
	buffered int64 // bytes received that the handler has not read: in yamux's buffer
	bufCap   int64 // estimated capacity of yamux's buffer for the stream (0: none)
	ahead    int64 // room the handler's current read reads into
	extra    int64 // charged beyond held: bufCap-buffered plus ahead
}

// yamuxReadSlack is what bytes.Buffer.ReadFrom, which yamux reads a data
// frame's payload with, asks for beyond the bytes it holds: a buffer with
// less room than this at the end of a frame grows to twice its capacity
// plus this.
const yamuxReadSlack = 512

// frameStart follows yamux allocating or growing st's buffer for a data
// frame of length bytes: a buffer that is empty is gone (the handler's
// reads shrink it), so yamux allocates exactly length; a buffer holding
// bytes grows as a bytes.Buffer does when the frame does not fit.
func (st *streamBytes) frameStart(length int64) {
	switch {
	case st.buffered == 0:
		st.bufCap = length
	case st.buffered+length > st.bufCap:
		st.bufCap = max(2*st.bufCap+length, st.buffered+length)
	}
}

// frameEnd follows bytes.Buffer.ReadFrom's last call for a frame: it wants
// yamuxReadSlack bytes of room, and doubles the buffer when there is less.
func (st *streamBytes) frameEnd() {
	if st.buffered+yamuxReadSlack > st.bufCap {
		st.bufCap = 2*st.bufCap + yamuxReadSlack
	}
}

// recharge brings st's extra charge in line with its buffer and read
// estimates and returns the change to charge; mu held.
func (st *streamBytes) recharge() int64 {
	want := max(st.bufCap-st.buffered, 0) + st.ahead
	d := want - st.extra
	st.extra = want
	return d
}

// chargeIn adds n request bytes at every level; mu held.
func (c *connBudget) chargeIn(n int64) {
	if c.detached || n == 0 {
		return
	}
	c.in.used.Add(n)
	c.ip.in.used.Add(n)
	c.pr.in.used.Add(n)
	if v := c.b.in.used.Add(n); n > 0 {
		raisePeak(&c.b.inPeak, v)
		raisePeak(&c.b.inHeldPeak, v+c.b.in.extra.Load())
	}
}

// chargeInExtra adds n bytes of memory around request bytes at every
// level; mu held.
func (c *connBudget) chargeInExtra(n int64) {
	if c.detached || n == 0 {
		return
	}
	c.in.extra.Add(n)
	c.ip.in.extra.Add(n)
	c.pr.in.extra.Add(n)
	if v := c.b.in.extra.Add(n); n > 0 {
		raisePeak(&c.b.inHeldPeak, v+c.b.in.used.Load())
	}
}

// raisePeak makes peak at least v.
func raisePeak(peak *atomic.Int64, v int64) {
	for p := peak.Load(); v > p && !peak.CompareAndSwap(p, v); p = peak.Load() {
	}
}

// chargeOut adds n reply bytes, and extra bytes of the buffer they are in
// beyond them, at every level.
func (c *connBudget) chargeOut(n, extra int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detached {
		return
	}
	c.out.used.Add(n)
	c.ip.out.used.Add(n)
	c.b.out.used.Add(n)
	c.out.extra.Add(extra)
	c.ip.out.extra.Add(extra)
	c.b.out.extra.Add(extra)
}

// forget releases everything st holds and drops it; mu held.
func (c *connBudget) forget(st *streamBytes) {
	if st.gone {
		return
	}
	c.chargeIn(-st.held)
	c.chargeInExtra(-st.extra)
	st.held, st.extra, st.gone = 0, 0, true
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
	c.unlingerLocked(st)
	if st.slot {
		st.slot = false
		c.leaveStream()
	}
}

// lingerLocked counts st as lingering: our side is done with it, the
// client's is not, so yamux keeps it (and its place in the caps) until
// the client closes it or StreamCloseTimeout resets it. An honest client
// closes its side as soon as it reads the end of ours; one that does not
// hoards streams the caps count, and when a new one comes takeStream
// refuses it while its address or principal has as many lingering as it
// may keep idle: so no client can hold a crowd of streams that yamux
// then resets all at once and that it opens again all at once. mu held.
func (c *connBudget) lingerLocked(st *streamBytes) {
	if st.lingering || !st.slot || st.remote {
		return
	}
	st.lingering = true
	c.ip.lingering.Add(1)
	c.pr.lingering.Add(1)
	c.b.lingering.Add(1)
}

func (c *connBudget) unlingerLocked(st *streamBytes) {
	if !st.lingering {
		return
	}
	st.lingering = false
	c.ip.lingering.Add(-1)
	c.pr.lingering.Add(-1)
	c.b.lingering.Add(-1)
}

// holdSlot makes st keep the place takeStream took for it until yamux
// drops the stream (forget, end) rather than until its handler ends. It
// reports false for a stream the budget does not follow (gone already):
// its handler's end must give the place back (leaveStream).
func (c *connBudget) holdSlot(st *streamBytes) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.gone || c.detached {
		return false
	}
	st.slot = true
	return true
}

// watchPeer has f called, once and in a goroutine of its own, when the
// client sends bytes on st beyond what its handler read, or closes or
// resets st: at once if it already has. For a call parked without a
// goroutine (a KeepAlive) it does what a goroutine reading the stream
// would, from the connection's own frame reader; for a kept stream
// waiting for its next call, it is that call's arrival. The connection's
// end counts as the client's (end). A stream not counted (gone) is not
// watched: watchPeer reports false and f is never called.
func (c *connBudget) watchPeer(st *streamBytes, f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.local || st.gone && !st.remote || c.detached {
		return false // over, or not counted
	}
	if st.remote || st.buffered > 0 {
		go f()
		return true
	}
	st.onPeer = f
	return true
}

// unwatch cancels watchPeer's call on st, if it has not fired yet.
func (c *connBudget) unwatch(st *streamBytes) {
	c.mu.Lock()
	st.onPeer = nil
	c.mu.Unlock()
}

// peerLocked takes st's onPeer, if any, for the caller to run once mu is
// released.
func (st *streamBytes) peerLocked(fire []func()) []func() {
	if st.onPeer != nil {
		fire = append(fire, st.onPeer)
		st.onPeer = nil
	}
	return fire
}

// streamWaits is what end needs of a stream (a *yamux.Stream): a way to
// end its reads and writes that wait.
type streamWaits interface{ SetDeadline(time.Time) error }

// handling records that a handler has st's stream s.
func (c *connBudget) handling(st *streamBytes, s streamWaits) {
	c.mu.Lock()
	st.waits = s
	c.mu.Unlock()
}

// accepted returns the record of the stream id yamux just handed to the
// accept loop: the oldest pending one with that id. Records passed over
// are of streams yamux refused (its backlog was full); the reset it sent
// for each forgets them.
func (c *connBudget) accepted(id uint32) *streamBytes {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, st := range c.pending {
		if st.id == id {
			clear(c.pending[:i+1])
			c.pending = c.pending[i+1:]
			return st
		}
	}
	return &streamBytes{id: id, gone: true} // not seen: nothing charged
}

// consumed releases n bytes the handler of st read and no longer holds,
// and the room its reads had asked for: it is done reading its request.
func (c *connBudget) consumed(st *streamBytes, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumedLocked(st, n)
}

func (c *connBudget) consumedLocked(st *streamBytes, n int64) {
	if st.gone {
		return
	}
	n = min(max(n, 0), st.held)
	st.held -= n
	st.ahead = 0
	c.chargeIn(-n)
	c.chargeInExtra(st.recharge())
}

// reading charges the room, ahead bytes, that st's handler is about to
// read into: its frame buffer holds that room before bytes fill it.
func (c *connBudget) reading(st *streamBytes, ahead int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.gone {
		return
	}
	st.ahead = int64(ahead)
	c.chargeInExtra(st.recharge())
}

// read records that st's handler read n bytes out of yamux's buffer (and
// then shrank it): they moved to its frame buffer, filling n bytes of the
// room it read into; a buffer read empty is gone.
func (c *connBudget) read(st *streamBytes, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.gone {
		return
	}
	st.buffered = max(st.buffered-int64(n), 0)
	if st.buffered == 0 {
		st.bufCap = 0
	}
	st.ahead = max(st.ahead-int64(n), 0)
	c.chargeInExtra(st.recharge())
}

// finished marks our side done with st (closed, after consuming n more
// bytes); its remaining bytes go when the client closes it too.
func (c *connBudget) finished(st *streamBytes, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumedLocked(st, n)
	st.local = true
	st.onPeer = nil // the call is over: nothing left to end
	if st.remote {
		c.forget(st)
	} else {
		c.lingerLocked(st)
	}
}

// end releases everything the connection holds; later charges and
// releases are no-ops. It also ends every read and write of a handled
// stream that waits (a deadline in the past): yamux's Session.Close,
// which calls it (budgetConn.Close) once it has closed its shutdown
// channel, only then closes its streams one by one, and until it reaches
// a stream a Read or Write waiting on it loops on the closed channel
// without a pause (hashicorp/yamux v0.1.2). Hundreds of such loops on a
// connection cut over its budget took a master's CPU for seconds, its
// stream locks contended by the very loop that would close them; with a
// deadline passed, each wait returns ErrTimeout at its next turn.
func (c *connBudget) end() {
	c.endOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		c.detached = true
		for _, l := range [][]*byteCount{{&c.in, &c.ip.in, &c.pr.in, &c.b.in}, {&c.out, &c.ip.out, &c.b.out}} {
			used, extra := l[0].used.Swap(0), l[0].extra.Swap(0)
			for _, up := range l[1:] {
				up.used.Add(-used)
				up.extra.Add(-extra)
			}
		}
		var fire []func()
		var waits []streamWaits
		slots := 0
		for id, st := range c.streams {
			fire = st.peerLocked(fire)
			c.unlingerLocked(st)
			if st.slot {
				st.slot = false
				slots++
			}
			st.held, st.extra, st.gone = 0, 0, true
			if st.waits != nil {
				waits = append(waits, st.waits)
			}
			delete(c.streams, id)
		}
		for _, st := range c.pending {
			if st.slot {
				st.slot = false
				slots++
			}
		}
		c.pending = nil
		c.mu.Unlock()
		for range slots {
			c.leaveStream()
		}
		past := time.Unix(1, 0)
		for _, s := range waits {
			s.SetDeadline(past)
		}
		// Nothing more will come from the client: its watched streams
		// (parked calls, kept streams) end as if it had closed them.
		for _, f := range fire {
			go f()
		}
		c.b.unref(c.b.ips, c.ipName, c.ip)
		c.b.unref(c.b.principals, c.principal, c.pr)
	})
}

// fullIn names the first request level at or over its cap, the process
// level as processIn has it (fair shares).
func (c *connBudget) fullIn() budgetLevel {
	switch {
	case c.in.held() >= c.in.max:
		return levelConn
	case c.ip.in.held() >= c.ip.in.max:
		return levelIP
	}
	return c.b.processIn(c)
}

// fullOut names the first reply level at or over its cap.
func (c *connBudget) fullOut() budgetLevel { return firstFull(&c.out, &c.ip.out, &c.b.out) }

// firstFull names the first of the connection, IP and process counts that
// is at or over its cap.
func firstFull(conn, ip, process *byteCount) budgetLevel {
	switch {
	case conn.held() >= conn.max:
		return levelConn
	case ip.held() >= ip.max:
		return levelIP
	case process.held() >= process.max:
		return levelProcess
	}
	return levelNone
}

// budgetPoll is how often a waiting connection looks for room.
const budgetPoll = 5 * time.Millisecond

// await waits until full reports no level at its cap. While it waits, a
// connection that holds bytes of its own (own) and frees none of them for
// BufferStall is over its budget: await returns errOverBudget, counted by
// the level that bound. One that holds nothing waits on (closing it would
// free nothing) until giveUp, if set, passes. It returns net.ErrClosed
// once the connection ends.
func (c *connBudget) await(full func() budgetLevel, own *atomic.Int64, what string, giveUp time.Time) error {
	select {
	case <-c.done:
		// A reply begun after end would set its stream a deadline of its
		// own, in place of the one end set, and could wait out a full
		// window while the session closes (see end).
		return net.ErrClosed
	default:
	}
	if full() == levelNone {
		return nil
	}
	t := time.NewTicker(budgetPoll)
	defer t.Stop()
	low := own.Load()
	stall := time.Now().Add(c.b.limits.BufferStall)
	for {
		select {
		case <-c.done:
			return net.ErrClosed
		case <-t.C:
		}
		level := full()
		if level == levelNone {
			return nil
		}
		now := time.Now()
		if held := own.Load(); held < low || held == 0 {
			low, stall = held, now.Add(c.b.limits.BufferStall)
		}
		if !giveUp.IsZero() && now.After(giveUp) {
			return fmt.Errorf("no room for a reply before its deadline: %w", errOverBudget)
		}
		if now.After(stall) {
			c.b.closed(level, c, what)
			return errOverBudget
		}
	}
}

// paced waits until the connection's IP may read again under MaxIPRate.
// The wait is not a stall: the bytes held do not change while it lasts.
func (c *connBudget) paced() error {
	d := c.ip.rate.wait(time.Now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	c.b.slowed.Add(int64(d))
	select {
	case <-c.done:
		return net.ErrClosed
	case <-t.C:
		return nil
	}
}

// budgetConn is the connection yamux reads and writes: reads wait for
// room in the request budget and are charged to their streams; writes are
// watched for the resets yamux sends, which drop a stream.
type budgetConn struct {
	net.Conn
	raw net.Conn // the TCP connection under Conn (under TLS, if any)
	c   *connBudget
	in  muxParser // yamux's receive goroutine only
	out muxParser // yamux's send goroutine only
}

func (bc *budgetConn) Read(p []byte) (int, error) {
	if err := bc.c.await(bc.c.fullIn, &bc.c.in.used, "requests", time.Time{}); err != nil {
		return 0, err
	}
	if err := bc.c.paced(); err != nil {
		return 0, err
	}
	if len(p) > budgetReadChunk {
		p = p[:budgetReadChunk]
	}
	n, err := bc.Conn.Read(p)
	if n > 0 {
		bc.c.ip.rate.take(time.Now(), n)
		if perr := bc.c.received(&bc.in, p[:n]); perr != nil {
			return 0, perr
		}
	}
	return n, err
}

func (bc *budgetConn) Write(p []byte) (int, error) {
	bc.c.sent(&bc.out, p)
	return bc.Conn.Write(p)
}

// Close ends the connection at once. yamux's Session.Close closes its
// shutdown channel, then this connection, and only then closes its
// streams; meanwhile every stream Read or Write waiting on the stream
// loops back to its wait, which the closed channel ends at once (yamux
// v0.1.2): a busy loop per waiting stream. So closing must not wait, and
// a TLS connection's Close does: it sends close_notify, with a 5 s
// deadline, to a client that may not be reading (a connection closed
// over its budget typically is not). With hundreds of streams spinning
// for 5 s on each of dozens of connections the process had no CPU left,
// and a master missed its Raft heartbeats and lost its leadership.
// Closing the TCP connection first makes the alert fail at once; a client
// being cut learns of it from the connection's end.
func (bc *budgetConn) Close() error {
	bc.c.end()
	if bc.raw != nil {
		bc.raw.Close()
	}
	return bc.Conn.Close()
}

// muxParser follows yamux frames across reads or writes, and the stream
// the current data frame's body is charged to.
type muxParser struct {
	frames frame.Scanner
	st     *streamBytes // the stream the body is charged to (nil: none)
}

// received charges the data payloads in b, bytes just read from the
// client, to their streams.
func (c *connBudget) received(p *muxParser, b []byte) error {
	var fire []func()
	defer func() {
		for _, f := range fire {
			go f()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	var total, extra int64
	defer func() { c.chargeInExtra(extra) }()
	for len(b) > 0 {
		if p.frames.Body() > 0 {
			k := p.frames.SkipBody(len(b))
			b = b[k:]
			if st := p.st; st != nil && !st.gone {
				fire = st.peerLocked(fire)
				st.held += int64(k)
				st.buffered += int64(k)
				total += int64(k)
				if p.frames.Body() == 0 {
					st.frameEnd()
				}
				extra += st.recharge()
			}
			continue
		}
		k, h, ok := p.frames.FillHeader(b)
		b = b[k:]
		if !ok {
			break
		}
		typ, flags, id, length := h.Type(), h.Flags(), h.StreamID(), h.Length()
		p.st = nil
		if typ != frame.TypeData && typ != frame.TypeWindowUpdate {
			continue // ping and go-away: no stream, no payload
		}
		if flags&frame.FlagSYN != 0 {
			if old := c.streams[id]; old != nil {
				if !old.remote {
					c.chargeIn(total)
					return fmt.Errorf("%w: %d", errStreamReused, id)
				}
				// yamux dropped the old stream (the client reset
				// it); its handler keeps its own record.
				delete(c.streams, id)
			}
			st := &streamBytes{id: id}
			c.streams[id] = st
			c.pending = append(c.pending, st)
		}
		st := c.streams[id]
		if st != nil && flags&(frame.FlagFIN|frame.FlagRST) != 0 {
			fire = st.peerLocked(fire)
			st.remote = true
			if st.local {
				c.forget(st)
				st = nil
			}
		}
		if typ == frame.TypeData { // its body is due (the scanner expects it)
			p.st = st
			if st != nil && !st.gone && length > 0 {
				st.frameStart(int64(length))
				extra += st.recharge()
			}
		}
	}
	c.chargeIn(total)
	return nil
}

// sent watches bytes yamux writes for the resets it sends on its own (an
// accept backlog overflow, a stream the client never closed): yamux has
// dropped that stream and everything it held.
func (c *connBudget) sent(p *muxParser, b []byte) {
	for len(b) > 0 {
		if p.frames.Body() > 0 {
			b = b[p.frames.SkipBody(len(b)):]
			continue
		}
		k, h, ok := p.frames.FillHeader(b)
		b = b[k:]
		if !ok {
			return
		}
		if h.Type() == frame.TypeWindowUpdate && h.Flags()&frame.FlagRST != 0 {
			id := h.StreamID()
			c.mu.Lock()
			var fire []func()
			if st := c.streams[id]; st != nil {
				fire = st.peerLocked(nil)
				c.forget(st)
			}
			c.mu.Unlock()
			for _, f := range fire {
				go f()
			}
		}
	}
}
