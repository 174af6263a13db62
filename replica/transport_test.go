package replica

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/cell/certs"
	"lockcell/fixtures/freeport"
	"lockcell/fsm"
)

// freeAddrs returns n loopback TCP addresses reserved for this test.
func freeAddrs(t testing.TB, n int) []string { return freeport.Addrs(t, n) }

// fwdProxy forwards every connection it accepts to target and counts the
// bytes it carried either way.
type fwdProxy struct {
	l      net.Listener
	target string
	bytes  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func newFwdProxy(t testing.TB, target string) *fwdProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fwdProxy{l: l, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *fwdProxy) Addr() string { return p.l.Addr().String() }

func (p *fwdProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *fwdProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			in.Close()
			out.Close()
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *fwdProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	n, _ := io.Copy(dst, src)
	p.bytes.Add(n)
	dst.Close()
	src.Close()
}

// Close stops accepting and cuts every forwarded connection.
func (p *fwdProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.l.Close()
	p.wg.Wait()
}

func testTimings() Timings {
	return Timings{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitApply proposes an Epoch command at whichever replica leads until one
// is applied, or fails the test at the deadline.
func waitApply(t testing.TB, reps []*Replica, within time.Duration) *Replica {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		for _, r := range reps {
			if r == nil || !r.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := r.Apply(ctx, &fsm.Command{Time: time.Now().UnixNano(), Payload: &fsm.EpochArgs{}})
			cancel()
			if err == nil {
				return r
			}
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no replica applied a command within %v (last error: %v)", within, last)
	return nil
}

func closeAll(reps []*Replica) {
	var wg sync.WaitGroup
	for _, r := range reps {
		if r != nil {
			wg.Add(1)
			go func() { defer wg.Done(); r.Close() }()
		}
	}
	wg.Wait()
}

func TestPeerAddrsResolvesFromOwnList(t *testing.T) {
	ps := &peerAddrs{static: []Peer{{ID: "1", RaftAddr: "a:1"}, {ID: "2", RaftAddr: "b:2"}}}
	if a, err := ps.ServerAddr("2"); err != nil || a != "b:2" {
		t.Fatalf("ServerAddr(2) = %q, %v", a, err)
	}
	if _, err := ps.ServerAddr("9"); err == nil {
		t.Fatal("ServerAddr of an unknown id succeeded")
	}
}

// TestPeersDialledAtOwnListAddress proves the default transport dials a
// member at the address in this replica's own Peers list rather than the
// one in the replicated configuration: a cell is bootstrapped on one set
// of ports, then restarted on new ports with each replica's Peers pointing
// at a per-link forwarding proxy. The configuration in the log still names
// the old (now dead) ports, so the cell can only elect and commit if the
// provider is used, and then every byte goes through the proxies.
func TestPeersDialledAtOwnListAddress(t *testing.T) {
	const n = 3
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	ids := []string{"1", "2", "3"}
	open := func(listen []string, peersOf func(i int) []Peer) []*Replica {
		reps := make([]*Replica, n)
		for i := range n {
			r, err := Open(Config{ID: ids[i], Cell: "test", Dir: dirs[i], RaftAddr: listen[i],
				Peers: peersOf(i), Timings: testTimings(), Logger: quietLogger()})
			if err != nil {
				closeAll(reps)
				t.Fatal(err)
			}
			reps[i] = r
		}
		return reps
	}

	first := freeAddrs(t, n)
	reps := open(first, func(int) []Peer {
		var ps []Peer
		for j := range n {
			ps = append(ps, Peer{ID: ids[j], RaftAddr: first[j]})
		}
		return ps
	})
	waitApply(t, reps, 20*time.Second)
	closeAll(reps)

	second := freeAddrs(t, n)
	proxies := make([][]*fwdProxy, n) // proxies[i][j]: the link i -> j
	for i := range n {
		proxies[i] = make([]*fwdProxy, n)
		for j := range n {
			if i != j {
				proxies[i][j] = newFwdProxy(t, second[j])
			}
		}
	}
	reps = open(second, func(i int) []Peer {
		var ps []Peer
		for j := range n {
			addr := second[j]
			if i != j {
				addr = proxies[i][j].Addr()
			}
			ps = append(ps, Peer{ID: ids[j], RaftAddr: addr})
		}
		return ps
	})
	defer closeAll(reps)
	leader := waitApply(t, reps, 20*time.Second)
	li := -1
	for i, r := range reps {
		if r == leader {
			li = i
		}
	}
	// The leader replicates to both followers through its own links.
	for j := range n {
		deadline := time.Now().Add(10 * time.Second)
		for j != li && !proxyHasConns(proxies[li][j]) {
			if time.Now().After(deadline) {
				t.Fatalf("link %d -> %d carried no connection", li, j)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Cutting the leader's links isolates it: nothing bypasses the proxies,
	// and the others elect over theirs.
	for j := range n {
		if j != li {
			proxies[li][j].Close()
			proxies[j][li].Close()
		}
	}
	var others []*Replica
	for i, r := range reps {
		if i != li {
			others = append(others, r)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := applyAtLeader(ctx, others)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the others did not elect a new leader over their own links: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := applyOn(leader); err == nil {
		t.Fatal("the isolated old leader still commits: traffic bypassed the proxies")
	}
}

func proxyHasConns(p *fwdProxy) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) > 0
}

func applyAtLeader(ctx context.Context, reps []*Replica) error {
	for _, r := range reps {
		if r.IsLeader() {
			_, err := r.Apply(ctx, &fsm.Command{Time: time.Now().UnixNano(), Payload: &fsm.EpochArgs{}})
			return err
		}
	}
	return fmt.Errorf("no leader")
}

func applyOn(r *Replica) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.Apply(ctx, &fsm.Command{Time: time.Now().UnixNano(), Payload: &fsm.EpochArgs{}})
	return err
}

var _ raft.ServerAddressProvider = (*peerAddrs)(nil)

// dialOnlyStream is a raft StreamLayer that dials with any TLS
// configuration (or none): an intruder on the Raft port.
type dialOnlyStream struct {
	net.Listener
	cfg *tls.Config
}

func (d dialOnlyStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if d.cfg == nil {
		return net.DialTimeout("tcp", string(address), timeout)
	}
	cfg := d.cfg.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(string(address))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", string(address))
}

// intruderVote sends one harmless RequestVote (term 0) to target's Raft
// port over a transport that dials with cfg.
func intruderVote(t *testing.T, target string, cfg *tls.Config) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: dialOnlyStream{Listener: ln, cfg: cfg}, MaxPool: 1, Timeout: 2 * time.Second,
		Logger: newHCLogger(quietLogger())})
	defer trans.Close()
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax,
		ID: []byte("intruder"), Addr: []byte(ln.Addr().String())}}
	return trans.RequestVote("x", raft.ServerAddress(target), req, &resp)
}

func TestRaftOverMutualTLS(t *testing.T) {
	ca, err := certs.NewCA("raft test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	addrs := freeAddrs(t, n)
	var peers []Peer
	for i := range n {
		peers = append(peers, Peer{ID: strconv.Itoa(i + 1), RaftAddr: addrs[i]})
	}
	peerTLS := func(id string) *tls.Config {
		c, err := ca.IssueReplica(id)
		if err != nil {
			t.Fatal(err)
		}
		return certs.PeerConfig(c.TLS(), ca.Pool())
	}
	reps := make([]*Replica, n)
	defer closeAll(reps)
	for i := range n {
		r, err := Open(Config{ID: peers[i].ID, Cell: "test", Dir: t.TempDir(), RaftAddr: addrs[i], Peers: peers,
			Timings: testTimings(), Logger: quietLogger(), PeerTLS: peerTLS(peers[i].ID), VerifyPeer: certs.VerifyReplica,
			PeerHandshakeTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		reps[i] = r
	}
	leader := waitApply(t, reps, 20*time.Second)
	term := leader.Status().Term
	target := leader.cfg.RaftAddr

	// A genuine replica certificate gets an answer: the probe can reach
	// Raft, so the refusals below are the certificate's doing.
	if err := intruderVote(t, target, peerTLS("9")); err != nil {
		t.Fatalf("a replica certificate was refused: %v", err)
	}
	other, err := certs.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := ca.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.IssueReplica("1")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{
		"user certificate (client config)": certs.ClientConfig(alice.TLS(), ca.Pool()),
		"user certificate (peer config)":   certs.PeerConfig(alice.TLS(), ca.Pool()),
		"replica of another CA":            certs.PeerConfig(foreign.TLS(), ca.Pool()),
		"no certificate":                   {MinVersion: tls.VersionTLS13, RootCAs: ca.Pool()},
		"plain TCP":                        nil,
	} {
		if err := intruderVote(t, target, cfg); err == nil {
			t.Errorf("%s: the Raft port answered", name)
		}
	}
	// A connection that never handshakes is dropped after the timeout.
	c, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("a silent connection was kept open: %v", err)
	}
	c.Close()
	if !leader.IsLeader() || leader.Status().Term != term {
		t.Fatalf("leadership disturbed: leader %v, term %d (was %d)", leader.IsLeader(), leader.Status().Term, term)
	}
	waitApply(t, reps, 10*time.Second)
}

func TestPeerTLSNeedsVerifyPeer(t *testing.T) {
	ca, err := certs.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.IssueReplica("1")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddrs(t, 1)[0]
	_, err = Open(Config{ID: "1", Cell: "test", Dir: t.TempDir(), RaftAddr: addr, Peers: []Peer{{ID: "1", RaftAddr: addr}},
		Logger: quietLogger(), PeerTLS: certs.PeerConfig(c.TLS(), ca.Pool())})
	if err == nil {
		t.Fatal("PeerTLS without VerifyPeer accepted")
	}
	noClientAuth := certs.PeerConfig(c.TLS(), ca.Pool())
	noClientAuth.ClientAuth = tls.NoClientCert
	_, err = Open(Config{ID: "1", Cell: "test", Dir: t.TempDir(), RaftAddr: addr, Peers: []Peer{{ID: "1", RaftAddr: addr}},
		Logger: quietLogger(), PeerTLS: noClientAuth, VerifyPeer: certs.VerifyReplica})
	if err == nil {
		t.Fatal("PeerTLS that does not require client certificates accepted")
	}
}
