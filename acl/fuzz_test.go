package acl

// FuzzACLFile (docs/testplan.md#fuzzing): Parse of arbitrary file contents
// never panics, allocates at most 64 x input + 1 MiB, rejects with a
// *ParseError (wrapping ErrInvalidACL) that names the first bad line, and
// accepts exactly the set of principals the file's lines hold, which Format
// renders back to an equal List. FuzzACLFormat: Format of arbitrary names
// either rejects them (ErrInvalidACL) or parses back to New(names).

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"lockcell/fixtures/fuzzbound"
)

// fzLines is the reference reading of an ACL file: its 1-based lines,
// trimmed of ASCII white space, with blank and comment lines marked.
func fzLines(in []byte) (lines []string, skip []bool) {
	for _, l := range strings.Split(string(in), "\n") {
		l = strings.Trim(l, " \t\r\v\f")
		lines = append(lines, l)
		skip = append(skip, l == "" || l[0] == '#')
	}
	return lines, skip
}

// fzValid is the format's principal rule written independently: "*", or
// 1-255 bytes of 0x21-0x7e not starting with '#'.
func fzValid(p string) bool {
	if p == Wildcard {
		return true
	}
	if p == "" || len(p) > 255 || p[0] == '#' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return false
		}
	}
	return true
}

func FuzzACLFile(f *testing.F) {
	for _, s := range []string{
		"alice\nbob\n", "*\n", "# only a comment\n", "\n\n\n", " \talice \r\n", "alice\nalice\n",
		"a\x00b\n", "al ice\n", "alice\n\xff\n", "é\n", "#x\n#y\nz", strings.Repeat("a", 255) + "\n" + strings.Repeat("b", 256),
		"\x85alice\n", "alice\u00a0\n", "*\n#*\n* *\n", strings.Repeat("p\n", 3000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var l List
		var err error
		alloc := fuzzbound.Alloc(func() { l, err = Parse(in) })
		if limit := fuzzbound.Limit(len(in)); alloc > limit {
			t.Fatalf("Parse of %d bytes allocated %d, limit %d", len(in), alloc, limit)
		}
		lines, skip := fzLines(in)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidACL) {
				t.Fatalf("untyped rejection %v", err)
			}
			if pe.Line < 1 || pe.Line > len(lines) {
				t.Fatalf("rejection names line %d of %d", pe.Line, len(lines))
			}
			if bad := lines[pe.Line-1]; skip[pe.Line-1] || fzValid(bad) {
				t.Fatalf("rejection names line %d %q, which is fine", pe.Line, bad)
			}
			for i := 0; i < pe.Line-1; i++ {
				if !skip[i] && !fzValid(lines[i]) {
					t.Fatalf("rejection names line %d, but line %d %q is bad already", pe.Line, i+1, lines[i])
				}
			}
			if len(pe.Text) > 64+len("...") || len(err.Error()) > 1024 {
				t.Fatalf("rejection carries %d bytes of the line (%d in all)", len(pe.Text), len(err.Error()))
			}
			return
		}
		// Accepted: the list is exactly the set of the file's principals.
		var want []string
		for i, line := range lines {
			if skip[i] {
				continue
			}
			if !fzValid(line) {
				t.Fatalf("Parse accepted line %d %q", i+1, line)
			}
			want = append(want, line)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if got := l.Principals(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("Parse = %q, the file lists %q", got, want)
		}
		wild := slices.Contains(want, Wildcard)
		for _, p := range append(want, "", Wildcard, "#x", "nobody-listed", "a b") {
			if got, exp := l.Contains(p), p != Wildcard && fzValid(p) && (wild || slices.Contains(want, p)); got != exp {
				t.Fatalf("Contains(%q) = %v, want %v (list %v)", p, got, exp, l)
			}
		}
		// Format is the inverse of Parse.
		out, err := Format(l.Principals())
		if err != nil {
			t.Fatalf("Format(Parse(x)) failed: %v", err)
		}
		back, err := Parse(out)
		if err != nil || !back.Equal(l) {
			t.Fatalf("Parse(Format(Parse(x))) = %v, %v; want %v", back, err, l)
		}
		if out2, _ := Format(back.Principals()); !bytes.Equal(out, out2) {
			t.Fatalf("Format is not stable: %q / %q", out, out2)
		}
	})
}

func FuzzACLFormat(f *testing.F) {
	f.Add("alice", "bob", "*")
	f.Add("", "a", "a")
	f.Add("a\nb", "#c", "d e")
	f.Add(strings.Repeat("x", 256), "\x7f", "ü")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		names := []string{a, b, c}
		out, err := Format(names)
		l, nerr := New(names...)
		if (err == nil) != (nerr == nil) {
			t.Fatalf("Format error %v, New error %v", err, nerr)
		}
		allValid := fzValid(a) && fzValid(b) && fzValid(c)
		if err != nil {
			if !errors.Is(err, ErrInvalidACL) {
				t.Fatalf("untyped Format rejection %v", err)
			}
			if allValid {
				t.Fatalf("Format rejected valid names %q: %v", names, err)
			}
			return
		}
		if !allValid {
			t.Fatalf("Format accepted %q", names)
		}
		back, err := Parse(out)
		if err != nil || !back.Equal(l) {
			t.Fatalf("Parse(Format(%q)) = %v, %v; want %v", names, back, err, l)
		}
		for _, p := range names {
			if p != Wildcard && !back.Contains(p) {
				t.Fatalf("%q formatted but not contained", p)
			}
		}
	})
}
