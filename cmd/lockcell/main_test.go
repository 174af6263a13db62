package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"lockcell/fixtures"
)

// result is what one run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the CLI against a cell the way an operator would.
type cliRunner struct {
	t     *testing.T
	flags []string
}

func (r cliRunner) run(stdin string, args ...string) result {
	r.t.Helper()
	var out, errb bytes.Buffer
	argv := append(append([]string{"lockcell"}, r.flags...), args...)
	code := run(argv, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// ok runs args and fails the test unless they exit 0.
func (r cliRunner) ok(args ...string) result {
	r.t.Helper()
	res := r.run("", args...)
	if res.code != exitOK {
		r.t.Fatalf("lockcell %s: exit %d, stderr %q", strings.Join(args, " "), res.code, res.stderr)
	}
	return res
}

// fails runs args and fails the test unless they exit with code and name
// want on stderr.
func (r cliRunner) fails(code int, want string, args ...string) result {
	r.t.Helper()
	res := r.run("", args...)
	if res.code != code {
		r.t.Fatalf("lockcell %s: exit %d, want %d; stderr %q", strings.Join(args, " "), res.code, code, res.stderr)
	}
	if !strings.Contains(res.stderr, want) {
		r.t.Fatalf("lockcell %s: stderr %q does not mention %q", strings.Join(args, " "), res.stderr, want)
	}
	return res
}

// statLines parses stat's "key: value" lines.
func statLines(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("stat line %q is not key: value", line)
		}
		m[k] = strings.TrimSpace(v)
	}
	return m
}

func TestCLI(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}

	t.Run("PutCatRoundTrip", func(t *testing.T) {
		r := cliRunner{t, flags}
		res := r.ok("put", "rt/flag", "on")
		if res.stdout != "" || res.stderr != "" {
			t.Fatalf("put printed %q / %q, want nothing", res.stdout, res.stderr)
		}
		if got := r.ok("cat", "rt/flag").stdout; got != "on" {
			t.Fatalf("cat = %q, want %q", got, "on")
		}
		// Absolute names are used as they are.
		if got := r.ok("cat", "/ls/t/rt/flag").stdout; got != "on" {
			t.Fatalf("cat absolute = %q", got)
		}
	})

	t.Run("PutStdin", func(t *testing.T) {
		r := cliRunner{t, flags}
		data := "line one\nline two\x00binary\n"
		if res := r.run(data, "put", "stdin/file", "-"); res.code != exitOK {
			t.Fatalf("put -: exit %d: %s", res.code, res.stderr)
		}
		if got := r.ok("cat", "stdin/file").stdout; got != data {
			t.Fatalf("cat = %q, want %q", got, data)
		}
	})

	t.Run("PutNoParents", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.fails(exitError, "not found", "put", "--no-parents", "np/a/b", "x")
		r.fails(exitError, "not found", "stat", "np")
	})

	t.Run("CompareAndSwap", func(t *testing.T) {
		r := cliRunner{t, flags}
		res := r.ok("--json", "put", "cas/v", "1")
		var st statJSON
		if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
			t.Fatalf("put --json output %q: %v", res.stdout, err)
		}
		gen := strconv.FormatUint(st.ContentGen, 10)
		r.ok("put", "--if-generation", gen, "cas/v", "2")
		// gen is now stale: the write must fail and change nothing.
		r.fails(exitError, "generation", "put", "--if-generation", gen, "cas/v", "3")
		if got := r.ok("cat", "cas/v").stdout; got != "2" {
			t.Fatalf("after a lost CAS cat = %q, want 2", got)
		}
		// A CAS on a missing file fails without creating it.
		r.fails(exitError, "not found", "put", "--if-generation", "1", "cas/missing", "x")
		r.fails(exitError, "not found", "cat", "cas/missing")
	})

	t.Run("Stat", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("put", "st/f", "hello")
		m := statLines(t, r.ok("stat", "st/f").stdout)
		for _, k := range []string{"name", "type", "instance", "content generation", "lock generation",
			"acl generation", "checksum", "size", "ctime", "mtime", "ephemeral", "read acl", "write acl",
			"change acl", "lock mode", "lock holders"} {
			if _, ok := m[k]; !ok {
				t.Errorf("stat has no %q line: %v", k, m)
			}
		}
		if m["name"] != "/ls/t/st/f" || m["type"] != "file" || m["size"] != "5" || m["lock mode"] != "free" ||
			len(m["checksum"]) != 16 || m["ephemeral"] != "false" {
			t.Fatalf("stat: %v", m)
		}
		// The values start in one column.
		out := r.ok("stat", "st").stdout
		col := -1
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			i := strings.Index(line, ": ") + 2
			for i < len(line) && line[i] == ' ' {
				i++
			}
			if col >= 0 && i != col {
				t.Fatalf("stat values not aligned:\n%s", out)
			}
			col = i
		}
		if m := statLines(t, out); m["type"] != "directory" {
			t.Fatalf("stat of a directory: %v", m)
		}
	})

	t.Run("Ls", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("put", "lsd/b-file", "x")
		r.ok("mkdir", "lsd/a-dir")
		if got, want := r.ok("ls", "lsd").stdout, "a-dir/\nb-file\n"; got != want {
			t.Fatalf("ls = %q, want %q", got, want)
		}
		// A name as ls prints it (trailing /) is accepted back.
		if got := r.ok("ls", "lsd/a-dir/").stdout; got != "" {
			t.Fatalf("ls of an empty dir = %q", got)
		}
		if root := r.ok("ls").stdout; !strings.Contains(root, "lsd/\n") {
			t.Fatalf("ls of the root does not show lsd/: %q", root)
		}
		long := strings.Split(strings.TrimSpace(r.ok("ls", "-l", "lsd").stdout), "\n")
		if len(long) != 2 || !strings.HasPrefix(long[0], "d--") || !strings.HasSuffix(long[0], " a-dir/") ||
			!strings.HasPrefix(long[1], "---") || !strings.HasSuffix(long[1], " b-file") {
			t.Fatalf("ls -l = %q", long)
		}
		if f := strings.Fields(long[1]); len(f) != 7 || f[1] != "1" || f[3] != "0" || f[4] != "0" {
			t.Fatalf("ls -l file line %q: want mode size gen lock-gen holders mtime name, size 1, never locked", long[1])
		}
		if got := r.ok("ls", "lsd/b-file").stdout; got != "b-file\n" {
			t.Fatalf("ls of a file = %q", got)
		}
	})

	t.Run("Mkdir", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.fails(exitError, "not found", "mkdir", "mk/a/b")
		r.ok("mkdir", "-p", "mk/a/b", "mk/c")
		r.ok("mkdir", "-p", "mk/a/b") // existing: fine with -p
		r.fails(exitError, "exists", "mkdir", "mk/a/b")
		if got := r.ok("ls", "mk").stdout; got != "a/\nc/\n" {
			t.Fatalf("ls mk = %q", got)
		}
		r.ok("put", "mk/file", "x")
		r.fails(exitError, "not a directory", "mkdir", "-p", "mk/file/sub")
		r.fails(exitError, "is a file", "mkdir", "-p", "mk/file") // as os.MkdirAll: not a directory
	})

	t.Run("Rm", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.ok("put", "rm/d/f1", "1")
		r.ok("put", "rm/d/sub/f2", "2")
		r.ok("put", "rm/g", "3")
		r.ok("rm", "rm/g")
		r.fails(exitError, "not found", "cat", "rm/g")
		r.fails(exitError, "not found", "rm", "rm/g")
		res := r.fails(exitError, "not empty", "rm", "rm/d")
		if !strings.Contains(res.stderr, "rm /ls/t/rm/d") {
			t.Fatalf("rm error does not name the operation and path: %q", res.stderr)
		}
		r.ok("rm", "-r", "--yes", "rm/d")
		if got := r.ok("ls", "rm").stdout; got != "" {
			t.Fatalf("after rm -r, ls rm = %q", got)
		}
		r.fails(exitError, "whole cell", "rm", "-r", "/ls/t")
	})

	t.Run("InvalidName", func(t *testing.T) {
		r := cliRunner{t, flags}
		for _, args := range [][]string{
			{"cat", "bad name"},
			{"put", "a/../b", "x"},
			{"stat", "/ls/other/x"},
			{"ls", "a//b"},
			{"mkdir", "ok", "bad*"},
		} {
			r.fails(exitError, "invalid name", args...)
		}
		r.fails(exitError, "not found", "stat", "ok") // mkdir did nothing
	})

	t.Run("UsageErrors", func(t *testing.T) {
		r := cliRunner{t, flags}
		r.fails(exitUsage, "put", "put", "only-name")
		r.fails(exitUsage, "cat", "cat")
		r.fails(exitUsage, "stat", "stat", "a", "b")
		r.fails(exitUsage, "unknown command", "frobnicate")
		r.fails(exitUsage, "no command given")
		r.fails(exitUsage, "flag provided but not defined", "ls", "--bogus")
		r.fails(exitUsage, "if-generation", "put", "--if-generation", "notanumber", "a", "b")
		r.fails(exitUsage, "--bogus is not an option of lockcell put", "put", "a", "b", "--bogus", "3")
		r.fails(exitUsage, "No help topic", "help", "nosuch")
		cliRunner{t, nil}.fails(exitUsage, "--cell", "--cell", "bad/cell", "ls")
		cliRunner{t, nil}.fails(exitUsage, "--replicas", "--replicas", " , ", "ls")
		if res := r.ok("--help"); !strings.Contains(res.stdout, "put") {
			t.Fatalf("--help = %q", res.stdout)
		}
		if res := r.ok("put", "--help"); !strings.Contains(res.stdout, "--if-generation") {
			t.Fatalf("put --help = %q", res.stdout)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		r := cliRunner{t, append(append([]string{}, flags...), "--json")}
		decode := func(s string) map[string]any {
			t.Helper()
			var m map[string]any
			dec := json.NewDecoder(strings.NewReader(s))
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("output %q is not JSON: %v", s, err)
			}
			if dec.More() {
				t.Fatalf("output %q holds more than one JSON document", s)
			}
			return m
		}
		put := decode(r.ok("put", "js/f", "data").stdout)
		if put["name"] != "/ls/t/js/f" || put["size"] != float64(4) || put["content_generation"] == float64(0) {
			t.Fatalf("put --json = %v", put)
		}
		cat := decode(r.ok("cat", "js/f").stdout)
		if cat["contents"] != "data" || cat["contents_base64"] != "ZGF0YQ==" {
			t.Fatalf("cat --json = %v", cat)
		}
		st := decode(r.ok("stat", "js/f").stdout)
		if st["dir"] != false || st["lock_mode"] != "free" || st["checksum"] == "" {
			t.Fatalf("stat --json = %v", st)
		}
		ls := decode(r.ok("ls", "-l", "js").stdout)
		ents, _ := ls["entries"].([]any)
		if len(ents) != 1 || ents[0].(map[string]any)["name"] != "f" || ents[0].(map[string]any)["stat"] == nil {
			t.Fatalf("ls --json = %v", ls)
		}
		if m := decode(r.ok("mkdir", "-p", "js/d").stdout); m["dirs"] == nil {
			t.Fatalf("mkdir --json = %v", m)
		}
		if m := decode(r.ok("rm", "js/d").stdout); m["removed"] == nil {
			t.Fatalf("rm --json = %v", m)
		}
		// Errors: one JSON document on stderr, nothing on stdout.
		res := r.fails(exitError, "not_found", "cat", "js/missing")
		if e := decode(res.stderr); e["code"] != "not_found" || !strings.Contains(e["error"].(string), "/ls/t/js/missing") {
			t.Fatalf("error JSON = %v", e)
		}
		if res.stdout != "" {
			t.Fatalf("failed cat printed %q on stdout", res.stdout)
		}
		res = r.fails(exitUsage, "usage", "cat")
		if e := decode(res.stderr); e["code"] != "usage" {
			t.Fatalf("usage error JSON = %v", e)
		}
		res = cliRunner{t, []string{"--json", "--timeout", "-1s"}}.fails(exitUsage, "usage", "ls")
		decode(res.stderr)
	})
}

// TestNoCell checks that a cell nobody runs fails with exit 1 (every
// replica refused the connection), and that bad names fail before any
// dialing.
func TestNoCell(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(fixtures.FreePorts(t, 1)[0])
	r := cliRunner{t, []string{"--cell", "t", "--replicas", addr, "--timeout", "300ms"}}
	r.fails(exitError, "ls /ls/t", "ls")
	r.fails(exitError, "invalid name", "cat", "no good")
	var out bytes.Buffer
	if code := run([]string{"lockcell", "--json", "--replicas", addr, "--timeout", "300ms", "ls"}, strings.NewReader(""), io.Discard, &out); code != exitError {
		t.Fatalf("exit %d", code)
	}
	var e map[string]string
	if err := json.Unmarshal(out.Bytes(), &e); err != nil || e["code"] != "refused" {
		t.Fatalf("error JSON %q: %v", out.String(), err)
	}
}
