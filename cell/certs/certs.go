// Package certs is lockcell's identity plumbing for mutual TLS
// (docs/spec.md#identity, #the-raft-port): a development certificate
// authority, replica and user certificates (ECDSA P-256, crypto/x509), PEM
// files, and the *tls.Config of each kind of connection:
//
//   - the client port (ServerConfig): the replica presents its replica
//     certificate and requires a user certificate signed by the CA; the
//     caller's principal is the certificate's Common Name (PrincipalOf);
//   - users dialling a cell (ClientConfig): they present their user
//     certificate and verify the replica's against the CA;
//   - the Raft port (PeerConfig): both ends present a replica certificate
//     (Organizational Unit "lockcell-replica") signed by the CA, so a user
//     certificate can never speak Raft.
//
// All configurations require TLS 1.3.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lockcell/acl"
)

// Organizational Units that say what a certificate is for.
const (
	// OUReplica marks a replica certificate: the only kind the Raft port
	// accepts, on either end.
	OUReplica = "lockcell-replica"
	// OUUser marks a user certificate: the only kind the client port
	// accepts. Its Common Name is the principal.
	OUUser = "lockcell-user"
	// OUCA marks the certificate authority.
	OUCA = "lockcell-ca"
)

// AdminUser is the user every development set has a certificate for, and
// the default admin principal of a cell with TLS.
const AdminUser = "admin"

// DefaultLeafValidity is how long issued certificates last unless an
// option says otherwise (never past the CA's own end).
const DefaultLeafValidity = 365 * 24 * time.Hour

// ErrNotReplica is returned when a Raft peer's verified certificate is not
// a replica certificate.
var ErrNotReplica = errors.New("certs: peer certificate is not a lockcell replica certificate")

// ErrNotUser is returned when a client's verified certificate is not a
// user certificate.
var ErrNotUser = errors.New("certs: client certificate is not a lockcell user certificate")

// CA is a certificate authority: its certificate and private key.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key signs the certificates the CA issues.
	Key *ecdsa.PrivateKey
}

// Cert is an issued certificate with its private key.
type Cert struct {
	// Leaf is the certificate.
	Leaf *x509.Certificate
	// Key is its private key.
	Key *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA named name, valid from an hour ago (to
// tolerate clock skew) for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	if name == "" {
		return nil, errors.New("certs: CA needs a name")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("certs: CA validity %v is not positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, OrganizationalUnit: []string{OUCA}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// Pool returns a pool holding only this CA, for verifying peers.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertPEM returns the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte { return certPEM(ca.Cert) }

// issueOpts are what Options set.
type issueOpts struct {
	notBefore, notAfter time.Time
	hosts               []string
}

// Option adjusts a certificate being issued.
type Option func(*issueOpts)

// WithValidity sets the certificate's NotBefore and NotAfter exactly
// (tests use it to make expired and not-yet-valid certificates).
func WithValidity(notBefore, notAfter time.Time) Option {
	return func(o *issueOpts) { o.notBefore, o.notAfter = notBefore, notAfter }
}

// WithHosts adds host names or IP addresses to a replica certificate's
// subject alternative names (127.0.0.1, ::1 and localhost are always in).
func WithHosts(hosts ...string) Option {
	return func(o *issueOpts) { o.hosts = append(o.hosts, hosts...) }
}

// IssueReplica issues the certificate of replica id: Common Name
// "replica-<id>", OU lockcell-replica, usable as both TLS server and
// client (Raft connections go both ways), for 127.0.0.1, ::1, localhost
// and the WithHosts names.
func (ca *CA) IssueReplica(id string, opts ...Option) (*Cert, error) {
	if id == "" || strings.ContainsAny(id, " /\\\x00") {
		return nil, fmt.Errorf("certs: bad replica id %q", id)
	}
	o := ca.options(opts)
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "replica-" + id, OrganizationalUnit: []string{OUReplica}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range o.hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl, o)
}

// IssueUser issues the certificate of user name: Common Name name (the
// principal the cell sees), OU lockcell-user, usable only as a TLS client.
// name must be a valid principal (acl.ValidPrincipal) and not "anonymous",
// which is the one principal of a cell without TLS.
func (ca *CA) IssueUser(name string, opts ...Option) (*Cert, error) {
	if err := validPrincipal(name); err != nil {
		return nil, err
	}
	o := ca.options(opts)
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, OrganizationalUnit: []string{OUUser}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue(tmpl, o)
}

// anonymous is master.AnonymousPrincipal, the principal of every caller of
// a cell without TLS; no certificate may claim it.
const anonymous = "anonymous"

func validPrincipal(name string) error {
	if err := acl.ValidPrincipal(name); err != nil {
		return fmt.Errorf("certs: user name: %w", err)
	}
	if name == acl.Wildcard || name == anonymous {
		return fmt.Errorf("certs: %q is reserved and cannot be a certificate's principal", name)
	}
	return nil
}

func (ca *CA) options(opts []Option) issueOpts {
	now := time.Now()
	o := issueOpts{notBefore: now.Add(-time.Hour), notAfter: now.Add(DefaultLeafValidity)}
	if o.notAfter.After(ca.Cert.NotAfter) {
		o.notAfter = ca.Cert.NotAfter
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (ca *CA) issue(tmpl *x509.Certificate, o issueOpts) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = o.notBefore, o.notAfter
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: issue %s: %w", tmpl.Subject.CommonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Cert{Leaf: leaf, Key: key}, nil
}

// CertPEM returns the certificate in PEM form.
func (c *Cert) CertPEM() []byte { return certPEM(c.Leaf) }

// KeyPEM returns the private key in PEM form (PKCS #8).
func (c *Cert) KeyPEM() ([]byte, error) { return keyPEM(c.Key) }

// TLS returns the certificate and key as a tls.Certificate.
func (c *Cert) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Leaf.Raw}, PrivateKey: c.Key, Leaf: c.Leaf}
}

// Write stores the certificate (mode 0644) and key (mode 0600) as PEM.
func (c *Cert) Write(certFile, keyFile string) error {
	k, err := c.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeFile(keyFile, k, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, c.CertPEM(), 0o644)
}

// Write stores the CA certificate (mode 0644) and key (mode 0600) as PEM.
func (ca *CA) Write(certFile, keyFile string) error {
	k, err := keyPEM(ca.Key)
	if err != nil {
		return err
	}
	if err := writeFile(keyFile, k, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, ca.CertPEM(), 0o644)
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certs: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFile writes data to a temporary file in the same folder with mode
// perm and renames it into place, so a reader never sees half a key and a
// key is never readable by others, even for a moment.
func writeFile(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-"+filepath.Base(name)+"-*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

// LoadCA reads a CA certificate and its key written by CA.Write.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: load CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: CA key in %s is %T, not ECDSA", keyFile, pair.PrivateKey)
	}
	if pair.Leaf == nil || !pair.Leaf.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: pair.Leaf, Key: key}, nil
}

// LoadPool reads the PEM certificates of caFile into a pool.
func LoadPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("certs: no PEM certificate in %s", caFile)
	}
	return p, nil
}

// LoadKeyPair reads a certificate and its key written by Cert.Write.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: load %s: %w", certFile, err)
	}
	return pair, nil
}
