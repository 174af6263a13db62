package certs

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"
)

// SerialText formats a certificate serial number the way openssl and
// browsers show it: its bytes in upper-case hex, two digits each,
// separated by colons ("0A:1B:FF"). Without the colons it is exactly
// what `openssl x509 -noout -serial` prints after "serial=", so a serial
// in our logs can be matched against a CA's records or a revocation list.
// A nil serial is "-"; zero is "00"; a negative one (which RFC 5280
// forbids but a parser may accept) is its magnitude after a "-".
func SerialText(n *big.Int) string {
	if n == nil {
		return "-"
	}
	b := n.Bytes()
	if len(b) == 0 {
		b = []byte{0}
	}
	var sb strings.Builder
	if n.Sign() < 0 {
		sb.WriteByte('-')
	}
	for i, x := range b {
		if i > 0 {
			sb.WriteByte(':')
		}
		fmt.Fprintf(&sb, "%02X", x)
	}
	return sb.String()
}

// CertSummary names one certificate file's certificate for an operator.
type CertSummary struct {
	File     string
	Subject  string // the Common Name: a user's principal, a replica's id
	Serial   string // SerialText
	NotAfter time.Time
}

// Summarize reads the first certificate of a PEM file.
func Summarize(file string) (CertSummary, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return CertSummary{}, fmt.Errorf("certs: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return CertSummary{}, fmt.Errorf("certs: %s: no PEM certificate", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return CertSummary{}, fmt.Errorf("certs: %s: %w", file, err)
	}
	return CertSummary{File: file, Subject: c.Subject.CommonName, Serial: SerialText(c.SerialNumber), NotAfter: c.NotAfter}, nil
}
