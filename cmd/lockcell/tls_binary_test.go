package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// TestBinaryTLS runs the real lockcell binary against a cell with mutual
// TLS: --cert/--key/--ca, the LOCKCELL_CERT/KEY/CA environment, and what
// happens without them.
func TestBinaryTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: 8 * time.Second})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	adminCert, adminKey := set.UserFiles(t, "admin")
	aliceCert, aliceKey := set.UserFiles(t, "alice")
	asAdmin := append([]string{"--cert", adminCert, "--key", adminKey, "--ca", set.CAFile()}, base...)
	asAlice := append([]string{"--cert", aliceCert, "--key", aliceKey, "--ca", set.CAFile()}, base...)

	runBin := func(env []string, args ...string) result {
		t.Helper()
		return runCLI(t, bin, "", env, args...)
	}
	check := func(res result, code int, stdout, stderr string, what string) {
		t.Helper()
		if res.code != code || !strings.Contains(res.stdout, stdout) || !strings.Contains(res.stderr, stderr) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				what, res.code, res.stdout, res.stderr, code, stdout, stderr)
		}
	}

	check(runBin(nil, append(asAdmin, "put", "tls-file", "hello")...), exitOK, "", "", "admin put")
	check(runBin(nil, append(asAlice, "ls")...), exitOK, "tls-file", "", "alice ls")
	check(runBin(nil, append(asAlice, "cat", "tls-file")...), exitOK, "hello", "", "alice cat")
	// The principal the cell sees is the certificate's name.
	check(runBin(nil, append(asAlice, "--json", "sessions")...), exitOK, `"principal":"alice"`, "", "alice sessions")
	// The same through the environment.
	env := []string{"LOCKCELL_CERT=" + aliceCert, "LOCKCELL_KEY=" + aliceKey, "LOCKCELL_CA=" + set.CAFile()}
	check(runBin(env, append(base, "ls")...), exitOK, "tls-file", "", "ls with LOCKCELL_* environment")

	// Without a certificate the cell refuses at once (not after --timeout).
	start := time.Now()
	check(runBin(nil, append([]string{"--ca", set.CAFile()}, append(base, "ls")...)...), exitUsage, "", "go together", "--ca alone")
	res := runBin(nil, append(base, "ls")...)
	check(res, exitError, "", "", "ls without TLS")
	other := fixtures.TestCerts(t, "alice")
	oc, ok := other.UserFiles(t, "alice")
	start = time.Now()
	res = runBin(nil, append([]string{"--cert", oc, "--key", ok, "--ca", set.CAFile()}, append(base, "ls")...)...)
	check(res, exitError, "", "refused", "a certificate of another CA")
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("refusal took %v", el)
	}
	check(runBin(nil, append([]string{"--cert", filepath.Join(t.TempDir(), "none.crt"), "--key", aliceKey, "--ca", set.CAFile()},
		append(base, "ls")...)...), exitError, "", "TLS", "a missing certificate file")
}
