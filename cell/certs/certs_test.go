package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA", time.Hour*24)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// handshake runs a TLS handshake over loopback TCP between a server and a
// client configuration and returns each side's error and the server's view
// of the connection.
func handshake(t *testing.T, server, client *tls.Config) (serr, cerr error, scs tls.ConnectionState) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		err error
		cs  tls.ConnectionState
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{err: err}
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = tc.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3 clients learn of a rejected certificate on their
			// first read: answer one byte so the client sees success.
			tc.Write([]byte{1})
		}
		done <- res{err, tc.ConnectionState()}
	}()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: client}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, cerr := d.DialContext(ctx, "tcp", ln.Addr().String())
	if cerr == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		_, cerr = c.Read(b[:])
		c.Close()
	}
	r := <-done
	return r.err, cerr, r.cs
}

func TestUserAndReplicaHandshake(t *testing.T) {
	ca := mustCA(t)
	rep := must[*Cert](t)(ca.IssueReplica("1"))
	alice := must[*Cert](t)(ca.IssueUser("alice"))
	serr, cerr, cs := handshake(t, ServerConfig(rep.TLS(), ca.Pool()), ClientConfig(alice.TLS(), ca.Pool()))
	if serr != nil || cerr != nil {
		t.Fatalf("good user refused: server %v, client %v", serr, cerr)
	}
	if cs.Version != tls.VersionTLS13 {
		t.Fatalf("version %x, want TLS 1.3", cs.Version)
	}
	if p, err := PrincipalOf(&cs); err != nil || p != "alice" {
		t.Fatalf("PrincipalOf = %q, %v; want alice", p, err)
	}
	// Replicas speak Raft with each other.
	rep2 := must[*Cert](t)(ca.IssueReplica("2", WithHosts("db.example", "10.1.2.3")))
	if !slices.Contains(rep2.Leaf.DNSNames, "db.example") || len(rep2.Leaf.IPAddresses) != 3 {
		t.Fatalf("SANs %v %v", rep2.Leaf.DNSNames, rep2.Leaf.IPAddresses)
	}
	if rep2.Leaf.Subject.CommonName != "replica-2" || !slices.Contains(rep2.Leaf.Subject.OrganizationalUnit, OUReplica) {
		t.Fatalf("replica subject %v", rep2.Leaf.Subject)
	}
	serr, cerr, _ = handshake(t, PeerConfig(rep.TLS(), ca.Pool()), PeerConfig(rep2.TLS(), ca.Pool()))
	if serr != nil || cerr != nil {
		t.Fatalf("peers refused each other: %v, %v", serr, cerr)
	}
}

func TestRefusedCertificates(t *testing.T) {
	ca := mustCA(t)
	other := mustCA(t)
	rep := must[*Cert](t)(ca.IssueReplica("1"))
	now := time.Now()
	cases := map[string]*tls.Config{
		"no certificate":      {MinVersion: tls.VersionTLS13, RootCAs: ca.Pool()},
		"another CA":          ClientConfig(must[*Cert](t)(other.IssueUser("alice")).TLS(), ca.Pool()),
		"expired":             ClientConfig(must[*Cert](t)(ca.IssueUser("alice", WithValidity(now.Add(-2*time.Hour), now.Add(-time.Hour)))).TLS(), ca.Pool()),
		"not yet valid":       ClientConfig(must[*Cert](t)(ca.IssueUser("alice", WithValidity(now.Add(time.Hour), now.Add(2*time.Hour)))).TLS(), ca.Pool()),
		"replica on client":   ClientConfig(must[*Cert](t)(ca.IssueReplica("2")).TLS(), ca.Pool()),
		"TLS 1.2 only client": {MaxVersion: tls.VersionTLS12, Certificates: []tls.Certificate{must[*Cert](t)(ca.IssueUser("bob")).TLS()}, RootCAs: ca.Pool()},
	}
	for name, cc := range cases {
		t.Run(name, func(t *testing.T) {
			serr, cerr, _ := handshake(t, ServerConfig(rep.TLS(), ca.Pool()), cc)
			if serr == nil || cerr == nil {
				t.Fatalf("handshake not refused: server %v, client %v", serr, cerr)
			}
		})
	}
	// A user certificate never speaks Raft, dialling or answering.
	alice := must[*Cert](t)(ca.IssueUser("alice"))
	serr, cerr, _ := handshake(t, PeerConfig(rep.TLS(), ca.Pool()), PeerConfig(alice.TLS(), ca.Pool()))
	if serr == nil || cerr == nil {
		t.Fatalf("user dialled the Raft port: %v, %v", serr, cerr)
	}
	serr, cerr, _ = handshake(t, PeerConfig(rep.TLS(), ca.Pool()), ClientConfig(alice.TLS(), ca.Pool()))
	if serr == nil || cerr == nil {
		t.Fatalf("user with its client config dialled the Raft port: %v, %v", serr, cerr)
	}
	// The user's config refuses a server that is not a replica.
	_, cerr, _ = handshake(t, &tls.Config{Certificates: []tls.Certificate{alice.TLS()}}, ClientConfig(alice.TLS(), ca.Pool()))
	if cerr == nil {
		t.Fatal("a client accepted a user certificate as a replica")
	}
}

func TestPrincipalOfNeedsAVerifiedName(t *testing.T) {
	if _, err := PrincipalOf(nil); err == nil {
		t.Fatal("nil connection state has a principal")
	}
	if _, err := PrincipalOf(&tls.ConnectionState{}); err == nil {
		t.Fatal("unverified connection has a principal")
	}
	ca := mustCA(t)
	for _, bad := range []string{"", "a b", "*", "anonymous", "#x", "caf\u00e9"} {
		if _, err := ca.IssueUser(bad); err == nil {
			t.Errorf("IssueUser(%q) succeeded", bad)
		}
	}
	// A certificate with an empty Common Name (not one IssueUser makes).
	c := must[*Cert](t)(ca.IssueUser("x"))
	leaf := *c.Leaf
	leaf.Subject.CommonName = ""
	if _, err := PrincipalOf(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{&leaf}}}); err == nil {
		t.Fatal("empty Common Name accepted")
	}
}

func TestWriteDevSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteDevSet(dir, []string{"1", "2"}, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "replica-1.crt", "replica-1.key", "replica-2.crt", "replica-2.key",
		"admin.crt", "admin.key", "alice.crt", "alice.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(f) == ".key" && st.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	caPEM, _ := os.ReadFile(CAFile(dir))
	alicePEM, _ := os.ReadFile(filepath.Join(dir, "alice.crt"))
	// Again with another user: the CA and existing certificates stay.
	if err := WriteDevSet(dir, []string{"1", "2"}, "bob"); err != nil {
		t.Fatal(err)
	}
	caPEM2, _ := os.ReadFile(CAFile(dir))
	alicePEM2, _ := os.ReadFile(filepath.Join(dir, "alice.crt"))
	if !bytes.Equal(caPEM, caPEM2) || !bytes.Equal(alicePEM, alicePEM2) {
		t.Fatal("rewriting the set replaced existing files")
	}
	server, peer, err := LoadReplicaConfigs(filepath.Join(dir, "replica-1.crt"), filepath.Join(dir, "replica-1.key"), CAFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	bobCert, bobKey := UserFiles(dir, "bob")
	bob, err := LoadClientConfig(bobCert, bobKey, CAFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	serr, cerr, cs := handshake(t, server, bob)
	if serr != nil || cerr != nil {
		t.Fatalf("bob refused: %v %v", serr, cerr)
	}
	if p, _ := PrincipalOf(&cs); p != "bob" {
		t.Fatalf("principal %q, want bob", p)
	}
	_, peer2, err := LoadReplicaConfigs(filepath.Join(dir, "replica-2.crt"), filepath.Join(dir, "replica-2.key"), CAFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr, _ := handshake(t, peer, peer2); serr != nil || cerr != nil {
		t.Fatalf("replicas refused each other: %v %v", serr, cerr)
	}
	if _, _, err := LoadReplicaConfigs(bobCert, bobKey, CAFile(dir)); err == nil {
		t.Fatal("a user certificate loaded as a replica's")
	}
	for _, bad := range []string{"../x", "replica-9", "ca", ".hidden"} {
		if err := WriteDevSet(dir, nil, bad); err == nil {
			t.Errorf("user %q accepted", bad)
		}
	}
	if err := os.Remove(CAKeyFile(dir)); err != nil {
		t.Fatal(err)
	}
	if err := WriteDevSet(dir, []string{"1"}); err == nil {
		t.Fatal("half a CA accepted")
	}
}
