package cell

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"sync/atomic"
	"time"

	"lockcell/cell/certs"
)

// CertReloader holds a replica's certificate, key and CA pool as read
// from their files, and reads them again on Reload, so that certificates
// can be renewed without a restart. The TLS configurations it hands out
// (ServerTLS for the client port, PeerTLS for the Raft port) look the
// current certificate up at every handshake: connections made after a
// Reload present the new one, connections already open keep theirs.
//
// The CA file is re-read too and checks the peers of connections this
// replica accepts afterwards, on both ports. Raft connections it dials
// verify the other replicas against the CA pool it started with: a CA
// rotation first adds the new CA to every replica's CA file with a
// rolling restart, and only then issues certificates from it.
type CertReloader struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger
	cur                       atomic.Pointer[certState]
	startRoots                *x509.CertPool
}

// certState is one consistent reading of the three files.
type certState struct {
	pair   *tls.Certificate
	server *tls.Config // the client port's, for GetConfigForClient
	peer   *tls.Config // the Raft port's accepting side, likewise
}

// NewCertReloader reads certFile, keyFile and caFile (as
// certs.LoadReplicaConfigs does) and fails as it does when they are not a
// replica certificate, its key and a CA that signed it.
func NewCertReloader(certFile, keyFile, caFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	st, roots, err := r.read()
	if err != nil {
		return nil, err
	}
	r.cur.Store(st)
	r.startRoots = roots
	return r, nil
}

// read loads and checks the three files: the certificate must be a
// replica certificate, match its key, and verify against the CA file now
// (signed by it and not expired), or other replicas would refuse it.
func (r *CertReloader) read() (*certState, *x509.CertPool, error) {
	pair, err := certs.LoadKeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, nil, err
	}
	if pair.Leaf == nil || !slices.Contains(pair.Leaf.Subject.OrganizationalUnit, certs.OUReplica) {
		return nil, nil, fmt.Errorf("certs: %s is not a replica certificate (OU %s)", r.certFile, certs.OUReplica)
	}
	roots, err := certs.LoadPool(r.caFile)
	if err != nil {
		return nil, nil, err
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("certs: %s does not verify against %s: %w", r.certFile, r.caFile, err)
	}
	return &certState{pair: &pair, server: certs.ServerConfig(pair, roots), peer: certs.PeerConfig(pair, roots)}, roots, nil
}

// Reload reads the files again. On success new connections use the new
// certificate, key and CA pool; on failure (a missing, half-written or
// mismatched file, a certificate the CA does not sign or that has
// expired) the replica keeps what it had, and the error says why.
func (r *CertReloader) Reload() error {
	st, _, err := r.read()
	if err != nil {
		r.log.Error("certificate reload failed; keeping the current certificate", "cert", r.certFile, "err", err,
			"serial", certs.SerialText(r.Leaf().SerialNumber))
		return err
	}
	old := r.Leaf()
	r.cur.Store(st)
	r.log.Info("certificate reloaded", "cert", r.certFile, "serial", certs.SerialText(st.pair.Leaf.SerialNumber),
		"previous_serial", certs.SerialText(old.SerialNumber), "not_after", st.pair.Leaf.NotAfter.Format(time.RFC3339))
	return nil
}

// Leaf is the certificate new connections present now.
func (r *CertReloader) Leaf() *x509.Certificate { return r.cur.Load().pair.Leaf }

// Serial is Leaf's serial number.
func (r *CertReloader) Serial() *big.Int { return r.Leaf().SerialNumber }

// SerialText is Leaf's serial number as openssl shows it (certs.SerialText).
func (r *CertReloader) SerialText() string { return certs.SerialText(r.Leaf().SerialNumber) }

func (r *CertReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load().pair, nil
}

func (r *CertReloader) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.cur.Load().pair, nil
}

// ServerTLS is the client port's configuration (Config.TLS): what
// certs.ServerConfig builds, with the certificate and CA pool of the
// latest successful (Re)load at every handshake.
func (r *CertReloader) ServerTLS() *tls.Config {
	c := r.cur.Load().server.Clone()
	c.Certificates = nil
	c.GetCertificate = r.getCertificate
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().server, nil }
	return c
}

// PeerTLS is the Raft port's configuration (Config.PeerTLS): what
// certs.PeerConfig builds, presenting the certificate of the latest
// successful (Re)load on both ends of a connection. Accepted connections
// check the peer against the latest CA pool and with
// certs.VerifyReplica, the check cell gives the Raft transport; dialled
// ones against the pool read at start.
func (r *CertReloader) PeerTLS() *tls.Config {
	c := r.cur.Load().peer.Clone()
	c.RootCAs = r.startRoots
	c.Certificates = nil
	c.GetCertificate = r.getCertificate
	c.GetClientCertificate = r.getClientCertificate
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().peer, nil }
	return c
}
