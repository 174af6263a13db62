package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"lockcell/client/admin"
	"lockcell/fixtures"
)

func TestShellScript(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	r := cliRunner{t, flags}

	t.Run("Lines", func(t *testing.T) {
		script := strings.Join([]string{
			"# a comment",
			"mkdir d",
			"cd d",
			"pwd",
			"put f hello",
			"cat f",
			"",
			"cat missing",
			"cd /ls/t/nope",
			"pwd",
			`put "g" 'a b'`,
			"ls",
			"cd ..",
			"pwd",
			"cat d/f",
			"cd",
			"exit",
			"put after x",
		}, "\n") + "\n"
		res := r.run(script, "shell")
		if res.code != exitOK {
			t.Fatalf("shell: exit %d; stderr %q", res.code, res.stderr)
		}
		want := "/ls/t/d\nhello/ls/t/d\nf\ng\n/ls/t\nhello"
		if res.stdout != want {
			t.Fatalf("stdout = %q, want %q; stderr %q", res.stdout, want, res.stderr)
		}
		for _, w := range []string{"cat /ls/t/d/missing: not found", "cd /ls/t/nope: not found"} {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("stderr %q does not mention %q", res.stderr, w)
			}
		}
		if got := r.ok("cat", "d/g").stdout; got != "a b" {
			t.Fatalf("cat d/g = %q", got)
		}
		// Nothing after exit runs.
		r.fails(exitError, "not found", "stat", "after")
	})

	t.Run("Errors", func(t *testing.T) {
		script := "put\ncd a b\ncat 'open\nput file x\ncd file\nshell\nexit 3\n"
		res := r.run(script, "shell")
		if res.code != 3 {
			t.Fatalf("exit 3: got %d; stderr %q", res.code, res.stderr)
		}
		for _, w := range []string{"put: want exactly", "cd: want at most 1", "unterminated ' quote",
			"cd /ls/t/file: not a directory", "already in the shell"} {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("stderr %q does not mention %q", res.stderr, w)
			}
		}
		// At end of input a script exits with its last line's status.
		if res := r.run("cat nothing-here\n", "shell"); res.code != exitError {
			t.Fatalf("script ending in an error: exit %d", res.code)
		}
		if res := r.run("", "shell"); res.code != exitOK {
			t.Fatalf("empty script: exit %d", res.code)
		}
		r.fails(exitUsage, "want exactly 0", "shell", "extra")
	})

	t.Run("OneSession", func(t *testing.T) {
		res := r.run("put s/a 1\n--json sessions\nput s/b 2\n--json sessions\n", "shell")
		if res.code != exitOK {
			t.Fatalf("shell: exit %d; stderr %q", res.code, res.stderr)
		}
		dec := json.NewDecoder(strings.NewReader(res.stdout))
		var ids [2][]uint64
		for i := range ids {
			var list []admin.SessionInfo
			if err := dec.Decode(&list); err != nil {
				t.Fatalf("sessions output %q: %v", res.stdout, err)
			}
			for _, s := range list {
				ids[i] = append(ids[i], s.ID)
			}
		}
		if !reflect.DeepEqual(ids[0], ids[1]) {
			t.Fatalf("sessions changed between lines: %v then %v", ids[0], ids[1])
		}
	})

	t.Run("Help", func(t *testing.T) {
		res := r.run("help\nhelp put\n", "shell")
		if res.code != exitOK {
			t.Fatalf("shell: exit %d; stderr %q", res.code, res.stderr)
		}
		for _, w := range []string{"cd [DIR]", "put NAME VALUE", "sessions", "lock NAME [NAME...] -- CMD", "--if-generation"} {
			if !strings.Contains(res.stdout, w) {
				t.Errorf("help output %q does not mention %q", res.stdout, w)
			}
		}
		if got := r.ok("shell", "--help").stdout; !strings.Contains(got, "Example") {
			t.Errorf("shell --help has no example: %q", got)
		}
	})

	t.Run("Complete", func(t *testing.T) {
		r.ok("mkdir", "-p", "cmp/fdir")
		r.ok("put", "cmp/foo", "x")
		r.ok("put", "cmp/fab", "x")
		r.ok("put", "cmp/gone", "x")
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, cell: "t", replicas: c.Addrs(), timeout: 20 * time.Second}
		sh := newShell(e)
		defer sh.close()

		check := func(line string, pos int, wantWord string, want ...string) {
			t.Helper()
			word, got := sh.complete(line, pos)
			if word != wantWord || !reflect.DeepEqual(got, want) {
				t.Errorf("complete(%q, %d) = %q %q, want %q %q", line, pos, word, got, wantWord, want)
			}
		}
		check("se", 2, "se", "selfcheck", "seq", "sessions")
		check("  c", 3, "c", "cat", "cd", "counter")
		check("sta", 3, "sta", "stat", "status")
		check("cat cmp/f", 9, "cmp/f", "cmp/fab", "cmp/fdir/", "cmp/foo")
		check("cat cmp/f and more", 9, "cmp/f", "cmp/fab", "cmp/fdir/", "cmp/foo")
		check("cd cm", 5, "cm", "cmp/")
		check("cat /ls/t/cmp/g", 15, "/ls/t/cmp/g", "/ls/t/cmp/gone")
		check("cat /l", 6, "/l", "/ls/t/")
		check("cat nosuch/x", 12, "nosuch/x")

		if err := sh.cd(t.Context(), "cmp"); err != nil {
			t.Fatal(err)
		}
		check("cat f", 5, "f", "fab", "fdir/", "foo")
		check("ls ../cm", 8, "../cm", "../cmp/")

		// What readline gets: the suffixes, files with a space after them.
		got, n := completer{sh}.Do([]rune("rm f"), 4)
		if n != 1 || len(got) != 3 || string(got[0]) != "ab " || string(got[1]) != "dir/" || string(got[2]) != "oo " {
			t.Errorf("Do = %q, %d", got, n)
		}
	})
}

func TestShellResolveNames(t *testing.T) {
	e := &env{cell: "t"}
	sh := newShell(e)
	sh.cwd = "/ls/t/d"
	app := newApp(e)
	for _, tc := range []struct{ in, want []string }{
		{[]string{"cat", "f"}, []string{"cat", "/ls/t/d/f"}},
		{[]string{"cat", "../x", "/ls/t/abs"}, []string{"cat", "/ls/t/x", "/ls/t/abs"}},
		{[]string{"--json", "stat", "f"}, []string{"--json", "stat", "/ls/t/d/f"}},
		{[]string{"--timeout", "5s", "stat", "f"}, []string{"--timeout", "5s", "stat", "/ls/t/d/f"}},
		{[]string{"put", "--if-generation", "3", "f", "v"}, []string{"put", "--if-generation", "3", "/ls/t/d/f", "v"}},
		{[]string{"put", "--no-parents", "f", "v"}, []string{"put", "--no-parents", "/ls/t/d/f", "v"}},
		{[]string{"lock", "--try", "l", "--", "cmd", "arg"}, []string{"lock", "--try", "/ls/t/d/l", "--", "cmd", "arg"}},
		{[]string{"rm", "-r", "--yes", "a", "b"}, []string{"rm", "-r", "--yes", "/ls/t/d/a", "/ls/t/d/b"}},
		{[]string{"ls"}, []string{"ls", "/ls/t/d"}},
		{[]string{"ls", "-l"}, []string{"ls", "-l", "/ls/t/d"}},
		{[]string{"seq", "check", "x"}, []string{"seq", "check", "x"}},
		{[]string{"nosuchverb", "x"}, []string{"nosuchverb", "x"}},
	} {
		if got := sh.resolveNames(app, tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("resolveNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"put f hello", []string{"put", "f", "hello"}},
		{`  put  "a b"   'c "d"' `, []string{"put", "a b", `c "d"`}},
		{`put x "" y`, []string{"put", "x", "", "y"}},
		{`a\ b "q\"x" 'n\o'`, []string{"a b", `q"x`, `n\o`}},
		{`pre"mid"post`, []string{"premidpost"}},
	} {
		got, err := splitWords(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`"open`, `'open`, `end\`} {
		if _, err := splitWords(bad); err == nil {
			t.Errorf("splitWords(%q): no error", bad)
		}
	}
}
