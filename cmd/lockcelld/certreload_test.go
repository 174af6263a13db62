package main

import (
	"context"
	"crypto/tls"
	"math/big"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// servedSerial makes a new TLS connection to addr with cfg and returns the
// serial number of the certificate the server presented.
func servedSerial(addr string, cfg *tls.Config) (*big.Int, error) {
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// waitSerial polls new TLS connections to addr until the server presents
// want, or fails the test.
func waitSerial(t *testing.T, what, addr string, cfg *tls.Config, want *big.Int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got *big.Int
	var err error
	for time.Now().Before(deadline) {
		if got, err = servedSerial(addr, cfg); err == nil && got.Cmp(want) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s %s: serial %v (err %v), want %v", what, addr, got, err, want)
}

// A replica re-reads its certificate and key on SIGHUP: new connections
// on the client port and on the Raft port see the new certificate, while
// a client connected before keeps working, the master's new Raft
// connections (to a restarted follower) are accepted, and a broken file
// is refused and logged with the previous certificate kept.
func TestServeReloadsCertificatesOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t)
	pc := fixtures.NewProcCellWith(t, bin, "hup", 3, 8*time.Second, fixtures.ProcOptions{TLS: set})
	mi := pc.MasterIndex(60 * time.Second)
	peers := pc.Peers()
	id := peers[mi].ID
	other := (mi + 1) % 3
	userTLS := set.ClientTLS(t, "admin")
	_, peerTLS := set.ReplicaTLS(t, peers[other].ID) // dials the Raft port as another replica

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := cl.Open(ctx, pc.Name("f"), client.Create|client.Write|client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}

	cf, kf := certs.ReplicaFiles(set.Dir, id)
	oldSerial, err := servedSerial(peers[mi].ClientAddr, userTLS)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := set.CA.IssueReplica(id)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Leaf.SerialNumber.Cmp(oldSerial) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if err := fresh.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	if s, err := servedSerial(peers[mi].ClientAddr, userTLS); err != nil || s.Cmp(oldSerial) != 0 {
		t.Fatalf("before SIGHUP the replica serves serial %v (%v), want the old %v: files are read on SIGHUP only", s, err, oldSerial)
	}
	if err := syscall.Kill(pc.PID(mi), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, "client port", peers[mi].ClientAddr, userTLS, fresh.Leaf.SerialNumber)
	waitSerial(t, "Raft port", peers[mi].RaftAddr, peerTLS, fresh.Leaf.SerialNumber)

	// The client connected before the reload keeps working on its
	// connection, and a new client connects.
	if err := h.SetContents(ctx, []byte("after")); err != nil {
		t.Fatalf("write of a client connected before the reload: %v", err)
	}
	cl2, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatalf("a new client after the reload: %v", err)
	}
	defer cl2.Close()
	h2, err := cl2.Open(ctx, pc.Name("f"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := h2.GetContentsAndStat(ctx); err != nil || string(b) != "after" {
		t.Fatalf("new client reads %q, %v", b, err)
	}

	// A restarted follower is reached over new Raft connections, on
	// which the master presents its new certificate.
	if pm := pc.MasterIndex(30 * time.Second); pm != mi {
		t.Fatalf("master moved from %d to %d during the test", mi, pm)
	}
	pc.Restart(other)
	if err := h.SetContents(ctx, []byte("after restart")); err != nil {
		t.Fatal(err)
	}
	mst, err := admin.QueryStatusWith(ctx, pc.ClientConfig(), peers[mi].ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := admin.QueryStatusWith(ctx, pc.ClientConfig(), peers[other].ClientAddr)
		if err == nil && st.AppliedIndex >= mst.CommitIndex {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted follower never caught up with the reloaded master: %+v %v (master commit %d)\n%s",
				st, err, mst.CommitIndex, pc.Log(mi))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A broken file is refused: logged, and the current certificate kept.
	if err := os.WriteFile(cf, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pc.PID(mi), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(pc.Log(mi), "certificate reload failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed reload logged:\n%s", pc.Log(mi))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, err := servedSerial(peers[mi].ClientAddr, userTLS); err != nil || s.Cmp(fresh.Leaf.SerialNumber) != 0 {
		t.Fatalf("after a bad file the replica serves %v (%v), want the last good %v", s, err, fresh.Leaf.SerialNumber)
	}
	if err := h.SetContents(ctx, []byte("still")); err != nil {
		t.Fatal(err)
	}
}
