package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
)

// ServerConfig is the client port's TLS configuration: the replica
// presents cert and requires a user certificate that roots verify (TLS 1.3
// only). The caller's principal is then PrincipalOf the connection.
func ServerConfig(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientCAs:        roots,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		VerifyConnection: VerifyUser,
	}
}

// ClientConfig is a user's TLS configuration for dialling a cell: it
// presents cert and accepts only a replica certificate that roots verify
// (TLS 1.3 only). ServerName is left empty: lockcell's client sets it per
// connection from the host of the address it dials.
func ClientConfig(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          roots,
		VerifyConnection: VerifyReplica,
	}
}

// PeerConfig is the Raft port's TLS configuration, for both ends of a
// connection: each presents cert and requires the other's to be a replica
// certificate (OU lockcell-replica) that roots verify (TLS 1.3 only). A user
// certificate can never speak Raft (docs/spec.md#the-raft-port). The dialling
// side must set ServerName per connection (replica.Config.PeerTLS does).
func PeerConfig(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          roots,
		ClientCAs:        roots,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		VerifyConnection: VerifyReplica,
	}
}

// verifiedLeaf returns the peer's certificate once the handshake has
// verified its chain, or an error.
func verifiedLeaf(cs *tls.ConnectionState) (*x509.Certificate, error) {
	if cs == nil {
		return nil, errors.New("certs: not a TLS connection")
	}
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, errors.New("certs: the peer presented no verified certificate")
	}
	return cs.VerifiedChains[0][0], nil
}

// VerifyReplica accepts a connection only if the peer's verified
// certificate is a replica certificate. It is PeerConfig's and
// ClientConfig's VerifyConnection, and what cell passes to the replica's
// Raft transport.
func VerifyReplica(cs tls.ConnectionState) error {
	leaf, err := verifiedLeaf(&cs)
	if err != nil {
		return err
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, OUReplica) {
		return fmt.Errorf("%w (subject %q)", ErrNotReplica, leaf.Subject.String())
	}
	return nil
}

// VerifyUser accepts a connection only if the peer's verified certificate
// is a user certificate with a valid principal (ServerConfig's
// VerifyConnection).
func VerifyUser(cs tls.ConnectionState) error {
	leaf, err := verifiedLeaf(&cs)
	if err != nil {
		return err
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, OUUser) {
		return fmt.Errorf("%w (subject %q)", ErrNotUser, leaf.Subject.String())
	}
	_, err = PrincipalOf(&cs)
	return err
}

// PrincipalOf returns the principal of a connection: the Common Name of
// the client certificate the handshake verified. It fails when there is
// none, or when the name is empty or not a valid principal.
func PrincipalOf(cs *tls.ConnectionState) (string, error) {
	leaf, err := verifiedLeaf(cs)
	if err != nil {
		return "", err
	}
	cn := leaf.Subject.CommonName
	if cn == "" {
		return "", errors.New("certs: the client certificate has no Common Name")
	}
	if err := validPrincipal(cn); err != nil {
		return "", err
	}
	return cn, nil
}

// LoadReplicaConfigs reads a replica's certificate, key and CA files and
// returns its client-port (ServerConfig) and Raft-port (PeerConfig)
// configurations.
func LoadReplicaConfigs(certFile, keyFile, caFile string) (server, peer *tls.Config, err error) {
	pair, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	if pair.Leaf == nil || !slices.Contains(pair.Leaf.Subject.OrganizationalUnit, OUReplica) {
		return nil, nil, fmt.Errorf("certs: %s is not a replica certificate (OU %s)", certFile, OUReplica)
	}
	roots, err := LoadPool(caFile)
	if err != nil {
		return nil, nil, err
	}
	return ServerConfig(pair, roots), PeerConfig(pair, roots), nil
}

// ForAddr returns cfg for a connection dialled to addr: cfg itself when
// it names the server, else a copy naming addr's host, so the replica's
// certificate must name the host that was dialled.
func ForAddr(cfg *tls.Config, addr string) (*tls.Config, error) {
	if cfg.ServerName != "" {
		return cfg, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	cfg.ServerName = host
	return cfg, nil
}

// LoadClientConfig reads a user's certificate, key and CA files and
// returns its ClientConfig.
func LoadClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	roots, err := LoadPool(caFile)
	if err != nil {
		return nil, err
	}
	return ClientConfig(pair, roots), nil
}
