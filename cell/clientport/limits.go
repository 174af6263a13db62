package clientport

import "time"

// Limits bound what one client host or connection may hold on the
// client port: counts of connections and calls, times, and bytes.
type Limits struct {
	// MaxConnsPerIP caps open connections from one remote IP address;
	// more are closed as soon as they are accepted.
	MaxConnsPerIP int
	// MaxConns caps the replica's open client connections; more are
	// closed as soon as they are accepted. All client ports of the
	// process together also hold at most five eighths of its file
	// descriptors (ClientFDShare): a default MaxConns is lowered to that
	// share, and cell refuses one set above it (cell.ErrFDReserve).
	MaxConns int
	// MaxConnsPerPrincipal caps the open connections of one principal
	// (every caller of a plain cell is one); a connection over it is
	// closed after its handshake, before any call is read.
	MaxConnsPerPrincipal int
	// MaxStreamsPerConn caps calls in flight (parked KeepAlives and
	// Acquires included) and kept streams waiting for their next call on
	// one connection; a stream beyond it is
	// answered with wire.CodeTooMany and closed. It is large because one
	// connection may carry thousands of sessions (each parks a KeepAlive);
	// MaxCallsPerSession is the tight bound, and memory is bounded in
	// bytes by MaxConnBuffer, not by this count.
	MaxStreamsPerConn int
	// MaxCallsPerSession caps one session's calls in flight on a
	// connection; a call beyond it is answered with wire.CodeTooMany.
	MaxCallsPerSession int
	// HandshakeTimeout bounds a new connection's TLS handshake and its
	// protocol byte together; a slower one is dropped (slow-loris).
	HandshakeTimeout time.Duration
	// RequestTimeout bounds how long a stream may take to deliver its
	// request once opened, and how long a reply may take to be written.
	RequestTimeout time.Duration
	// StreamIdleTimeout is how long a stream a client asked to keep
	// (wire.Header.KeepStream) may wait for its next call before the
	// replica closes it. A kept stream counts against MaxStreamsPerConn
	// while it waits, like a call in flight.
	StreamIdleTimeout time.Duration

	// MaxConnBuffer caps the request bytes one connection holds: received
	// and not yet served, in yamux's stream buffers or in request frames.
	// Replies being written have a budget of the same size of their own.
	// A connection at its cap is not read (TCP flow control stops the
	// client); one that frees none of its bytes for BufferStall is closed.
	// A client must keep less than this in requests in transit on one
	// connection, or its calls can wait on each other's bytes.
	MaxConnBuffer int64
	// MaxIPBuffer is MaxConnBuffer for all connections of one remote IP
	// address together.
	MaxIPBuffer int64
	// MaxBuffer is MaxConnBuffer for the whole process: the last resort
	// when many addresses push at once.
	MaxBuffer int64
	// BufferStall is how long a connection over a budget may go without
	// freeing any of its bytes before it is closed.
	BufferStall time.Duration
	// MaxIPRate caps the bytes per second read from all connections of
	// one remote IP address together, with a burst of one second's worth.
	// The byte budgets bound what a client holds; this bounds the work it
	// makes the replica do (decrypting, framing, allocating) by streams
	// it keeps abandoning and replacing. A connection over it is not read
	// for a while (TCP flow control slows the client); it is not closed.
	MaxIPRate int64

	// BufferReserve is request room beyond MaxBuffer that only a
	// connection whose IP address (and, with TLS, principal) holds less
	// than its fair share of MaxBuffer may read into (the share: MaxBuffer
	// divided by the addresses, or principals, holding request bytes, at
	// least 1 MiB). So the process budget filling up never stops a caller
	// that holds little from being read; the big holders wait, and are
	// closed if they free nothing for BufferStall. The process holds at
	// most MaxBuffer+BufferReserve of requests.
	BufferReserve int64
	// MaxStreamsPerIP, MaxStreamsPerPrincipal and MaxStreams cap the
	// streams open at once from one remote IP address, of one principal
	// (every caller of a plain cell is one principal) and in the whole
	// process: calls in flight, parked KeepAlives and Acquires, and kept
	// streams waiting for their next call, as MaxStreamsPerConn counts
	// them on one connection. A stream beyond a cap is answered
	// wire.CodeTooMany and closed, unread. A stream costs memory while it
	// is open, bytes or not (docs/limits.md has the figure), and these
	// bound it. The defaults carry the session caps: a principal's 20,000
	// sessions, or the cell's 100,000, each with a parked KeepAlive and a
	// kept stream or two.
	MaxStreamsPerIP        int
	MaxStreamsPerPrincipal int
	MaxStreams             int
	// MaxKeptStreamsPerIP, MaxKeptStreamsPerPrincipal and MaxKeptStreams
	// cap the streams kept idle for a next call (wire.Header.KeepStream)
	// from one address, of one principal and in the process, within the
	// stream caps above. A stream over one is closed after its call
	// instead of kept: its client loses only the saving of a stream's
	// setup. A kept stream needs no session and holds no request bytes,
	// so without these caps it is the cheapest thing to hoard. The same
	// numbers bound the streams an address or principal leaves lingering
	// (closed by the replica, not yet by the client): while it has as
	// many, its new streams are answered wire.CodeTooMany.
	MaxKeptStreamsPerIP        int
	MaxKeptStreamsPerPrincipal int
	MaxKeptStreams             int
}

// DefaultLimits are the client port's limits when none are set.
var DefaultLimits = Limits{MaxConnsPerIP: 64, MaxConns: 16384, MaxConnsPerPrincipal: 4096, MaxStreamsPerConn: 8192, MaxCallsPerSession: 256,
	HandshakeTimeout: 5 * time.Second, RequestTimeout: 30 * time.Second, StreamIdleTimeout: 30 * time.Second,
	MaxConnBuffer: 4 << 20, MaxIPBuffer: 16 << 20, MaxBuffer: 64 << 20, BufferStall: time.Second,
	MaxIPRate: 8 << 20, BufferReserve: 16 << 20,
	MaxStreamsPerIP: 32768, MaxStreamsPerPrincipal: 32768, MaxStreams: 262144,
	MaxKeptStreamsPerIP: 4096, MaxKeptStreamsPerPrincipal: 4096, MaxKeptStreams: 65536}

// WithDefaults returns l with its zero fields set to DefaultLimits's (a
// default MaxConns lowered to FDShare).
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = d.MaxConnsPerIP
	}
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
		if share, _ := FDShare(); share > 0 && share < l.MaxConns {
			l.MaxConns = max(share, 1)
		}
	}
	if l.MaxConnsPerPrincipal <= 0 {
		l.MaxConnsPerPrincipal = d.MaxConnsPerPrincipal
	}
	if l.MaxStreamsPerConn <= 0 {
		l.MaxStreamsPerConn = d.MaxStreamsPerConn
	}
	if l.MaxCallsPerSession <= 0 {
		l.MaxCallsPerSession = d.MaxCallsPerSession
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = d.HandshakeTimeout
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = d.RequestTimeout
	}
	if l.StreamIdleTimeout <= 0 {
		l.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if l.MaxConnBuffer <= 0 {
		l.MaxConnBuffer = d.MaxConnBuffer
	}
	if l.MaxIPBuffer <= 0 {
		l.MaxIPBuffer = d.MaxIPBuffer
	}
	if l.MaxBuffer <= 0 {
		l.MaxBuffer = d.MaxBuffer
	}
	if l.MaxIPRate <= 0 {
		l.MaxIPRate = d.MaxIPRate
	}
	if l.BufferStall <= 0 {
		l.BufferStall = d.BufferStall
	}
	if l.BufferReserve <= 0 {
		l.BufferReserve = d.BufferReserve
	}
	if l.MaxStreamsPerIP <= 0 {
		l.MaxStreamsPerIP = d.MaxStreamsPerIP
	}
	if l.MaxStreamsPerPrincipal <= 0 {
		l.MaxStreamsPerPrincipal = d.MaxStreamsPerPrincipal
	}
	if l.MaxStreams <= 0 {
		l.MaxStreams = d.MaxStreams
	}
	if l.MaxKeptStreamsPerIP <= 0 {
		l.MaxKeptStreamsPerIP = d.MaxKeptStreamsPerIP
	}
	if l.MaxKeptStreamsPerPrincipal <= 0 {
		l.MaxKeptStreamsPerPrincipal = d.MaxKeptStreamsPerPrincipal
	}
	if l.MaxKeptStreams <= 0 {
		l.MaxKeptStreams = d.MaxKeptStreams
	}
	return l
}
