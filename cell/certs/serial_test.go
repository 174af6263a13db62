package certs

import (
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSerialText checks the format on serials whose openssl form is known:
// upper-case hex bytes, two digits each, colon-separated; a high first
// bit gets no sign byte (openssl prints the magnitude).
func TestSerialText(t *testing.T) {
	for _, c := range []struct {
		n    *big.Int
		want string
	}{
		{big.NewInt(0), "00"},
		{big.NewInt(10), "0A"},
		{big.NewInt(0x0A1BFF), "0A:1B:FF"},
		{big.NewInt(0xFF01), "FF:01"},
		{new(big.Int).Lsh(big.NewInt(1), 64), "01:00:00:00:00:00:00:00:00"},
		{nil, "-"},
	} {
		if got := SerialText(c.n); got != c.want {
			t.Errorf("SerialText(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}

// TestSerialTextMatchesOpenSSL compares SerialText of real certificates,
// the CA's and an issued one (random 127-bit serials, so some start with a
// low nibble that a naive %X would drop), with what `openssl x509 -serial`
// prints for the same files. Skipped without openssl.
func TestSerialTextMatchesOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	for i := range 8 {
		ca, err := NewCA("serial CA", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		u, err := ca.IssueUser("alice")
		if err != nil {
			t.Fatal(err)
		}
		caFile := filepath.Join(dir, "ca.crt")
		if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		userFile, userKey := filepath.Join(dir, "alice.crt"), filepath.Join(dir, "alice.key")
		if err := u.Write(userFile, userKey); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{caFile, userFile} {
			out, err := exec.Command(openssl, "x509", "-noout", "-serial", "-in", f).Output()
			if err != nil {
				t.Fatalf("openssl x509 -serial %s: %v", f, err)
			}
			want := strings.TrimPrefix(strings.TrimSpace(string(out)), "serial=")
			sum, err := Summarize(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(sum.Serial, ":", ""); got != want {
				t.Fatalf("round %d, %s: SerialText %q (without colons %q), openssl says %q", i, f, sum.Serial, got, want)
			}
		}
	}
}
