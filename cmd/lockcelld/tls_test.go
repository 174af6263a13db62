package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

func TestCertsCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := fixtures.BuildLockcelld(t)
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := exec.Command(bin, "certs", "--dir", dir, "--users", "alice,bob", "--hosts", "db.example,10.9.8.7").CombinedOutput()
	if err != nil {
		t.Fatalf("lockcelld certs: %v\n%s", err, out)
	}
	for _, f := range []string{"ca.crt", "ca.key", "replica-1.crt", "replica-5.key", "admin.crt", "alice.key", "bob.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s missing: %v\n%s", f, err, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "replica-3.crt"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(leaf.DNSNames, "db.example") || !slices.ContainsFunc(leaf.IPAddresses, net.ParseIP("10.9.8.7").Equal) {
		t.Fatalf("replica certificate names %v %v, want db.example and 10.9.8.7", leaf.DNSNames, leaf.IPAddresses)
	}
	// One line per certificate with its serial as openssl shows it:
	// colon-separated upper-case hex, which without the colons is what
	// `openssl x509 -serial` prints.
	for _, f := range []string{"ca.crt", "replica-3.crt", "admin.crt", "bob.crt"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		var hexBytes []string
		for _, x := range c.SerialNumber.Bytes() {
			hexBytes = append(hexBytes, fmt.Sprintf("%02X", x))
		}
		want := "  " + f + "  CN=" + c.Subject.CommonName + "  serial=" + strings.Join(hexBytes, ":") + "  "
		if !strings.Contains(string(out), want) {
			t.Fatalf("lockcelld certs does not print %q:\n%s", want, out)
		}
		if openssl, err := exec.LookPath("openssl"); err == nil {
			o, err := exec.Command(openssl, "x509", "-noout", "-serial", "-in", filepath.Join(dir, f)).Output()
			if err != nil || strings.TrimSpace(string(o)) != "serial="+strings.Join(hexBytes, "") {
				t.Fatalf("openssl x509 -serial %s: %q (%v), lockcelld certs printed %s", f, o, err, strings.Join(hexBytes, ":"))
			}
		}
	}
	// Bad flags are usage errors.
	cmd := exec.Command(bin, "serve", "--id", "1", "--data", t.TempDir(), "--peers", "1=127.0.0.1:1/127.0.0.1:2",
		"--cert", filepath.Join(dir, "replica-1.crt"))
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "go together") {
		t.Fatalf("serve --cert alone: %v\n%s", err, out)
	}
}

// Five `lockcelld serve --cert --key --ca` processes form a cell; users
// are who their certificates say, and plain TCP gets nothing.
func TestServeWithTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, bin, "sec", 5, 8*time.Second, fixtures.ProcOptions{TLS: set})
	mi := pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := pc.ClientConfig()
	cfg.TLS = set.ClientTLS(t, "alice")
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ss, err := admin.New(cl).Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(ss, func(s admin.SessionInfo) bool { return s.ID == cl.Session() }); i < 0 || ss[i].Principal != "alice" {
		t.Fatalf("alice's session %d not listed as alice in %+v", cl.Session(), ss)
	}
	plain := pc.ClientConfig()
	plain.TLS, plain.RetryTimeout = nil, 2*time.Second
	if c2, err := client.Dial(ctx, plain); err == nil {
		c2.Close()
		t.Fatal("a plain TCP client got a session")
	}
	if log := pc.Log(mi); strings.Contains(log, "no TLS") {
		t.Fatalf("a TLS replica warned about running without TLS:\n%s", log)
	}
}

// freeRun finds n consecutive free loopback ports.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(30000)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// `lockcelld dev --tls` creates its certificates, serves with mutual TLS
// and prints the environment a user exports.
func TestDevWithTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the dev cell")
	}
	bin := fixtures.BuildLockcelld(t)
	data := t.TempDir()
	port := freeRun(t, 6)
	cmd := exec.Command(bin, "dev", "--tls", "--data", data, "--replicas", "3", "--port", fmt.Sprint(port),
		"--raft-port", fmt.Sprint(port+3), "--metrics-port", "0", "--lease", "8s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	env := map[string]string{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(90 * time.Second)
	for len(env) < 3 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("dev exited before printing the environment; stderr:\n%s", stderr.String())
			}
			if k, v, ok := strings.Cut(strings.TrimPrefix(l, "export "), "="); ok && strings.HasPrefix(l, "export LOCKCELL_") {
				env[k] = v
			}
		case <-timeout:
			t.Fatalf("no environment printed; stderr:\n%s", stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	if env["LOCKCELL_CERT"] != filepath.Join(data, "certs", "admin.crt") {
		t.Fatalf("LOCKCELL_CERT=%s, want the admin certificate under %s", env["LOCKCELL_CERT"], data)
	}
	tlsCfg, err := certs.LoadClientConfig(env["LOCKCELL_CERT"], env["LOCKCELL_KEY"], env["LOCKCELL_CA"])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port+i))
	}
	cl, err := client.Dial(ctx, client.Config{Cell: "local", Replicas: addrs, TLS: tlsCfg, RetryTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("dial the dev cell over TLS: %v\nstderr:\n%s", err, stderr.String())
	}
	h, err := cl.Open(ctx, "/ls/local/tls", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	ss, err := admin.New(cl).Sessions(ctx)
	if err != nil || len(ss) == 0 {
		t.Fatalf("sessions: %v %v", ss, err)
	}
	for _, s := range ss {
		if s.ID == cl.Session() && s.Principal != "admin" {
			t.Fatalf("principal %q, want admin", s.Principal)
		}
	}
	cl.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("dev cell did not stop on SIGTERM")
	}
}
