package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
)

// The quota flags reach the master's limits; left out, they are the
// defaults, and the admin's reserves are left to follow their quotas.
func TestServeQuotaFlags(t *testing.T) {
	d := cell.DefaultSessionLimits
	got := serveConfigOf(t).SessionLimits
	if got.Nodes != d.Nodes || got.ContentBytes != d.ContentBytes || got.NodesPerPrincipal != d.NodesPerPrincipal ||
		got.ContentBytesPerPrincipal != d.ContentBytesPerPrincipal || got.NodesAdminReserve != 0 || got.ContentBytesAdminReserve != 0 {
		t.Errorf("default quotas %+v, want %+v with reserves derived", got, d)
	}
	// A quota set alone takes its reserve along.
	got = serveConfigOf(t, "--max-nodes", "7", "--max-content-bytes", "3MiB", "--max-nodes-per-principal", "5",
		"--max-content-bytes-per-principal", "1MiB").SessionLimits
	if got.Nodes != 7 || got.ContentBytes != 3<<20 || got.NodesPerPrincipal != 5 || got.ContentBytesPerPrincipal != 1<<20 {
		t.Errorf("quotas %+v, want 7 nodes, 3 MiB, 5 and 1 MiB per principal", got)
	}
	if n, b := got.Reserves(); n != 0 || b != 3<<20/10 {
		t.Errorf("derived reserves %d nodes, %d bytes; want 0 and a tenth of 3 MiB", n, b)
	}
	got = serveConfigOf(t, "--admin-reserve-nodes", "50", "--admin-reserve-content-bytes", "2MiB").SessionLimits
	if got.NodesAdminReserve != 50 || got.ContentBytesAdminReserve != 2<<20 {
		t.Errorf("reserves %+v, want 50 nodes and 2 MiB", got)
	}
	// In a config file, as on the command line.
	got = configSessionLimits(t, "admin-reserve-content-bytes: 3MiB\nmax-content-bytes-per-principal: 8MiB\n")
	if got.ContentBytesAdminReserve != 3<<20 || got.ContentBytesPerPrincipal != 8<<20 {
		t.Errorf("from a config file: %+v", got)
	}
	// A reserve that leaves the others nothing is refused, naming it.
	_, err := serveConfigFrom(t, "--id", "1", "--data", t.TempDir(), "--peers", "1=127.0.0.1:1/127.0.0.1:2", "--insecure",
		"--max-content-bytes", "1MiB", "--admin-reserve-content-bytes", "1MiB")
	if err == nil || !strings.Contains(err.Error(), "reserve of content bytes") {
		t.Errorf("a reserve as large as its quota: %v", err)
	}
}

// configSessionLimits are the master's limits serve takes from a config
// file holding yaml after the identity settings.
func configSessionLimits(t *testing.T, yaml string) cell.SessionLimits {
	t.Helper()
	path := writeFile(t, "id: \"1\"\ndata: "+t.TempDir()+"\npeers: [1=127.0.0.1:1/127.0.0.1:2]\ninsecure: true\n"+yaml)
	got, err := serveConfigFrom(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	return got.SessionLimits
}

// The event byte budget flags reach the master's limits; left out, they
// are the defaults.
func TestServeEventBudgetFlags(t *testing.T) {
	d := cell.DefaultSessionLimits
	got := serveConfigOf(t).SessionLimits
	if got.EventBytes != d.EventBytes || got.EventBytesPerPrincipal != d.EventBytesPerPrincipal {
		t.Errorf("default event budgets %d and %d, want %d and %d", got.EventBytes, got.EventBytesPerPrincipal, d.EventBytes, d.EventBytesPerPrincipal)
	}
	got = serveConfigOf(t, "--max-event-bytes", "3MiB", "--max-event-bytes-per-principal", "512KiB").SessionLimits
	if got.EventBytes != 3<<20 || got.EventBytesPerPrincipal != 512<<10 {
		t.Errorf("event budgets %d and %d, want 3 MiB and 512 KiB", got.EventBytes, got.EventBytesPerPrincipal)
	}
}

// A `lockcelld serve` process enforces the quotas its flags set, each with
// the typed error naming it and its limit.
func TestServeQuotaProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a process")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t, "alice")
	pc := fixtures.NewProcCellWith(t, bin, "quota", 1, 4*time.Second, fixtures.ProcOptions{TLS: set,
		ExtraArgs: []string{"--max-nodes", "6", "--max-content-bytes", "1KiB", "--max-nodes-per-principal", "1",
			"--max-content-bytes-per-principal", "100"}})
	pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	acfg := pc.ClientConfig()
	acfg.TLS = set.ClientTLS(t, "alice")
	alice, err := client.Dial(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	const rwc = client.Read | client.Write | client.Create
	open := func(cl *client.Client, rel string, mode client.OpenMode, opts ...client.OpenOption) (*client.Handle, error) {
		return cl.Open(ctx, pc.Name(rel), mode, opts...)
	}
	must := func(h *client.Handle, err error) *client.Handle {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	quotaErr := func(what string, err error, mention string) {
		t.Helper()
		if !errors.Is(err, client.ErrQuotaExceeded) || !strings.Contains(err.Error(), mention) {
			t.Fatalf("%s: %v, want a quota error saying %q", what, err, mention)
		}
	}
	// Three nodes of the admin's (exempt from the per-principal quota).
	must(open(admin, "acl", rwc|client.Directory)).Close()
	must(open(admin, "acl/all", rwc, client.WithContents([]byte("alice\n")))).Close()
	pub := must(open(admin, "pub", rwc|client.Directory))
	if _, err := pub.SetACL(ctx, client.ACL{Write: "all"}); err != nil {
		t.Fatal(err)
	}
	_, err = open(alice, "pub/a1", rwc, client.WithContents(bytes.Repeat([]byte("a"), 101)))
	quotaErr("alice's 101 bytes", err, "limit of 100 per principal")
	must(open(alice, "pub/a1", rwc, client.WithContents(bytes.Repeat([]byte("a"), 100)))).Close()
	_, err = open(alice, "pub/a2", rwc)
	quotaErr("alice's second node", err, "limit is 1")
	// 6 bytes of acl/all, alice's 100 and 918 here make the 1 KiB, the
	// last 102 of which only the admin may fill.
	big := must(open(admin, "pub/big", rwc, client.WithContents(bytes.Repeat([]byte("b"), 918))))
	quotaErr("one byte more", big.SetContents(ctx, bytes.Repeat([]byte("b"), 919)), "limit of 1024")
	must(open(admin, "pub/sixth", rwc)).Close()
	_, err = open(admin, "pub/seventh", rwc)
	quotaErr("the seventh node", err, "limit is 6")
	// Full on all three quotas, the cell still reads and deletes.
	if data, _, err := big.GetContentsAndStat(ctx); err != nil || len(data) != 918 {
		t.Fatalf("read of a full cell: %d bytes, %v", len(data), err)
	}
	if err := big.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	must(open(admin, "pub/seventh", rwc)).Close()
}

// The caps on cacher registrations reach the master's limits, from the
// command line or the config file; left out, they are the defaults.
func TestServeCacheRegistrationFlags(t *testing.T) {
	d := cell.DefaultSessionLimits
	got := serveConfigOf(t).SessionLimits
	if got.CacheRegistrations != d.CacheRegistrations || got.CacheRegistrationsPerPrincipal != d.CacheRegistrationsPerPrincipal {
		t.Errorf("default caps %+v, want %+v", got, d)
	}
	got = serveConfigOf(t, "--max-cache-registrations", "70", "--max-cache-registrations-per-principal", "9").SessionLimits
	if got.CacheRegistrations != 70 || got.CacheRegistrationsPerPrincipal != 9 {
		t.Errorf("caps %+v, want 70 in all and 9 per principal", got)
	}
}

// A quota flag dev accepts is enforced by the dev cell, plain as it is:
// with --max-content-bytes 1000 a 40,000-byte file is refused, and with
// --max-nodes 5 the sixth node, each with the quota's machine code; the
// replicas keep their audit trails in their data folders.
func TestDevEnforcesQuotaFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the dev cell")
	}
	bin := fixtures.BuildLockcelld(t)
	data := t.TempDir()
	port := freeRun(t, 6)
	cmd := exec.Command(bin, "dev", "--data", data, "--replicas", "3", "--port", fmt.Sprint(port),
		"--raft-port", fmt.Sprint(port+3), "--metrics-port", "0", "--lease", "8s",
		"--max-content-bytes", "1000", "--max-nodes", "5", "--audit-retain", "1MiB")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port+i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cl *client.Client
	for { // until the dev cell listens: a cell refusing every connection is reported at once
		var err error
		cl, err = client.Dial(ctx, client.Config{Cell: "local", Replicas: addrs, RetryTimeout: 30 * time.Second, Logger: fixtures.Logger()})
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrAllRefused) || ctx.Err() != nil {
			t.Fatalf("%v; the dev cell said:\n%s", err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer cl.Close()
	_, err := cl.Open(ctx, "/ls/local/big", client.Read|client.Write|client.Create, client.WithContents(make([]byte, 40000)))
	if !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("a 40,000-byte file on a 1,000-byte cell: %v, want ErrQuotaExceeded", err)
	}
	for i := range 5 { // the root does not count
		h, err := cl.Open(ctx, fmt.Sprintf("/ls/local/n%d", i), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatalf("node %d of 5: %v", i+1, err)
		}
		h.Close()
	}
	if _, err := cl.Open(ctx, "/ls/local/n5", client.Read|client.Write|client.Create); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("the sixth node on a 5-node cell: %v, want ErrQuotaExceeded", err)
	}
	for _, id := range []string{"1", "2", "3"} {
		if m, _ := filepath.Glob(filepath.Join(data, "replica-"+id, "audit", "audit-*.jsonl")); len(m) == 0 {
			t.Errorf("replica %s keeps no audit trail", id)
		}
	}
}
