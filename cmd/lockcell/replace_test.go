package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// replaceLease is the replicas' session lease in the replacement test:
// short, so a fail-over costs little, long enough for a busy 2-core box.
const replaceLease = 3 * time.Second

// replaceRaft are the replicas' Raft timings there (the two-core test
// timings, as the hostile-client campaign uses).
var replaceRaft = []string{"--raft-heartbeat", "1s", "--raft-election", "1s", "--raft-leader-lease", "500ms",
	// Small snapshots, so a new member catches up by installing one, as
	// it would on a cell with a long history.
	"--snapshot-interval", "200ms", "--snapshot-threshold", "64", "--trailing-logs", "32"}

// joiner is a replica process the test starts outside the ProcCell: a
// new machine joining the cell with an empty data folder.
type joiner struct {
	peer cell.Peer
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startJoiner starts `lockcelld serve --join` for peer with an empty data
// folder. With ask it asks the replicas at join, as the admin, to add it;
// without, it has no admin certificate and waits for an operator's
// `lockcell replica add`.
func startJoiner(t *testing.T, bin string, pc *fixtures.ProcCell, set *fixtures.CertSet, peer cell.Peer, join []string, ask bool) *joiner {
	t.Helper()
	dir := t.TempDir()
	cf, kf := set.ReplicaFiles(t, peer.ID)
	j := &joiner{peer: peer, done: make(chan struct{}), log: filepath.Join(dir, "replica.log")}
	j.cmd = exec.Command(bin, "--log-level", "warn", "serve", "--id", peer.ID, "--cell", pc.Cell(),
		"--data", filepath.Join(dir, "data"), "--listen", peer.ClientAddr, "--raft", peer.RaftAddr,
		"--lease", replaceLease.String(), "--cert", cf, "--key", kf, "--ca", set.CAFile(), "--join", strings.Join(join, ","))
	if ask {
		af, ak := set.UserFiles(t, "admin")
		j.cmd.Args = append(j.cmd.Args, "--join-cert", af, "--join-key", ak)
	}
	j.cmd.Args = append(j.cmd.Args, replaceRaft...)
	// Only the flags say how to ask: not the test's own environment.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKCELL_") {
			j.cmd.Env = append(j.cmd.Env, kv)
		}
	}
	logf, err := os.Create(j.log)
	if err != nil {
		t.Fatal(err)
	}
	j.cmd.Stdout, j.cmd.Stderr = logf, logf
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start replica %s: %v", peer.ID, err)
	}
	go func() {
		j.cmd.Wait()
		logf.Close()
		close(j.done)
	}()
	t.Cleanup(func() {
		j.cmd.Process.Signal(syscall.SIGKILL)
		<-j.done
	})
	return j
}

func (j *joiner) logText() string {
	b, _ := os.ReadFile(j.log)
	return string(b)
}

// load is a client application running through the whole procedure: one
// client writes a file by compare-and-swap, each write conditional on the
// last acknowledged one, and another takes, holds and releases a lock in
// a loop. Every error either sees is recorded: the library retries across
// fail-overs, so none may reach the application.
type load struct {
	t      *testing.T
	writer *client.Client
	locker *client.Client
	file   string

	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	acked  []string // values of acknowledged writes, in order
	gen    uint64   // content generation of the last acknowledged write
	grants int
	errs   []error
}

func startLoad(t *testing.T, cfg client.Config, file, lock string) *load {
	t.Helper()
	cfg.RetryTimeout, cfg.GracePeriod = 60*time.Second, 60*time.Second
	cfg.ReplicaRefresh = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := &load{t: t, file: file, stop: make(chan struct{})}
	var err error
	for _, cl := range []**client.Client{&l.writer, &l.locker} {
		if *cl, err = client.Dial(ctx, cfg); err != nil {
			t.Fatalf("dial: %v", err)
		}
	}
	w, err := l.writer.Open(ctx, file, client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := w.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.gen = st.ContentGen
	lk, err := l.locker.Open(ctx, lock, client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	l.wg.Add(2)
	go l.writes(w)
	go l.locks(lk)
	t.Cleanup(l.close)
	return l
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *load) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *load) writes(h *client.Handle) {
	defer l.wg.Done()
	for i := 0; !l.stopped(); i++ {
		v := fmt.Sprintf("write-%d", i)
		l.mu.Lock()
		gen := l.gen
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		st, err := h.SetContentsAndStat(ctx, []byte(v), client.IfGeneration(gen))
		cancel()
		if err != nil {
			l.fail(fmt.Errorf("write %s if generation %d: %w", v, gen, err))
			return
		}
		l.mu.Lock()
		l.acked, l.gen = append(l.acked, v), st.ContentGen
		l.mu.Unlock()
	}
}

func (l *load) locks(h *client.Handle) {
	defer l.wg.Done()
	for !l.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := h.Acquire(ctx, client.Exclusive)
		if err == nil {
			l.mu.Lock()
			l.grants++
			l.mu.Unlock()
			select { // hold it a while: the lock is held across the procedure's steps
			case <-l.stop:
			case <-time.After(100 * time.Millisecond):
			}
			err = h.Release(ctx)
		}
		cancel()
		if err != nil {
			l.fail(fmt.Errorf("lock round: %w", err))
			return
		}
	}
}

// progress returns the acknowledged writes and lock grants so far.
func (l *load) progress() (writes, grants int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), l.grants
}

// waitProgress waits until the load made n more writes and lock grants
// than now, failing on any load error.
func (l *load) waitProgress(n int, within time.Duration) {
	l.t.Helper()
	w0, g0 := l.progress()
	deadline := time.Now().Add(within)
	for {
		l.checkErrs()
		w, g := l.progress()
		if w >= w0+n && g >= g0+n {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("load made %d writes and %d lock grants in %v, want %d of each", w-w0, g-g0, within, n)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

func (l *load) checkErrs() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		l.t.Fatalf("the application saw errors (beyond the library's retries): %v", errors.Join(l.errs...))
	}
}

func (l *load) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	if l.writer != nil {
		l.writer.Close()
	}
	if l.locker != nil {
		l.locker.Close()
	}
}

// replicaList runs `lockcell --json replica list` and decodes it.
func replicaList(t *testing.T, bin string, flags []string) lcadmin.ReplicaList {
	t.Helper()
	res := runCLI(t, bin, "", nil, append(append([]string(nil), flags...), "--json", "replica", "list")...)
	var list lcadmin.ReplicaList
	if res.code != exitOK || json.Unmarshal([]byte(res.stdout), &list) != nil {
		t.Fatalf("replica list: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	return list
}

// memberIDs are the ids in list, sorted, with each one's suffrage.
func memberIDs(list lcadmin.ReplicaList) []string {
	var out []string
	for _, r := range list.Replicas {
		out = append(out, r.ID+":"+r.Suffrage)
	}
	slices.Sort(out)
	return out
}

// sameStateHash waits until every replica at addrs reports the same
// applied index and state hash (the cell is quiet: the load stopped).
func sameStateHash(t *testing.T, cfg client.Config, addrs []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		var idx []uint64
		var sums [][]byte
		var errs []error
		for _, a := range addrs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			i, sum, err := lcadmin.StateHash(ctx, cfg, a)
			cancel()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			idx, sums = append(idx, i), append(sums, sum)
		}
		same := len(errs) == 0
		for k := 1; same && k < len(sums); k++ {
			same = idx[k] == idx[0] && bytes.Equal(sums[k], sums[0])
		}
		if same {
			return
		}
		last = fmt.Sprintf("indexes %v, errors %v", idx, errs)
		if time.Now().After(deadline) {
			t.Fatalf("replicas %v never agreed on one state hash: %s", addrs, last)
		}
		time.Sleep(200 * time.Millisecond) // hashes are rationed to one a second per replica
	}
}

// TestReplaceDeadReplicaUnderLoad is the documented procedure, run with
// real processes and mutual TLS: while a client writes by compare-and-swap
// and another takes and releases a lock, the master's machine dies (kill
// -9); a new replica starts at a new address with an empty data folder
// and joins (`serve --join` with the admin's certificate); the operator
// removes the dead one with `lockcell replica remove` and waits with
// `lockcell replica add` until the new one votes. The application sees no
// error, no acknowledged write is lost, every member ends with the same
// state, the application's clients learn the new membership, and a client
// given only the new replica's address works. Then a live member is
// removed and re-added with a fresh data folder, this time by the
// operator's `lockcell replica add` (the replica has no admin certificate
// to ask with).
func TestReplaceDeadReplicaUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs both binaries; skipped with -short")
	}
	started := time.Now()
	cli := buildCLI(t)
	daemon := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t)
	pc := fixtures.NewProcCellWith(t, daemon, "rp", 5, replaceLease, fixtures.ProcOptions{TLS: set, ExtraArgs: replaceRaft})
	m := pc.MasterIndex(60 * time.Second)
	peers := pc.Peers()
	cfg := pc.ClientConfig()
	adminCert, adminKey := set.UserFiles(t, "admin")
	admin := func(addrs []string) []string {
		return []string{"--cell", pc.Cell(), "--replicas", strings.Join(addrs, ","), "--timeout", "60s",
			"--cert", adminCert, "--key", adminKey, "--ca", set.CAFile()}
	}
	cliOK := func(flags []string, args ...string) result {
		t.Helper()
		res := runCLI(t, cli, "", nil, append(append([]string(nil), flags...), args...)...)
		if res.code != exitOK {
			t.Fatalf("lockcell %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), res.code, res.stdout, res.stderr)
		}
		return res
	}

	l := startLoad(t, cfg, pc.Name("data"), pc.Name("lock"))
	l.waitProgress(20, 30*time.Second)
	t.Logf("load running: %v", time.Since(started))

	// The master's machine dies.
	dead := peers[m]
	pc.Kill(m)
	var alive []string
	for i, p := range peers {
		if i != m {
			alive = append(alive, p.ClientAddr)
		}
	}
	// A new machine, at a new address, with an empty data folder.
	ports := fixtures.FreePorts(t, 2)
	fresh := cell.Peer{ID: "6", ClientAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	j := startJoiner(t, daemon, pc, set, fresh, alive, true)
	// The operator removes the dead member, and waits until the new one
	// votes (add of a member already added changes nothing but waits).
	res := cliOK(admin(alive), "replica", "remove", dead.ID)
	if strings.Contains(res.stdout, " "+dead.ClientAddr+" ") {
		t.Fatalf("replica remove %s still lists it:\n%s", dead.ID, res.stdout)
	}
	res = cliOK(admin(alive), "replica", "add", fresh.ID, fresh.ClientAddr, fresh.RaftAddr)
	if !strings.Contains(res.stderr, "replica 6 is a voter") {
		t.Fatalf("replica add printed no progress: stderr %q\nreplica 6's log:\n%s", res.stderr, j.logText())
	}
	t.Logf("replaced: %v", time.Since(started))
	members := []string{}
	for i, p := range peers {
		if i != m {
			members = append(members, p.ID+":voter")
		}
	}
	members = append(members, "6:voter")
	slices.Sort(members)
	if got := memberIDs(replicaList(t, cli, admin(alive))); !slices.Equal(got, members) {
		t.Fatalf("members %v, want %v", got, members)
	}
	l.waitProgress(20, 30*time.Second) // the load goes on

	// The application's clients follow the membership: the dead address
	// is gone from what they try, the new one is in.
	live := append(slices.Clone(alive), fresh.ClientAddr)
	for _, cl := range []*client.Client{l.writer, l.locker} {
		deadline := time.Now().Add(20 * time.Second)
		for !slices.Equal(slices.Sorted(slices.Values(lcadmin.New(cl).ReplicaAddrs())), slices.Sorted(slices.Values(live))) {
			if time.Now().After(deadline) {
				t.Fatalf("client tries %v, want %v", lcadmin.New(cl).ReplicaAddrs(), live)
			}
			time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
		}
	}

	// Remove a live member and add it back with a fresh data folder.
	m2 := -1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := lcadmin.New(l.writer).Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var again cell.Peer
	for i, p := range peers {
		if r, ok := list.Find(p.ID); ok && i != m && !r.Master {
			m2, again = i, p
			break
		}
	}
	cliOK(admin(live), "replica", "remove", again.ID)
	pc.Kill(m2)
	l.waitProgress(10, 30*time.Second) // four voters serve
	var rest []string
	for _, a := range live {
		if a != again.ClientAddr {
			rest = append(rest, a)
		}
	}
	// This time the replica has no admin certificate: it waits, and the
	// operator's `replica add` adds it.
	j2 := startJoiner(t, daemon, pc, set, again, rest, false)
	res = cliOK(admin(rest), "replica", "add", again.ID, again.ClientAddr, again.RaftAddr)
	if !strings.Contains(res.stderr, "is a voter") {
		t.Fatalf("replica add %s: stderr %q\nits log:\n%s", again.ID, res.stderr, j2.logText())
	}
	if got := memberIDs(replicaList(t, cli, admin(live))); !slices.Equal(got, members) {
		t.Fatalf("members after the re-add %v, want %v", got, members)
	}
	l.waitProgress(10, 30*time.Second)

	// Stop the load; nothing acknowledged is lost.
	close(l.stop)
	l.wg.Wait()
	l.checkErrs()
	writes, grants := l.progress()
	rd, err := l.writer.Open(ctx, pc.Name("data"), client.Read, client.WithoutCache())
	if err != nil {
		t.Fatal(err)
	}
	got, st, err := rd.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	lastAck, lastGen := l.acked[len(l.acked)-1], l.gen
	l.mu.Unlock()
	if string(got) != lastAck || st.ContentGen != lastGen {
		t.Fatalf("file holds %q at generation %d; the last acknowledged write was %q at %d", got, st.ContentGen, lastAck, lastGen)
	}
	// One state on every member.
	sameStateHash(t, cfg, live, 30*time.Second)

	// A client given only the new replica's address finds the cell.
	only := cfg
	only.Replicas = []string{fresh.ClientAddr}
	nc, err := client.Dial(ctx, only)
	if err != nil {
		t.Fatalf("dial with only the new replica's address: %v", err)
	}
	defer nc.Close()
	h, err := nc.Open(ctx, pc.Name("data"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := h.GetContentsAndStat(ctx); err != nil || string(b) != lastAck {
		t.Fatalf("read through the new replica's client: %q, %v", b, err)
	}
	t.Logf("%d writes acknowledged, %d lock grants, no error, one state on %d members; wall %v",
		writes, grants, len(live), time.Since(started))
}
