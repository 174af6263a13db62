package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// joinProc is one `lockcelld serve --join` process with its output.
type joinProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *joinProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *joinProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startJoinProc(t *testing.T, bin string, args ...string) *joinProc {
	t.Helper()
	return startJoinProcEnv(t, bin, nil, args...)
}

// startJoinProcEnv is startJoinProc with more environment (KEY=VALUE).
func startJoinProcEnv(t *testing.T, bin string, env []string, args ...string) *joinProc {
	t.Helper()
	p := &joinProc{cmd: exec.Command(bin, append([]string{"--log-level", "warn", "serve"}, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGKILL); <-p.done })
	return p
}

// waitOutput waits until the process printed want, or fails the test.
func (p *joinProc) waitOutput(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.output(), want) {
		select {
		case <-p.done:
			t.Fatalf("lockcelld exited before printing %q:\n%s", want, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockcelld did not print %q within %v:\n%s", want, d, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM and waits for it.
func (p *joinProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("lockcelld ignored SIGTERM for 20 s:\n%s", p.output())
	}
}

// A new `lockcelld serve --join` process with an empty data folder asks a
// running TLS cell, with the admin's certificate, to add it, reports its
// catch-up, becomes a voter holding the cell's data, and serves clients
// that know only its address; restarted on its data, --join does
// nothing. Without the admin's certificate a joining replica waits,
// naming the command that adds it, and votes once an operator has.
func TestServeJoinAddsReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t)
	pc := fixtures.NewProcCellWith(t, bin, "join", 3, 20*time.Second, fixtures.ProcOptions{TLS: set})
	pc.MasterIndex(90 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 20 {
		h, err := cl.Open(ctx, pc.Name(fmt.Sprintf("f%d", i)), client.Create|client.Write|client.Read, client.WithContents([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
	}

	ports := fixtures.FreePorts(t, 2)
	listen, raftAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	rcert, rkey := set.ReplicaFiles(t, "4")
	acert, akey := set.UserFiles(t, "admin")
	args := []string{"--id", "4", "--cell", "join", "--data", filepath.Join(t.TempDir(), "replica-4"),
		"--listen", listen, "--raft", raftAddr, "--lease", "20s", "--cert", rcert, "--key", rkey, "--ca", set.CAFile(),
		"--join", strings.Join(pc.Addrs(), ",")}

	// Half the admin's credentials: a usage error, nothing started.
	bad := exec.Command(bin, append([]string{"serve"}, append(args, "--join-cert", acert)...)...)
	bad.Env = append(os.Environ(), "LOCKCELL_CERT=", "LOCKCELL_KEY=")
	out, err := bad.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--join-key") {
		t.Fatalf("--join-cert without --join-key: %v\n%s", err, out)
	}

	args = append(args, "--join-cert", acert, "--join-key", akey)
	p := startJoinProc(t, bin, args...)
	p.waitOutput(t, "added to cell \"join\" as a non-voter", 60*time.Second)
	p.waitOutput(t, "a voter of cell \"join\"", 60*time.Second)

	l, err := admin.New(cl).Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := l.Find("4"); !ok || m.Suffrage != admin.SuffrageVoter || m.ClientAddr != listen || m.RaftAddr != raftAddr {
		t.Fatalf("member 4 as the master lists it: %+v (listed %v)", m, ok)
	}
	// A client that knows only the new replica reaches the cell through it
	// and reads what was written before it joined.
	only := pc.ClientConfig()
	only.Replicas = []string{listen}
	cl4, err := client.Dial(ctx, only)
	if err != nil {
		t.Fatalf("dial the cell through the new replica: %v", err)
	}
	defer cl4.Close()
	h, err := cl4.Open(ctx, pc.Name("f7"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "7" {
		t.Fatalf("read through the new replica: %q, %v", data, err)
	}
	h.Close()

	// Restarted on its data, it is a member already.
	p.stop(t)
	p = startJoinProc(t, bin, args...)
	p.waitOutput(t, "a member already", 60*time.Second)
	pollStatus := func() bool {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		defer qcancel()
		st, err := admin.QueryStatusWith(qctx, pc.ClientConfig(), listen)
		return err == nil && st.Master != ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for !pollStatus() {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted replica names no master:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l, err = admin.New(cl).Replicas(ctx); err != nil || l.Voters() != 4 {
		t.Fatalf("after the restart: %+v, %v; want 4 voters", l, err)
	}

	// Without the admin's certificate it waits, saying how to add it, and
	// an operator's add brings it in.
	ports = fixtures.FreePorts(t, 2)
	listen5, raft5 := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	rcert, rkey = set.ReplicaFiles(t, "5")
	p5 := startJoinProcEnv(t, bin, []string{"LOCKCELL_CERT=", "LOCKCELL_KEY="}, "--id", "5", "--cell", "join",
		"--data", filepath.Join(t.TempDir(), "replica-5"), "--listen", listen5, "--raft", raft5, "--lease", "20s",
		"--cert", rcert, "--key", rkey, "--ca", set.CAFile(), "--join", pc.Addrs()[1])
	p5.waitOutput(t, "waiting to be added: lockcell replica add 5 "+listen5+" "+raft5, 30*time.Second)
	if _, err := admin.New(cl).AddReplica(ctx, "5", listen5, raft5); err != nil {
		t.Fatal(err)
	}
	p5.waitOutput(t, "a voter of cell \"join\"", 60*time.Second)
}
