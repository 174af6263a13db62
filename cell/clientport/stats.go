package clientport

import (
	"sync/atomic"
	"time"
)

// connCounters count what the client port refused, by reason.
type connCounters struct {
	perIP, handshake, streams atomic.Uint64
	// connections refused over MaxConns, the file-descriptor share and
	// MaxConnsPerPrincipal (connlimits.go)
	connsTotal, connsFDShare, connsPrincipal atomic.Uint64
	idleStreams                              atomic.Uint64 // kept streams ended by their idle timeout
	keptRefused                              atomic.Uint64 // streams closed, not kept, over a cap on kept streams
}

// Stats counts what the client port refused since it started, and what
// it holds now.
type Stats struct {
	// RefusedPerIP are connections closed at once because their address
	// held MaxConnsPerIP already; RefusedTotal because the replica held
	// MaxConns; RefusedFDShare because the process's client ports held
	// their share of file descriptors (FDShare); RefusedPerPrincipal
	// closed after their handshake because the principal it named held
	// MaxConnsPerPrincipal.
	RefusedPerIP, RefusedTotal, RefusedFDShare, RefusedPerPrincipal uint64
	// Conns are the client connections the replica holds now.
	Conns int
	// FailedHandshakes are connections dropped before their protocol byte:
	// TLS refused (no, foreign, expired or not-yet-valid certificate),
	// too slow (HandshakeTimeout), or a wrong protocol byte.
	FailedHandshakes uint64
	// RefusedStreams are calls answered wire.CodeTooMany because a cap on
	// streams (MaxStreamsPerConn, MaxStreamsPerIP, MaxStreamsPerPrincipal,
	// MaxStreams) or MaxCallsPerSession was reached.
	RefusedStreams uint64
	// StreamsRefusedConn, StreamsRefusedIP, StreamsRefusedPrincipal and
	// StreamsRefusedProcess are the streams refused at accept, unread, by
	// the cap that was reached: the connection's, the address's, the
	// principal's, the process'p.
	StreamsRefusedConn, StreamsRefusedIP, StreamsRefusedPrincipal, StreamsRefusedProcess uint64
	// Streams are the streams open now (calls in flight, parked calls,
	// kept streams), StreamsKept the kept streams among them waiting for
	// their next call, StreamsPeak the most ever open at once.
	Streams, StreamsKept, StreamsPeak int64
	// StreamsLingering are the streams the replica has closed and their
	// clients not yet (counted against MaxKeptStreamsPerIP and
	// MaxKeptStreamsPerPrincipal when a new stream comes).
	StreamsLingering int64
	// IdleStreamsClosed are kept streams (wire.Header.KeepStream) the
	// replica closed because no call came on them for StreamIdleTimeout;
	// KeptStreamsRefused those it closed after their call instead of
	// keeping them, over MaxKeptStreamsPerIP, MaxKeptStreamsPerPrincipal
	// or MaxKeptStreams.
	IdleStreamsClosed, KeptStreamsRefused uint64
	// OverBudgetConn, OverBudgetIP and OverBudgetProcess are connections
	// closed because they held bytes over a memory budget (MaxConnBuffer,
	// MaxIPBuffer, MaxBuffer: the level that bound) and freed none for
	// BufferStall.
	OverBudgetConn, OverBudgetIP, OverBudgetProcess uint64
	// RequestBytes are the request bytes the client port holds now
	// (received, not yet served), and RequestBytesPeak the most it ever
	// held; ReplyBytes are the reply bytes being written now.
	RequestBytes, RequestBytesPeak, ReplyBytes int64
	// RequestHeld is what the request budget counts now: RequestBytes
	// and the memory holding them costs beyond their size (yamux's
	// receive buffers, frame buffers allocated ahead of their bytes);
	// RequestHeldPeak the most it ever counted. ReplyHeld is ReplyBytes
	// with the rest of the buffers they are encoded in.
	RequestHeld, RequestHeldPeak, ReplyHeld int64
	// RateWait is the time connections' reads waited, added up, because
	// their IP address read more than MaxIPRate.
	RateWait time.Duration
	// ReserveReads are reads admitted while the process held MaxBuffer of
	// requests or more, into BufferReserve, because their address and
	// principal held less than their fair shares.
	ReserveReads uint64
}

// Stats reports what the port has refused and what it holds.
func (p *Port) Stats() Stats {
	b := p.budget
	return Stats{RefusedPerIP: p.stats.perIP.Load(), FailedHandshakes: p.stats.handshake.Load(),
		RefusedTotal: p.stats.connsTotal.Load(), RefusedFDShare: p.stats.connsFDShare.Load(),
		RefusedPerPrincipal: p.stats.connsPrincipal.Load(), Conns: p.openConns(),
		RefusedStreams: p.stats.streams.Load(), IdleStreamsClosed: p.stats.idleStreams.Load(), KeptStreamsRefused: p.stats.keptRefused.Load(),
		OverBudgetConn: b.over[levelConn].Load(), OverBudgetIP: b.over[levelIP].Load(), OverBudgetProcess: b.over[levelProcess].Load(),
		RequestBytes: b.in.used.Load(), RequestBytesPeak: b.inPeak.Load(), ReplyBytes: b.out.used.Load(),
		RequestHeld: b.in.held(), RequestHeldPeak: b.inHeldPeak.Load(), ReplyHeld: b.out.held(),
		RateWait: time.Duration(b.slowed.Load()), ReserveReads: b.reserveReads.Load(),
		StreamsRefusedConn: b.refusedStreams[levelConn].Load(), StreamsRefusedIP: b.refusedStreams[levelIP].Load(),
		StreamsRefusedPrincipal: b.refusedStreams[levelPrincipal].Load(), StreamsRefusedProcess: b.refusedStreams[levelProcess].Load(),
		Streams: b.streams.Load(), StreamsKept: b.kept.Load(), StreamsPeak: b.streamsPeak.Load(),
		StreamsLingering: b.lingering.Load()}
}
