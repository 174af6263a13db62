package cell_test

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/fixtures"
	"lockcell/wire"
)

// tryTLSMux dials addr from the address from as user and runs one call:
// the session if the replica admitted the connection and answered it.
func tryTLSMux(certs *fixtures.CertSet, t *testing.T, user, from, addr string) (*yamux.Session, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := tls.DialWithDialer(d, "tcp", addr, certs.ClientTLS(t, user))
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
	if code, err := statusCall(sess); err != nil || code != wire.CodeOK {
		sess.Close()
		if err == nil {
			err = wire.Errorf(code, "answered %v", code)
		}
		return nil, err
	}
	return sess, nil
}

// The client port's connection caps per address, per principal and for
// the replica hold exactly when connections race for them: each burst of
// concurrent dials gets exactly the room its cap leaves, the refusals are
// counted by the cap that bound, and a closed connection gives its place
// back.
func TestClientConnCapsAreExactUnderConcurrency(t *testing.T) {
	const perIP, perPrincipal, total, burst = 6, 10, 14, 12
	certs := fixtures.TestCerts(t, "mallory", "trudy")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, LeaseTTL: tlsLease, ConnLimits: cell.ConnLimits{
		MaxConnsPerIP: perIP, MaxConnsPerPrincipal: perPrincipal, MaxConns: total}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	addr := srv.ClientAddr()
	base := srv.ConnStats()
	var held []*yamux.Session
	t.Cleanup(func() {
		for _, s := range held {
			s.Close()
		}
	})
	race := func(user string, from ...string) int {
		t.Helper()
		var mu sync.Mutex
		var wg sync.WaitGroup
		n := 0
		for i := range burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sess, err := tryTLSMux(certs, t, user, from[i%len(from)], addr); err == nil {
					mu.Lock()
					held = append(held, sess)
					n++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return n
	}
	// One address: its cap.
	if n := race("mallory", "127.0.0.2"); n != perIP {
		t.Fatalf("%d of %d racing connections from one address admitted; its cap is %d", n, burst, perIP)
	}
	// The same principal from another address: what its cap leaves.
	if n := race("mallory", "127.0.0.3"); n != perPrincipal-perIP {
		t.Fatalf("%d of %d racing connections of the principal from a second address admitted; want %d", n, burst, perPrincipal-perIP)
	}
	// Another principal from two more addresses: what the replica's cap
	// leaves.
	if n := race("trudy", "127.0.0.4", "127.0.0.5"); n != total-perPrincipal {
		t.Fatalf("%d of %d racing connections of a second principal admitted; want %d (the replica's cap)", n, burst, total-perPrincipal)
	}
	st := srv.ConnStats()
	// Each of the first two bursts came from one address: the address's
	// cap refused half of each before the principal's was asked.
	if d := st.RefusedPerIP - base.RefusedPerIP; d != 2*(burst-perIP) {
		t.Errorf("%d refused at the address's cap, want %d", d, 2*(burst-perIP))
	}
	if d := st.RefusedPerPrincipal - base.RefusedPerPrincipal; d != perIP-(perPrincipal-perIP) {
		t.Errorf("%d refused at the principal's cap, want %d", d, perIP-(perPrincipal-perIP))
	}
	if d := st.RefusedTotal - base.RefusedTotal; d != burst-(total-perPrincipal) {
		t.Errorf("%d refused at the replica's cap, want %d", d, burst-(total-perPrincipal))
	}
	if st.Conns != total {
		t.Errorf("the replica counts %d connections, want %d", st.Conns, total)
	}
	// The held connections all work; closing one of trudy's frees one
	// place in all (the replica notices asynchronously).
	for i, s := range held {
		if code, err := statusCall(s); err != nil || code != wire.CodeOK {
			t.Fatalf("held connection %d: %v %v", i, code, err)
		}
	}
	held[len(held)-1].Close()
	held = held[:len(held)-1]
	deadline := time.Now().Add(hostileWait)
	for {
		sess, err := tryTLSMux(certs, t, "trudy", "127.0.0.6", addr)
		if err == nil {
			held = append(held, sess)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection's place was never given back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if n := race("trudy", "127.0.0.7"); n != 0 {
		t.Fatalf("%d connections admitted past the replica's cap", n)
	}
}
