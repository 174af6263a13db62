package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// TestVerbs covers touch, status, watch and rm -r's confirmation on one
// cell.
func TestVerbs(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}

	t.Run("Touch", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("mkdir", "tc")
		res := r.ok("touch", "tc/a", "tc/b")
		if res.stdout != "" || res.stderr != "" {
			t.Fatalf("touch printed %q / %q", res.stdout, res.stderr)
		}
		m := statLines(t, r.ok("stat", "tc/a").stdout)
		if m["type"] != "file" || m["size"] != "0" {
			t.Fatalf("touched file: %v", m)
		}
		// An existing file keeps its contents and generation.
		r.ok("put", "tc/a", "data")
		before := statLines(t, r.ok("stat", "tc/a").stdout)
		r.ok("touch", "tc/a")
		after := statLines(t, r.ok("stat", "tc/a").stdout)
		if got := r.ok("cat", "tc/a").stdout; got != "data" {
			t.Fatalf("touch changed the contents to %q", got)
		}
		if before["content generation"] != after["content generation"] || before["mtime"] != after["mtime"] {
			t.Fatalf("touch changed the file: %v -> %v", before, after)
		}
		// A directory is left as it is.
		r.ok("touch", "tc")
		if m := statLines(t, r.ok("stat", "tc").stdout); m["type"] != "directory" {
			t.Fatalf("touch on a directory: %v", m)
		}
		// Parents must exist; the error names the node.
		r.fails(exitError, "touch /ls/t/tc/no/x", "touch", "tc/no/x")
		r.fails(exitError, "not found", "stat", "tc/no")
		r.fails(exitUsage, "want at least 1", "touch")
		var js struct{ Touched []string }
		if err := json.Unmarshal([]byte(r.ok("--json", "touch", "tc/c").stdout), &js); err != nil ||
			len(js.Touched) != 1 || js.Touched[0] != "/ls/t/tc/c" {
			t.Fatalf("touch --json: %+v %v", js, err)
		}
	})

	t.Run("Status", func(t *testing.T) {
		r := cliRunner{t, flags}
		out := r.ok("status").stdout
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) != 2+len(c.Addrs()) || !strings.HasPrefix(lines[0], "cell t: master ") ||
			!strings.HasPrefix(lines[1], "ID ") {
			t.Fatalf("status:\n%s", out)
		}
		masters := 0
		for i, a := range c.Addrs() {
			f := strings.Fields(lines[2+i])
			if len(f) != 10 || f[1] != a || f[2] == "down" {
				t.Fatalf("status row %q (want %s up)", lines[2+i], a)
			}
			if f[3] == "*" {
				masters++
				if f[2] != "leader" || !strings.Contains(lines[0], a) {
					t.Fatalf("master row %q, first line %q", lines[2+i], lines[0])
				}
			}
		}
		if masters != 1 {
			t.Fatalf("%d masters in\n%s", masters, out)
		}

		var rows []statusRow
		if err := json.Unmarshal([]byte(r.ok("--json", "status").stdout), &rows); err != nil {
			t.Fatal(err)
		}
		masters = 0
		for i, row := range rows {
			if row.Addr != c.Addrs()[i] || !row.Up || row.Status == nil || row.Status.Cell != "t" {
				t.Fatalf("status --json row %d: %+v", i, row)
			}
			if row.IsMaster {
				masters++
			}
		}
		if masters != 1 {
			t.Fatalf("status --json: %d masters: %+v", masters, rows)
		}

		// Given one replica, status asks the members its answer names.
		one := cliRunner{t, []string{"--cell", "t", "--replicas", c.Addrs()[2], "--timeout", "20s"}}
		rows = nil
		if err := json.Unmarshal([]byte(one.ok("--json", "status").stdout), &rows); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, row := range rows {
			if !row.Up || seen[row.Addr] {
				t.Fatalf("status --json given one replica: row %+v down or repeated in %+v", row, rows)
			}
			seen[row.Addr] = true
		}
		for _, a := range c.Addrs() {
			if !seen[a] {
				t.Fatalf("status --json given only %s does not show member %s: %+v", c.Addrs()[2], a, rows)
			}
		}

		// Nothing listens: every replica is down and there is no master.
		var dead []string
		for _, p := range fixtures.FreePorts(t, 2) {
			dead = append(dead, "127.0.0.1:"+strconv.Itoa(p))
		}
		d := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(dead, ","), "--timeout", "5s"}}
		res := d.fails(exitError, "no quorum", "status")
		if strings.Count(res.stdout, " down ") != 2 || !strings.Contains(res.stdout, "no quorum") {
			t.Fatalf("status of a dead cell:\n%s", res.stdout)
		}
		res = d.fails(exitError, "no_quorum", "--json", "status")
		if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || len(rows) != 2 || rows[0].Up || rows[0].Error == "" {
			t.Fatalf("status --json of a dead cell: %q (%v)", res.stdout, err)
		}
		// One replica down of a live cell: still a master.
		mixed := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(append(c.Addrs(), dead[0]), ","), "--timeout", "5s"}}
		if out := mixed.ok("status").stdout; strings.Count(out, " down ") != 1 {
			t.Fatalf("status with one dead address:\n%s", out)
		}
		r.fails(exitUsage, "want exactly 0", "status", "extra")
	})

	t.Run("Watch", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("mkdir", "w")
		r.ok("put", "w/f", "v1")
		other := c.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		// A file: contents-modified, lock-acquired, handle-invalid.
		out, errw := &syncBuffer{}, &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(append(append([]string{"lockcell"}, flags...), "watch", "--count", "3", "w/f"),
				strings.NewReader(""), out, errw)
		}()
		waitOutput(t, errw, "watching /ls/t/w/f", done)
		h, err := other.Open(ctx, c.Name("w/f"), client.Read|client.Write)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			t.Fatal(err)
		}
		if err := h.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-done:
			if code != exitOK {
				t.Fatalf("watch: exit %d, stderr %q", code, errw.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("watch did not end; stdout so far %q", out.String())
		}
		// Each line: TIME KIND PATH and the node's position after the
		// change, which only moves forward (none for the deleted node).
		var kinds []string
		pos := map[string][]uint64{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[2] != "/ls/t/w/f" {
				t.Fatalf("watch line %q", line)
			}
			if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
				t.Fatalf("watch line %q: %v", line, err)
			}
			kinds = append(kinds, f[1])
			kv := map[string]uint64{}
			for _, w := range f[3:] {
				k, v, ok := strings.Cut(w, "=")
				n, err := strconv.ParseUint(v, 10, 64)
				if !ok || err != nil {
					t.Fatalf("watch line %q: field %q", line, w)
				}
				kv[k] = n
			}
			if kv["epoch"] == 0 {
				t.Fatalf("watch line %q: no epoch", line)
			}
			pos[f[1]] = []uint64{kv["instance"], kv["content"], kv["lock"]}
		}
		if strings.Join(kinds, " ") != "contents-modified lock-acquired handle-invalid" {
			t.Fatalf("watch events %v", kinds)
		}
		mod, acq := pos["contents-modified"], pos["lock-acquired"]
		if mod[0] == 0 || acq[0] != mod[0] || mod[1] == 0 || acq[1] != mod[1] || acq[2] <= mod[2] {
			t.Fatalf("watch positions: contents-modified %v, lock-acquired %v", mod, acq)
		}

		// A directory, --json: child-added and child-removed with the child.
		out, errw = &syncBuffer{}, &syncBuffer{}
		go func() {
			done <- run(append(append([]string{"lockcell"}, flags...), "--json", "watch", "--count", "2", "w"),
				strings.NewReader(""), out, errw)
		}()
		waitOutput(t, out, `"watching"`, done)
		r.ok("touch", "w/kid")
		r.ok("rm", "w/kid")
		if code := <-done; code != exitOK {
			t.Fatalf("watch --json: exit %d, stderr %q", code, errw.String())
		}
		var evs []watchEvent
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ev watchEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("watch --json line %q: %v", line, err)
			}
			evs = append(evs, ev)
		}
		if len(evs) != 3 || evs[0].Kind != "watching" ||
			evs[1] != (watchEvent{Time: evs[1].Time, Kind: "child-added", Path: "/ls/t/w", Child: "kid",
				Epoch: evs[1].Epoch, Instance: evs[1].Instance, ContentGen: evs[1].ContentGen, LockGen: evs[1].LockGen}) ||
			evs[2] != (watchEvent{Time: evs[2].Time, Kind: "child-removed", Path: "/ls/t/w", Child: "kid",
				Epoch: evs[2].Epoch, Instance: evs[2].Instance, ContentGen: evs[2].ContentGen, LockGen: evs[2].LockGen}) {
			t.Fatalf("watch --json events %+v", evs)
		}
		if evs[1].Epoch == 0 || evs[1].Instance == 0 || evs[2].Instance != evs[1].Instance ||
			evs[2].ContentGen < evs[1].ContentGen {
			t.Fatalf("watch --json positions %+v", evs)
		}

		// A fail-over the session survives: a reannounce repeating the
		// last position heard; --count does not count it.
		out, errw = &syncBuffer{}, &syncBuffer{}
		go func() {
			done <- run(append(append([]string{"lockcell"}, flags...), "--json", "watch", "--count", "2", "w"),
				strings.NewReader(""), out, errw)
		}()
		waitOutput(t, out, `"watching"`, done)
		r.ok("touch", "w/kid2")
		waitOutput(t, out, `"child-added"`, done)
		stopped := c.StopMaster()
		waitOutput(t, out, `"reannounce"`, done)
		c.Start(stopped)
		r.ok("touch", "w/kid3")
		if code := <-done; code != exitOK {
			t.Fatalf("watch --json: exit %d, stderr %q", code, errw.String())
		}
		var added []watchEvent
		var re *watchEvent
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ev watchEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("watch --json line %q: %v", line, err)
			}
			switch ev.Kind {
			case "child-added":
				added = append(added, ev)
			case "reannounce":
				re = &ev
			}
		}
		if len(added) != 2 || re == nil || re.Path != "/ls/t/w" || re.Epoch <= added[0].Epoch ||
			re.Instance != added[0].Instance || re.ContentGen != added[0].ContentGen ||
			added[1].Epoch != re.Epoch || added[1].Instance != re.Instance {
			t.Fatalf("watch across a fail-over: %q", out.String())
		}

		r.fails(exitError, "watch /ls/t/w/missing", "watch", "w/missing")
		r.fails(exitUsage, "--count", "watch", "--count", "-1", "w")
	})

	t.Run("RmRecursiveConfirm", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("mkdir", "-p", "rr/a/b")
		r.ok("touch", "rr/a/b/f")
		res := r.fails(exitUsage, "--yes", "rm", "-r", "rr")
		if !strings.Contains(res.stderr, "not a terminal") {
			t.Fatalf("rm -r without --yes: %q", res.stderr)
		}
		r.ok("stat", "rr/a/b/f") // nothing was removed
		r.fails(exitUsage, "--yes", "rm", "-R", "rr/a", "rr")
		r.ok("rm", "-r", "--yes", "rr")
		r.fails(exitError, "not found", "stat", "rr")
		// Without -r nothing is asked.
		r.ok("touch", "rr1")
		r.ok("rm", "rr1")
		// The question, answered through a plain reader (confirm itself).
		var errb bytes.Buffer
		e := &env{stdin: strings.NewReader("y\n"), stderr: &errb}
		if !e.confirm("rm: remove x?") || errb.String() != "rm: remove x? [y/N] " {
			t.Fatalf("confirm(y) printed %q", errb.String())
		}
		for _, ans := range []string{"\n", "n\n", "", "nope\n"} {
			e := &env{stdin: strings.NewReader(ans), stderr: &errb}
			if e.confirm("q") {
				t.Fatalf("confirm(%q) = true", ans)
			}
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a running command and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitOutput waits until b contains want, failing if the command ends
// first.
func waitOutput(t *testing.T, b *syncBuffer, want string, done chan int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("the command exited %d before printing %q: %q", code, want, b.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %q", want, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
