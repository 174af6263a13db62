package replica

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"lockcell/cell/certs"
	"lockcell/fsm"
)

// msgpack encoding of the few shapes the hand-made Raft requests below
// need (hashicorp/raft encodes structs as maps keyed by field name).
func mpStr(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) }
func mpUint(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}
func mpBin32(b []byte, n uint32) []byte { return binary.BigEndian.AppendUint32(append(b, 0xc6), n) }

// hugeFieldHead is the start of an AppendEntries request, as the Raft
// port receives it, whose one entry's Data claims n bytes; the request is
// complete once n bytes follow.
func hugeFieldHead(n uint32) []byte {
	b := []byte{0}                  // rpcAppendEntries
	b = append(b, 0x82)             // map of 2
	b = mpUint(mpStr(b, "Term"), 1) //
	b = append(mpStr(b, "Entries"), 0x91, 0x84)
	b = mpUint(mpStr(b, "Index"), 1)
	b = mpUint(mpStr(b, "Term"), 1)
	b = mpUint(mpStr(b, "Type"), 0)
	return mpBin32(mpStr(b, "Data"), n)
}

// sendHugeField sends an AppendEntries whose entry Data is n bytes to a
// Raft port, as fast as the port takes them, and returns how many bytes
// the port took before it closed the connection or the request was sent.
func sendHugeField(t testing.TB, addr string, n int) (sent int, closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(hugeFieldHead(uint32(n))); err != nil {
		return 0, true
	}
	chunk := make([]byte, 64<<10)
	for sent < n {
		k, err := c.Write(chunk[:min(len(chunk), n-sent)])
		sent += k
		if err != nil {
			return sent, true
		}
	}
	return sent, false
}

// serveRPCs answers every RPC a transport delivers until stop closes, and
// reports each AppendEntries' total Data bytes on got.
func serveRPCs(tr raft.Transport, got chan<- int, stop <-chan struct{}) {
	for {
		select {
		case rpc := <-tr.Consumer():
			if ae, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				total := 0
				for _, e := range ae.Entries {
					total += len(e.Data)
				}
				select {
				case got <- total:
				default:
				}
			}
			if rpc.Reader != nil {
				io.Copy(io.Discard, rpc.Reader)
			}
			rpc.Respond(&raft.AppendEntriesResponse{Success: false}, nil)
		case <-stop:
			return
		}
	}
}

// measureHugeField sends one n-byte field to a fresh transport from
// newTr and reports the time until the transport delivered the request or
// dropped the connection, and the bytes this process allocated meanwhile.
func measureHugeField(t testing.TB, newTr func(addr string) (raft.Transport, <-chan int), n int) (d time.Duration, alloc uint64, delivered bool) {
	t.Helper()
	addr := freeAddrs(t, 1)[0]
	tr, got := newTr(addr)
	defer closeTransport(tr)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	_, closed := sendHugeField(t, addr, n)
	if !closed {
		select {
		case size := <-got:
			delivered = size == n
		case <-time.After(5 * time.Minute):
			t.Fatalf("a %d-byte field was neither delivered nor refused", n)
		}
	}
	d = time.Since(start)
	runtime.ReadMemStats(&m1)
	return d, m1.TotalAlloc - m0.TotalAlloc, delivered
}

// raftTCPTransport is hashicorp/raft's own TCP transport, unguarded: the
// baseline the benchmark compares with.
func raftTCPTransport(t testing.TB) func(string) (raft.Transport, <-chan int) {
	return func(addr string) (raft.Transport, <-chan int) {
		tr, err := raft.NewTCPTransport(addr, nil, 8, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		got, stop := make(chan int, 64), make(chan struct{})
		go serveRPCs(tr, got, stop)
		t.Cleanup(func() { close(stop) })
		return tr, got
	}
}

// BenchmarkRaftPortLargeField measures what one AppendEntries with one
// large byte field costs the receiving replica: time and bytes allocated,
// by field size, on raft's own TCP transport and on the replica's.
func BenchmarkRaftPortLargeField(b *testing.B) {
	for _, tr := range []struct {
		name string
		new  func(testing.TB) func(string) (raft.Transport, <-chan int)
	}{{"raft-tcp", raftTCPTransport}, {"replica", guardedTransport}} {
		for _, mib := range []int{1, 4, 16, 64} {
			b.Run(fmt.Sprintf("%s/%dMiB", tr.name, mib), func(b *testing.B) {
				for range b.N {
					d, alloc, ok := measureHugeField(b, tr.new(b), mib<<20)
					b.ReportMetric(float64(d.Microseconds())/1000, "ms/field")
					b.ReportMetric(float64(alloc)/(1<<20), "MiB-alloc/field")
					b.ReportMetric(map[bool]float64{true: 1}[ok], "delivered")
				}
			})
		}
	}
}

// newTestPort starts the replica's Raft transport (the stream layer under
// raft's NetworkTransport, as Open builds it) on addr, plain when cfg is
// nil, and answers its RPCs until the test ends.
func newTestPort(t testing.TB, addr string, cfg *tls.Config, lim RaftLimits, log *slog.Logger) (*streamLayer, raft.Transport, <-chan int) {
	t.Helper()
	if log == nil {
		log = quietLogger()
	}
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var verify func(tls.ConnectionState) error
	if cfg != nil {
		verify = certs.VerifyReplica
	}
	l, err := newStreamLayer(addr, tcp, cfg, verify, time.Second, lim.withDefaults(0), log)
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 8,
		Timeout: 5 * time.Second, Logger: newTransportHCLogger(log, l.stats)})
	got, stop := make(chan int, 64), make(chan struct{})
	go serveRPCs(tr, got, stop)
	t.Cleanup(func() {
		close(stop)
		tr.Close()
	})
	return l, tr, got
}

// guardedTransport is the replica's plain Raft transport, for
// measureHugeField.
func guardedTransport(t testing.TB) func(string) (raft.Transport, <-chan int) {
	return func(addr string) (raft.Transport, <-chan int) {
		_, tr, got := newTestPort(t, addr, nil, RaftLimits{}, nil)
		return tr, got
	}
}

// A byte field larger than any legal request carries is refused as soon
// as its length arrives: the connection is closed before raft allocates
// for it, where raft alone grows the field in 256 KiB steps, copying it
// each time (16 MiB: about 520 MiB allocated; 64 MiB: 8 GiB).
func TestRaftPortRefusesHugeField(t *testing.T) {
	for _, mib := range []int{16, 64} {
		_, alloc, delivered := measureHugeField(t, guardedTransport(t), mib<<20)
		if delivered {
			t.Errorf("a %d MiB field was delivered to raft", mib)
		}
		// The replica's own allocations stay small; the margin is for
		// the test's sender and the runtime.
		if alloc > 32<<20 {
			t.Errorf("a %d MiB field cost %d MiB of allocations, want under 32", mib, alloc>>20)
		}
	}
}

// captureLog is a slog handler that keeps every record's message and
// attributes as one line.
type captureLog struct {
	mu    *sync.Mutex
	lines *[]string
}

func newCaptureLog() (*slog.Logger, func() []string) {
	c := captureLog{mu: &sync.Mutex{}, lines: new([]string)}
	return slog.New(c), func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return append([]string(nil), *c.lines...)
	}
}

func (c captureLog) Enabled(context.Context, slog.Level) bool { return true }
func (c captureLog) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	c.mu.Lock()
	*c.lines = append(*c.lines, s)
	c.mu.Unlock()
	return nil
}
func (c captureLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c captureLog) WithGroup(string) slog.Handler      { return c }

// closedWithin reads c until the peer closes it, failing the test after d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %v", what, d)
	}
}

// A connection to the Raft port that sends nothing, or stops in the
// middle of a request, is closed after the idle timeout; the close is
// counted, and raft logs nothing for it.
func TestRaftPortClosesIdleConnections(t *testing.T) {
	log, lines := newCaptureLog()
	addr := freeAddrs(t, 1)[0]
	l, _, _ := newTestPort(t, addr, nil, RaftLimits{IdleTimeout: 300 * time.Millisecond, LogInterval: time.Hour}, log)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := stalled.Write(hugeFieldHead(1000)); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, silent, 5*time.Second, "a silent Raft connection")
	closedWithin(t, stalled, 5*time.Second, "a Raft connection stalled in a request")
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Idle < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := l.Stats(); st.Idle != 2 {
		t.Errorf("stats %+v, want 2 idle closes", st)
	}
	for _, s := range lines() {
		if strings.Contains(s, "failed to decode") {
			t.Errorf("raft logged an idle close: %s", s)
		}
	}
}

// raftClient is a raft transport that only dials, over the replica's
// stream layer (so its pooled connections redial when stale).
func raftClient(t testing.TB, cfg *tls.Config, lim RaftLimits) raft.Transport {
	t.Helper()
	_, tr, _ := newTestPort(t, freeAddrs(t, 1)[0], cfg, lim, nil)
	return tr
}

func appendOne(tr raft.Transport, target string, data []byte) error {
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries("x", raft.ServerAddress(target), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("x"), Addr: []byte("x")},
		Term:      1, Entries: []*raft.Log{{Index: 1, Term: 1, Data: data}}}, &resp)
}

// raft pools dialled connections last-in first-out, so a pooled one can
// sit idle past the peer's idle timeout and be closed under it. The
// replica's dialled connections replace themselves when reused after half
// that time: an RPC on a connection the peer has closed still succeeds.
func TestRaftPooledConnectionOutlivesIdleClose(t *testing.T) {
	lim := RaftLimits{IdleTimeout: 400 * time.Millisecond, LogInterval: time.Hour}
	addr := freeAddrs(t, 1)[0]
	srv, _, got := newTestPort(t, addr, nil, lim, nil)
	cl := raftClient(t, nil, lim)
	if err := appendOne(cl, addr, []byte("one")); err != nil {
		t.Fatal(err)
	}
	<-got
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Idle < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if srv.Stats().Idle < 1 {
		t.Fatal("the pooled connection was not closed as idle")
	}
	if err := appendOne(cl, addr, []byte("two")); err != nil {
		t.Fatalf("an RPC on a pooled connection closed as idle: %v", err)
	}
	<-got
}

// Every RPC raft sends, of every size a replica may legally send, passes
// the Raft port intact, over TCP and over TLS.
func TestRaftPortCarriesLegalRequests(t *testing.T) {
	ca, err := certs.NewCA("raft test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := func(id string) *tls.Config {
		c, err := ca.IssueReplica(id)
		if err != nil {
			t.Fatal(err)
		}
		return certs.PeerConfig(c.TLS(), ca.Pool())
	}
	for _, secure := range []bool{false, true} {
		var scfg, ccfg *tls.Config
		if secure {
			scfg, ccfg = peerTLS("1"), peerTLS("2")
		}
		addr := freeAddrs(t, 1)[0]
		srv, _, got := newTestPort(t, addr, scfg, RaftLimits{}, nil)
		cl := raftClient(t, ccfg, RaftLimits{})
		big := make([]byte, fsm.MaxCommandSize)
		var entries []*raft.Log
		for i := range 8 {
			entries = append(entries, &raft.Log{Index: uint64(i + 1), Term: 1, Data: big, AppendedAt: time.Now()})
		}
		var resp raft.AppendEntriesResponse
		if err := cl.AppendEntries("x", raft.ServerAddress(addr), &raft.AppendEntriesRequest{Term: 1, Entries: entries}, &resp); err != nil {
			t.Fatalf("secure=%v: AppendEntries of 8 x %d bytes: %v", secure, fsm.MaxCommandSize, err)
		}
		if n := <-got; n != 8*fsm.MaxCommandSize {
			t.Fatalf("secure=%v: %d bytes delivered, want %d", secure, n, 8*fsm.MaxCommandSize)
		}
		var vr raft.RequestVoteResponse
		if err := cl.RequestVote("x", raft.ServerAddress(addr), &raft.RequestVoteRequest{Term: 2, LastLogIndex: 9}, &vr); err != nil {
			t.Fatalf("secure=%v: RequestVote: %v", secure, err)
		}
		var pr raft.RequestPreVoteResponse
		if err := cl.(raft.WithPreVote).RequestPreVote("x", raft.ServerAddress(addr), &raft.RequestPreVoteRequest{Term: 2}, &pr); err != nil {
			t.Fatalf("secure=%v: RequestPreVote: %v", secure, err)
		}
		var tr raft.TimeoutNowResponse
		if err := cl.TimeoutNow("x", raft.ServerAddress(addr), &raft.TimeoutNowRequest{}, &tr); err != nil {
			t.Fatalf("secure=%v: TimeoutNow: %v", secure, err)
		}
		state := make([]byte, 3<<20) // a snapshot larger than any field: streamed, not a field
		var sr raft.InstallSnapshotResponse
		if err := cl.InstallSnapshot("x", raft.ServerAddress(addr), &raft.InstallSnapshotRequest{Term: 2, Size: int64(len(state)),
			Configuration: []byte("c")}, &sr, bytes.NewReader(state)); err != nil {
			t.Fatalf("secure=%v: InstallSnapshot of %d bytes: %v", secure, len(state), err)
		}
		if st := srv.Stats(); st != (RaftPortStats{}) {
			t.Fatalf("secure=%v: legal traffic refused or dropped: %+v", secure, st)
		}
	}
}

// Hundreds of strangers connect to a TLS Raft port at once and never
// handshake. The port keeps MaxPendingPerIP of them and closes the rest
// as they arrive, before any TLS work; it counts them and logs one line
// per interval, not one per connection; a replica from another address
// still gets through.
func TestRaftPortCapsPendingHandshakes(t *testing.T) {
	ca, err := certs.NewCA("raft test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	peerTLS := func(id string) *tls.Config {
		c, err := ca.IssueReplica(id)
		if err != nil {
			t.Fatal(err)
		}
		return certs.PeerConfig(c.TLS(), ca.Pool())
	}
	log, lines := newCaptureLog()
	addr := freeAddrs(t, 1)[0]
	const perIP, strangers = 4, 300
	srv, _, got := newTestPort(t, addr, peerTLS("1"), RaftLimits{MaxPendingPerIP: perIP, LogInterval: time.Hour}, log)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range strangers {
		// A refusal can reset the connection before Dial returns.
		if c, err := strangerDial(addr); err == nil {
			conns = append(conns, c)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().Refused < strangers-perIP && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := srv.Stats(); st.Refused != strangers-perIP {
		t.Fatalf("stats %+v, want %d refused", st, strangers-perIP)
	}
	// Every refused stranger finds its connection closed at once.
	open := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open++
			}
		}
	}
	if open != perIP {
		t.Errorf("%d stranger connections kept open, want %d", open, perIP)
	}
	cl := raftClient(t, peerTLS("2"), RaftLimits{})
	if err := appendOne(cl, addr, []byte("peer")); err != nil {
		t.Fatalf("a replica was refused while strangers held the port: %v", err)
	}
	<-got
	if n := len(lines()); n > 2 {
		t.Errorf("%d log lines for %d refused strangers, want at most 2:\n%s", n, strangers-perIP, strings.Join(lines(), "\n"))
	}
	srv.stats.report()
	last := lines()[len(lines())-1]
	if !strings.Contains(last, fmt.Sprintf("refused=%d", strangers-perIP-1)) {
		t.Errorf("the report does not count the refusals: %s", last)
	}
}

// strangerDial connects from 127.0.0.2: another address than the
// replicas' on this machine.
func strangerDial(addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// encodeRPC is one request as raft's transport writes it: the RPC type
// byte, then the request in msgpack (raft's sendRPC).
func encodeRPC(t testing.TB, typ byte, req any) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(typ)
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	if err := codec.NewEncoder(&buf, h).Encode(req); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The guard follows a stream of every kind of request raft sends, cut in
// random pieces, and finds each request's end where raft does.
func TestRaftGuardFollowsRaftRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("node-1"), Addr: []byte("127.0.0.1:7101")}
	var stream []byte
	var ends []int
	add := func(b []byte) {
		stream = append(stream, b...)
		ends = append(ends, len(stream))
	}
	for range 200 {
		switch rng.IntN(5) {
		case 0:
			req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: rng.Uint64(), PrevLogEntry: rng.Uint64N(1 << 40),
				PrevLogTerm: uint64(rng.IntN(3)), LeaderCommitIndex: rng.Uint64()}
			for i := range rng.IntN(5) {
				data := make([]byte, []int{0, 1, 31, 32, 255, 256, 65535, 65536, fsm.MaxCommandSize}[rng.IntN(9)])
				req.Entries = append(req.Entries, &raft.Log{Index: uint64(i), Term: 7, Type: raft.LogType(rng.IntN(6)),
					Data: data, Extensions: data[:min(len(data), rng.IntN(3))], AppendedAt: time.Unix(0, rng.Int64())})
			}
			add(encodeRPC(t, 0, req))
		case 1:
			add(encodeRPC(t, 1, &raft.RequestVoteRequest{RPCHeader: hdr, Term: rng.Uint64(), LastLogIndex: rng.Uint64(),
				LeadershipTransfer: rng.IntN(2) == 0}))
		case 2:
			size := int64([]int{0, 1, 100, 70000}[rng.IntN(4)])
			b := encodeRPC(t, 2, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: 1, Term: 3, LastLogIndex: 9,
				Configuration: []byte("cfg"), ConfigurationIndex: 2, Size: size})
			// The state follows, raw: bytes that would be anything as
			// requests (0xc1 is invalid msgpack).
			add(append(b, bytes.Repeat([]byte{0xc1}, int(size))...))
		case 3:
			add(encodeRPC(t, 3, &raft.TimeoutNowRequest{RPCHeader: hdr}))
		case 4:
			add(encodeRPC(t, 4, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: rng.Uint64(), LastLogTerm: 5}))
		}
	}
	var g msgGuard
	pos, next := 0, 0
	for pos < len(stream) {
		n := min(1+rng.IntN(300), len(stream)-pos)
		if rng.IntN(4) == 0 {
			n = min(ends[next]-pos, n) // stop exactly at a request's end now and then
		}
		if err := g.feed(stream[pos : pos+n]); err != nil {
			t.Fatalf("guard refused legal raft traffic at byte %d: %v", pos, err)
		}
		pos += n
		for next < len(ends) && ends[next] < pos {
			next++
		}
		if next < len(ends) && pos == ends[next] {
			if g.inRequest {
				t.Fatalf("request %d ends at byte %d, the guard is still in it", next, pos)
			}
			next++
		} else if !g.inRequest {
			t.Fatalf("the guard saw request %d end early, at byte %d of %d", next, pos, ends[next])
		}
	}
}

// The guard refuses what no peer sends, as soon as it can tell.
func TestRaftGuardRefuses(t *testing.T) {
	deep := []byte{0, 0x81, 0xa1, 'x'}
	for range maxRaftDepth {
		deep = append(deep, 0x91)
	}
	snap := encodeRPC(t, 2, &raft.InstallSnapshotRequest{Term: 1, Size: 3})
	for name, b := range map[string][]byte{
		"unknown RPC type":         {5},
		"request is no map":        {0, 0x91, 0x01},
		"huge bin":                 mpBin32([]byte{0, 0x81, 0xa1, 'x'}, MaxRaftFieldBytes+1),
		"huge str":                 {0, 0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"huge array":               {0, 0x81, 0xa1, 'x', 0xdd, 0, 1, 0, 0},
		"huge map":                 {0, 0x81, 0xa1, 'x', 0xdf, 0xff, 0xff, 0xff, 0xff},
		"too deep":                 deep,
		"invalid byte":             {1, 0x81, 0xc1},
		"after a snapshot's state": append(append(append([]byte(nil), snap...), 1, 2, 3), 9),
	} {
		var g msgGuard
		if err := g.feed(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A request of legal fields that adds up to more than the largest
	// legal request.
	var g msgGuard
	head := []byte{0, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdc, 0x0f, 0xff}
	if err := g.feed(head); err != nil {
		t.Fatal(err)
	}
	field := make([]byte, MaxRaftFieldBytes)
	for sent := int64(0); ; sent += MaxRaftFieldBytes {
		if sent > MaxRaftRequestBytes {
			t.Fatalf("a request of %d bytes accepted", sent)
		}
		if err := g.feed(mpBin32(nil, MaxRaftFieldBytes)); err != nil {
			break
		}
		if err := g.feed(field); err != nil {
			break
		}
	}
}

// BenchmarkRaftPortLegalBatch measures a legal AppendEntries through the
// replica's Raft port (raft's client and server transports over the
// replica's stream layer, TCP): entries of MaxCommandSize, 1 to 64 MiB in
// all. Time and allocation grow linearly with the request.
func BenchmarkRaftPortLegalBatch(b *testing.B) {
	for _, mib := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			addr := freeAddrs(b, 1)[0]
			_, _, got := newTestPort(b, addr, nil, RaftLimits{}, nil)
			cl := raftClient(b, nil, RaftLimits{})
			data := make([]byte, fsm.MaxCommandSize)
			var entries []*raft.Log
			for i := range mib << 20 / fsm.MaxCommandSize {
				entries = append(entries, &raft.Log{Index: uint64(i + 1), Term: 1, Data: data})
			}
			b.SetBytes(int64(mib << 20))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var resp raft.AppendEntriesResponse
				if err := cl.AppendEntries("x", raft.ServerAddress(addr), &raft.AppendEntriesRequest{Term: 1, Entries: entries}, &resp); err != nil {
					b.Fatal(err)
				}
				<-got
			}
		})
	}
}
