package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// nodeState is what a client sees of one node: its stat and contents.
type nodeState struct {
	stat     client.Stat
	contents []byte
}

// walk returns every node under root as the client sees it.
func walk(ctx context.Context, t *testing.T, cl *client.Client, root string) map[string]nodeState {
	t.Helper()
	out := map[string]nodeState{}
	var visit func(name string)
	visit = func(name string) {
		h, err := cl.Open(ctx, name, client.Read)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		defer h.Close()
		data, st, err := h.GetContentsAndStat(ctx)
		if err != nil && !errors.Is(err, client.ErrIsDir) {
			t.Fatalf("read %s: %v", name, err)
		}
		if st.Dir || errors.Is(err, client.ErrIsDir) {
			if st, err = h.GetStat(ctx); err != nil {
				t.Fatalf("stat %s: %v", name, err)
			}
		}
		out[name] = nodeState{stat: st, contents: data}
		if !st.Dir {
			return
		}
		ents, err := h.ReadDir(ctx)
		if err != nil {
			t.Fatalf("readdir %s: %v", name, err)
		}
		for _, e := range ents {
			visit(name + "/" + e.Name)
		}
	}
	visit(root)
	return out
}

// A busy TLS cell is backed up by its admin with the lockcell binary while
// a client writes; others are refused; the file verifies, and a flipped or
// missing byte is caught; five `lockcelld restore` runs seed a new
// five-replica cell that starts with every node, stat, content and ACL of
// the backup, the same sequencer key, no sessions, and equal state on
// every replica.
func TestBackupRestoreBusyTLSCell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs eight replicas")
	}
	lockcelld := fixtures.BuildLockcelld(t)
	lockcell := fixtures.BuildLockcell(t)
	cs := fixtures.TestCerts(t, "alice")
	src := fixtures.NewCell(t, 3, fixtures.Options{Cell: "bk", TLS: cs})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := src.Client(t)
	name := src.Name

	mustOpen := func(cl *client.Client, n string, mode client.OpenMode) *client.Handle {
		t.Helper()
		h, err := cl.Open(ctx, name(n), mode)
		if err != nil {
			t.Fatalf("open %s: %v", n, err)
		}
		return h
	}
	rwc := client.Read | client.Write | client.Create
	mustOpen(admin, "acl", rwc|client.Directory)
	for _, acl := range []struct{ file, who string }{{"readers", "alice\n"}, {"admins", "admin\n"}} {
		if err := mustOpen(admin, "acl/"+acl.file, rwc).SetContents(ctx, []byte(acl.who)); err != nil {
			t.Fatal(err)
		}
	}
	mustOpen(admin, "dir", rwc|client.Directory)
	for i := range 40 {
		if err := mustOpen(admin, fmt.Sprintf("dir/f%02d", i), rwc).SetContents(ctx, bytes.Repeat([]byte{byte('a' + i%26)}, 16<<10)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct{ name, read string }{{"shared", "readers"}, {"private", "admins"}} {
		h := mustOpen(admin, f.name, rwc)
		if err := h.SetContents(ctx, []byte(f.name)); err != nil {
			t.Fatal(err)
		}
		if _, err := h.SetACL(ctx, client.ACL{Read: f.read, Write: "admins", ChangeACL: "admins"}); err != nil {
			t.Fatal(err)
		}
	}
	lk := mustOpen(admin, "lock", rwc)
	if ok, err := lk.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	seq, err := lk.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustOpen(admin, "eph", rwc|client.Ephemeral)

	// The writer: writes counter values 1, 2, ... until stopped.
	var started, acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writer := src.Client(t)
	ctr := mustOpen(writer, "counter", rwc)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			started.Store(i)
			if err := ctr.SetContents(ctx, []byte(strconv.FormatInt(i, 10))); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			acked.Store(i)
		}
	}()
	for acked.Load() < 3 { // the writer is under way
		select {
		case <-ctx.Done():
			t.Fatal("the writer made no progress")
		case <-time.After(5 * time.Millisecond):
		}
	}

	addrs := strings.Join(src.Addrs(), ",")
	as := func(user string, args ...string) (int, string, string) {
		cert, key := cs.UserFiles(t, user)
		return fixtures.RunBinary(t, lockcell, "", nil, append([]string{"--cell", "bk", "--replicas", addrs, "--cert", cert, "--key", key,
			"--ca", cs.CAFile()}, args...)...)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "bk.lcb")
	if code, out, errs := as("alice", "backup", file); code != 1 || !strings.Contains(errs, "permission") ||
		strings.Contains(errs+out, "/ls/") {
		t.Fatalf("alice's backup: exit %d, %q %q; want a permission error naming nothing", code, out, errs)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup left a file: %v", err)
	}
	lo := acked.Load()
	code, out, errs := as("admin", "backup", "--json", file)
	hi := started.Load()
	close(stop)
	wg.Wait()
	if code != 0 {
		t.Fatalf("backup: exit %d: %s %s", code, out, errs)
	}
	var sum struct {
		Cell     string `json:"cell"`
		Index    uint64 `json:"index"`
		Nodes    uint64 `json:"nodes"`
		Bytes    uint64 `json:"bytes"`
		Checksum string `json:"checksum"`
		SHA256   string `json:"sha256"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("backup --json: %v: %q", err, out)
	}
	t.Logf("backup: %+v; the writer wrote %d..%d around it", sum, lo, hi)
	fi, err := os.Stat(file)
	if err != nil || uint64(fi.Size()) != sum.Bytes || sum.Cell != "bk" || sum.Bytes < 40*16<<10 {
		t.Fatalf("backup file %v %v, summary %+v", fi, err, sum)
	}

	// --verify: the file is intact; a flipped byte and a cut are caught.
	if code, out, errs := as("admin", "backup", "--verify", file); code != 0 || !strings.Contains(out, "sha256 "+sum.SHA256) {
		t.Fatalf("verify: exit %d %q %q", code, out, errs)
	}
	raw, _ := os.ReadFile(file)
	flipped := bytes.Clone(raw)
	flipped[len(raw)/2] ^= 1
	bad := filepath.Join(dir, "flipped.lcb")
	os.WriteFile(bad, flipped, 0o600)
	if code, _, errs := as("admin", "backup", "--verify", bad); code != 1 || !strings.Contains(errs, "checksum mismatch") {
		t.Fatalf("verify of a flipped byte: exit %d %q", code, errs)
	}
	cut := filepath.Join(dir, "cut.lcb")
	os.WriteFile(cut, raw[:len(raw)-100], 0o600)
	if code, _, errs := as("admin", "backup", "--verify", cut); code != 1 || !strings.Contains(errs, "truncated") {
		t.Fatalf("verify of a cut file: exit %d %q", code, errs)
	}

	before := walk(ctx, t, admin, "/ls/bk")

	// Restore into a new five-replica cell.
	peers := fixtures.FreePeers(t, 5)
	root := t.TempDir()
	hashRE := regexp.MustCompile(`state sha256 ([0-9a-f]{64})`)
	var seeded string
	for _, p := range peers {
		code, out, errs := fixtures.RunBinary(t, lockcelld, "", nil, "restore", "--from", file, "--data", filepath.Join(root, "replica-"+p.ID),
			"--id", p.ID, "--peers", cell.FormatPeers(peers), "--cell", "bk")
		m := hashRE.FindStringSubmatch(out)
		if code != 0 || m == nil || (seeded != "" && m[1] != seeded) {
			t.Fatalf("restore %s: exit %d %q %q (first replica's state %s)", p.ID, code, out, errs, seeded)
		}
		seeded = m[1]
	}
	if code, _, errs := fixtures.RunBinary(t, lockcelld, "", nil, "restore", "--from", file, "--data", filepath.Join(root, "replica-1"),
		"--id", "1", "--peers", cell.FormatPeers(peers)); code == 0 || !strings.Contains(errs, "not empty") {
		t.Fatalf("restore into a used folder: exit %d %q", code, errs)
	}
	if code, _, errs := fixtures.RunBinary(t, lockcelld, "", nil, "restore", "--from", file, "--data", filepath.Join(t.TempDir(), "x"),
		"--id", "1", "--peers", cell.FormatPeers(peers), "--cell", "other"); code == 0 || !strings.Contains(errs, `cell "bk"`) {
		t.Fatalf("restore as another cell: exit %d %q", code, errs)
	}
	dst := fixtures.NewCell(t, 5, fixtures.Options{Cell: "bk", TLS: cs, Dir: root, Peers: peers})
	dadmin := dst.Client(t)
	after := walk(ctx, t, dadmin, "/ls/bk")

	for n, b := range before {
		a, ok := after[n]
		switch {
		case n == name("eph"):
			if ok {
				t.Errorf("ephemeral %s restored without its session", n)
			}
			continue
		case !ok:
			t.Errorf("%s not restored", n)
			continue
		case n == name("counter"):
			v, _ := strconv.ParseInt(string(a.contents), 10, 64)
			if v < lo || v > hi || a.stat.ContentGen > sum.Index {
				t.Errorf("counter restored as %d at generation %d: want a value in %d..%d at or below index %d",
					v, a.stat.ContentGen, lo, hi, sum.Index)
			}
			continue
		}
		bs, as := b.stat, a.stat
		// Locks are not restored: their holders' sessions are not.
		bs.LockMode, bs.LockHolders, bs.LockWaiters, bs.LockDelayUntil, bs.Holders = 0, 0, 0, time.Time{}, nil
		if !as.CTime.Equal(bs.CTime) || !as.MTime.Equal(bs.MTime) {
			t.Errorf("%s: times %v %v, backed up %v %v", n, as.CTime, as.MTime, bs.CTime, bs.MTime)
		}
		as.CTime, as.MTime, bs.CTime, bs.MTime = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(as, bs) || !bytes.Equal(a.contents, b.contents) {
			t.Errorf("%s: restored %+v (%d bytes), backed up %+v (%d bytes)", n, as, len(a.contents), bs, len(b.contents))
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Errorf("%s appeared in the restored cell", n)
		}
	}
	if len(before) < 45 {
		t.Fatalf("only %d nodes compared", len(before))
	}

	// Sessions did not come along; the sequencer key did.
	list, err := lcadmin.New(dadmin).Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != dadmin.Session() {
		t.Fatalf("sessions of the restored cell: %+v %v; want only this client's", list, err)
	}
	st, err := lcadmin.New(dadmin).SequencerStatus(ctx, seq)
	if err != nil || st.Valid {
		t.Fatalf("a sequencer from before the backup: %+v %v; want a verified signature on a lock no longer held", st, err)
	}
	// The ACLs came along: alice reads what the ACL lets her, nothing else.
	alice := dst.ClientWith(t, dst.ClientConfigAs("alice"))
	if h, err := alice.Open(ctx, name("shared"), client.Read); err != nil {
		t.Fatalf("alice opens shared: %v", err)
	} else if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "shared" {
		t.Fatalf("alice reads shared: %q %v", data, err)
	}
	// A node alice may not read is hidden from her, on both cells alike.
	srcAlice := src.ClientWith(t, src.ClientConfigAs("alice"))
	for _, cl := range []*client.Client{srcAlice, alice} {
		if _, err := cl.Open(ctx, name("private"), client.Read); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("alice opens private: %v, want it hidden (not found)", err)
		}
	}

	// Every restored replica holds the same state.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var idx []uint64
		var sums [][32]byte
		for i := range peers {
			x, s, err := dst.Server(i).Replica().FSM().StateHash()
			if err != nil {
				t.Fatal(err)
			}
			idx, sums = append(idx, x), append(sums, s)
		}
		same := true
		for i := range idx {
			same = same && idx[i] == idx[0] && sums[i] == sums[0]
		}
		if same && idx[0] > sum.Index {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restored replicas at indexes %v: states differ or none went past the backup's %d", idx, sum.Index)
		}
		time.Sleep(20 * time.Millisecond) // polling the replicas' state with a deadline
	}
}
