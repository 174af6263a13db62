package cell_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/wire"
)

// Mutual TLS on the client and Raft ports, and the client port's
// connection limits, over real TCP against real cells.

// tlsLease is long enough that a loaded 2-core machine expires no session
// by accident: these tests are about connections, not leases.
const tlsLease = 8 * time.Second

// clientWorks proves cl is served: it makes a call the master answers
// (never from the cache) and, as the admin, writes a file and reads it
// back.
func clientWorks(t *testing.T, c *fixtures.Cell, cl *client.Client, admin bool) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	if _, err := lcadmin.New(cl).Sessions(ctx); err != nil {
		t.Fatalf("list sessions: %v", err)
	}
	if !admin {
		return
	}
	h, err := cl.Open(ctx, c.Name("works"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer h.Close()
	data := time.Now().String()
	if err := h.SetContents(ctx, []byte(data)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, _, err := h.GetContentsAndStat(ctx)
	if err != nil || string(got) != data {
		t.Fatalf("read back: %q %v", got, err)
	}
}

func TestTLSPrincipalIsCertificateName(t *testing.T) {
	set := fixtures.TestCerts(t, "alice", "bob")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: tlsLease})
	ctx := ctxT(t, 60*time.Second)
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	clientWorks(t, c, c.Client(t), true) // the admin
	clientWorks(t, c, alice, false)
	// The admin sees every session under its principal; bob sees only
	// his own principal's.
	sessions, err := lcadmin.New(c.Client(t)).Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{alice.Session(): "alice", bob.Session(): "bob"}
	for _, s := range sessions {
		if p, ok := want[s.ID]; ok {
			if s.Principal != p {
				t.Fatalf("session %d shows principal %q, want %q", s.ID, s.Principal, p)
			}
			delete(want, s.ID)
		}
	}
	if len(want) != 0 {
		t.Fatalf("sessions %v not listed in %+v", want, sessions)
	}
	if sessions, err = lcadmin.New(bob).Sessions(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || sessions[0].ID != bob.Session() || sessions[0].Principal != "bob" {
		t.Fatalf("bob's session list: %+v, want his session %d alone", sessions, bob.Session())
	}
	// A status query needs TLS too.
	if _, err := lcadmin.QueryStatusWith(ctx, c.ClientConfigAs("alice"), c.Addrs()[0]); err != nil {
		t.Fatalf("status over TLS: %v", err)
	}
}

func TestTLSRefusesBadClientCertificates(t *testing.T) {
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{HandshakeTimeout: 2 * time.Second}})
	mi := c.WaitForMaster(30 * time.Second)
	_, epoch := c.Server(mi).IsMaster()
	good := c.ClientWith(t, c.ClientConfigAs("alice"))
	clientWorks(t, c, good, false)

	other, err := certs.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	replicaCert, err := set.CA.IssueReplica("7")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := []struct {
		name    string
		tls     *tls.Config
		refused bool // the replica's refusal reaches the client as such, at once
	}{
		{"no certificate", &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: set.CA.Pool()}, true},
		{"another CA", set.ClientTLSWith(foreign), true},
		{"expired", set.ClientTLSWith(set.User(t, "alice", certs.WithValidity(now.Add(-48*time.Hour), now.Add(-24*time.Hour)))), true},
		{"not yet valid", set.ClientTLSWith(set.User(t, "alice", certs.WithValidity(now.Add(24*time.Hour), now.Add(48*time.Hour)))), true},
		{"replica certificate", set.ClientTLSWith(replicaCert), true},
		{"no TLS at all", nil, false},
	}
	before := c.Server(mi).ConnStats().FailedHandshakes
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := c.ClientConfig()
			cfg.TLS = tc.tls
			cfg.RetryTimeout = 3 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			cl, err := client.Dial(ctx, cfg)
			if err == nil {
				cl.Close()
				t.Fatal("Dial succeeded")
			}
			if tc.refused != errors.Is(err, client.ErrCertificateRefused) {
				t.Fatalf("error %v; want ErrCertificateRefused: %v", err, tc.refused)
			}
			if el := time.Since(start); el > 15*time.Second {
				t.Fatalf("refusal took %v", el)
			}
			t.Logf("%s: %v (%v)", tc.name, err, time.Since(start).Round(time.Millisecond))
		})
	}
	if got := c.Server(mi).ConnStats().FailedHandshakes; got <= before {
		t.Fatalf("FailedHandshakes %d, was %d: refusals not counted", got, before)
	}
	// The good client was never disturbed, nor was the master.
	clientWorks(t, c, good, false)
	if ok, e := c.Server(mi).IsMaster(); !ok || e != epoch {
		t.Fatalf("master changed: serving %v, epoch %d (was %d)", ok, e, epoch)
	}
}

func TestTLSRaftPortRefusesUserCertificate(t *testing.T) {
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: tlsLease})
	mi := c.WaitForMaster(30 * time.Second)
	_, epoch := c.Server(mi).IsMaster()
	term := c.Server(mi).Replica().Status().Term
	good := c.ClientWith(t, c.ClientConfigAs("alice"))
	clientWorks(t, c, good, false)
	raftAddr := c.Options().Peers[mi].RaftAddr

	userTLS := set.ClientTLS(t, "alice")
	userTLS.ServerName = "127.0.0.1"
	// The user's certificate as a Raft peer would present it.
	aliceCert, err := tls.LoadX509KeyPair(set.UserFiles(t, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	asPeer := certs.PeerConfig(aliceCert, set.CA.Pool())
	asPeer.ServerName = "127.0.0.1"
	for name, cfg := range map[string]*tls.Config{"client config": userTLS, "peer config": asPeer} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr, cfg)
		if err != nil {
			t.Logf("%s: handshake refused: %v", name, err)
			continue
		}
		// TLS 1.3: the replica's verdict on our certificate comes with the
		// first read. Speak Raft (rpcType byte 0: AppendEntries) and expect
		// nothing back.
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		conn.Write([]byte{0, 0x80})
		n, err := conn.Read(make([]byte, 64))
		conn.Close()
		if err == nil || n > 0 {
			t.Fatalf("%s: the Raft port answered a user certificate (%d bytes, %v)", name, n, err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the Raft port kept a user certificate's connection open", name)
		}
		t.Logf("%s: refused: %v", name, err)
	}
	// Plain TCP gets nothing either.
	conn, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{0, 0x80})
	if n, err := io.ReadAll(conn); len(n) > 0 || err != nil {
		t.Fatalf("plain TCP on the Raft port: %d bytes back, %v", len(n), err)
	}
	conn.Close()
	if ok, e := c.Server(mi).IsMaster(); !ok || e != epoch || c.Server(mi).Replica().Status().Term != term {
		t.Fatalf("leadership disturbed: serving %v, epoch %d (was %d), term %d (was %d)", ok, e, epoch,
			c.Server(mi).Replica().Status().Term, term)
	}
	clientWorks(t, c, good, false)
}

// expectClosedWithin reads conn until the server closes it and fails if
// that takes longer than within.
func expectClosedWithin(t *testing.T, conn net.Conn, what string, within time.Duration) {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(within + 5*time.Second))
	io.Copy(io.Discard, conn)
	if el := time.Since(start); el > within {
		t.Fatalf("%s: closed after %v, want within %v", what, el, within)
	}
}

func TestSlowLorisIsDropped(t *testing.T) {
	set := fixtures.TestCerts(t)
	const deadline = time.Second
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set, LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{HandshakeTimeout: deadline}})
	addr := c.Addrs()[0]
	within := deadline + 2*time.Second

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A ClientHello that never finishes: a TLS record header promising
	// 512 bytes, and a few of them.
	partial, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	partial.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03})
	// A completed handshake that never sends the protocol byte.
	noByte, err := tls.Dial("tcp", addr, withServerName(set.ClientTLS(t, "admin"), "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer noByte.Close()
	for name, conn := range map[string]net.Conn{"silent TCP": silent, "half a ClientHello": partial, "no protocol byte": noByte} {
		expectClosedWithin(t, conn, name, within) // the waits overlap: each started at dial
	}
	// Meanwhile and after, a client is served.
	cl := c.Client(t)
	clientWorks(t, c, cl, true)
}

func withServerName(cfg *tls.Config, name string) *tls.Config {
	cfg = cfg.Clone()
	cfg.ServerName = name
	return cfg
}

// rawMux opens a yamux session to addr (plain TCP) from the local IP from.
func rawMux(t *testing.T, from, addr string) (*yamux.Session, error) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte{wire.RPCMultiplex}); err != nil {
		conn.Close()
		return nil, err
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.StreamOpenTimeout = 5 * time.Second
	cfg.ConnectionWriteTimeout = 5 * time.Second
	sess, err := yamux.Client(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	t.Cleanup(func() { sess.Close() })
	return sess, nil
}

// statusCall runs CellStatus on a new stream of sess and returns the
// answer's code, or an error when no answer came.
func statusCall(sess *yamux.Session) (wire.Code, error) {
	s, err := sess.OpenStream()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	if err := wire.WriteMessage(s, &wire.Header{Method: wire.MethodCellStatus}, &wire.CellStatusRequest{}); err != nil {
		return 0, err
	}
	var st wire.Status
	if err := wire.ReadMessage(s, &st); err != nil {
		return 0, err
	}
	if _, err := wire.ReadFrame(s); err != nil {
		return 0, err
	}
	return st.Code, nil
}

func TestConnectionsPerIPAreCapped(t *testing.T) {
	const max = 8
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{MaxConnsPerIP: max}})
	srv := c.Server(0)
	addr := c.Addrs()[0]
	var held []*yamux.Session
	for i := range max {
		sess, err := rawMux(t, "127.0.0.1", addr)
		if err != nil {
			t.Fatal(err)
		}
		if code, err := statusCall(sess); err != nil || code != wire.CodeOK {
			t.Fatalf("connection %d of %d: %v %v", i+1, max, code, err)
		}
		held = append(held, sess)
	}
	// One more from the same address is closed at once, without answer.
	extra, err := rawMux(t, "127.0.0.1", addr)
	if err == nil {
		if code, err := statusCall(extra); err == nil {
			t.Fatalf("connection %d answered %v", max+1, code)
		}
	}
	if srv.ConnStats().RefusedPerIP == 0 {
		t.Fatal("refusal not counted")
	}
	// Another address is not affected (Linux routes all of 127/8 to lo).
	if other, err := rawMux(t, "127.0.0.2", addr); err != nil {
		t.Logf("cannot dial from 127.0.0.2 (%v); skipping that check", err)
	} else if code, err := statusCall(other); err != nil || code != wire.CodeOK {
		t.Fatalf("a connection from 127.0.0.2 was refused: %v %v", code, err)
	}
	// The held connections keep working.
	for i, sess := range held {
		if code, err := statusCall(sess); err != nil || code != wire.CodeOK {
			t.Fatalf("held connection %d: %v %v", i, code, err)
		}
	}
	// Closing one frees its slot (the server notices asynchronously).
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sess, err := rawMux(t, "127.0.0.1", addr)
		if err == nil {
			if code, err := statusCall(sess); err == nil && code == wire.CodeOK {
				break
			}
			sess.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed connection's slot was never freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStreamsPerConnectionAreCapped(t *testing.T) {
	const max = 16
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{MaxStreamsPerConn: max}})
	srv := c.Server(0)
	addr := c.Addrs()[0]
	hog, err := rawMux(t, "", addr)
	if err != nil {
		t.Fatal(err)
	}
	// max streams that stall mid-request hold every slot.
	var stalled []*yamux.Stream
	for range max {
		s, err := hog.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		s.Write([]byte{0, 0, 0, 9, 0x85})
		stalled = append(stalled, s)
	}
	// The next call on that connection is answered TooMany (polling: the
	// server may not have accepted every stalled stream yet).
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, err := statusCall(hog)
		if err != nil {
			t.Fatalf("over the cap: no answer: %v", err)
		}
		if code == wire.CodeTooMany {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("over the cap: %v, want %v", code, wire.CodeTooMany)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if srv.ConnStats().RefusedStreams == 0 {
		t.Fatal("refused stream not counted")
	}
	// Other connections are not affected, and a client works.
	other, err := rawMux(t, "", addr)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := statusCall(other); err != nil || code != wire.CodeOK {
		t.Fatalf("another connection: %v %v", code, err)
	}
	cl := c.Client(t)
	clientWorks(t, c, cl, true)
	// Freed slots serve again on the same connection.
	for _, s := range stalled {
		s.Close()
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, err := statusCall(hog)
		if err == nil && code == wire.CodeOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing the stalled streams: %v %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
