package acl

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// mapSource is a Source backed by file contents, parsed on construction.
type mapSource map[string]List

func (m mapSource) Lookup(name string) (List, bool) {
	l, ok := m[name]
	return l, ok
}

func mustList(t testing.TB, ps ...string) List {
	t.Helper()
	l, err := New(ps...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPermString(t *testing.T) {
	for _, tc := range []struct {
		p    Perm
		want string
	}{
		{Read, "read"}, {Write, "write"}, {ChangeACL, "change-acl"}, {0, "perm(0)"}, {9, "perm(9)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Perm(%d).String() = %q, want %q", tc.p, got, tc.want)
		}
	}
	for _, p := range Perms() {
		got, err := ParsePerm(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePerm(%q) = %v, %v", p.String(), got, err)
		}
		if !p.Valid() {
			t.Errorf("%v not Valid", p)
		}
	}
	if _, err := ParsePerm("admin"); err == nil {
		t.Error("ParsePerm(admin) succeeded")
	}
	if Perm(0).Valid() || Perm(4).Valid() {
		t.Error("invalid perms report Valid")
	}
}

func TestNamesForAndInherit(t *testing.T) {
	n := Names{Read: "r", Write: "w", ChangeACL: "c"}
	for p, want := range map[Perm]string{Read: "r", Write: "w", ChangeACL: "c", 0: "", 7: ""} {
		if got := n.For(p); got != want {
			t.Errorf("For(%v) = %q, want %q", p, got, want)
		}
	}
	if got := Inherit(n); got != n {
		t.Errorf("Inherit = %+v, want %+v", got, n)
	}
	if got := Inherit(Names{}); got != (Names{}) {
		t.Errorf("Inherit(zero) = %+v", got)
	}
	node := NodeACL{Names: n, Owner: "o"}
	if node.For(Write) != "w" {
		t.Error("NodeACL does not expose Names.For")
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"only blanks and comments", "\n  \n# ops team\n\t# more\n", nil},
		{"one", "alice", []string{"alice"}},
		{"trailing newline", "alice\n", []string{"alice"}},
		{"trim spaces tabs CR", "  alice \t\r\n\tbob\r\n", []string{"alice", "bob"}},
		{"sorted and deduplicated", "carol\nalice\nbob\nalice\n  carol  \n", []string{"alice", "bob", "carol"}},
		{"wildcard", "# everyone\n*\n", []string{"*"}},
		{"wildcard and names", "bob\n*\n*\n", []string{"*", "bob"}},
		{"punctuation allowed", "svc:lockd@prod\nCN=x,O=y\nuser/host\n", []string{"CN=x,O=y", "svc:lockd@prod", "user/host"}},
		{"star inside a name is literal", "ops-*\n", []string{"ops-*"}},
		{"max length", strings.Repeat("a", 255), []string{strings.Repeat("a", 255)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := l.Principals(); !slices.Equal(got, tc.want) {
				t.Fatalf("Principals = %q, want %q", got, tc.want)
			}
			if l.Len() != len(tc.want) {
				t.Fatalf("Len = %d, want %d", l.Len(), len(tc.want))
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		line   int
		reason string
	}{
		{"space inside", "alice\nbob smith\n", 2, "not printable ASCII"},
		{"inline comment", "alice # admin\n", 1, "not printable ASCII"},
		{"tab inside", "\n\nal\tice", 3, "not printable ASCII"},
		{"NUL", "ok\n\nx\x00y\n", 3, "0x00"},
		{"DEL", "a\x7f", 1, "0x7f"},
		{"non-ASCII", "# c\nrené\n", 2, "not printable ASCII"},
		{"invalid UTF-8", "\xff\xfe", 1, "not printable ASCII"},
		{"too long", "a\n" + strings.Repeat("b", 256) + "\n", 2, "longer than 255"},
		{"first bad line wins", "ok\na b\nc d\n", 2, ""},
		{"lone CR line is blank but CR inside is not", "\r\na\rb\n", 2, "0x0d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse succeeded: %v", l)
			}
			if !errors.Is(err, ErrInvalidACL) {
				t.Fatalf("error %v does not wrap ErrInvalidACL", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *ParseError", err)
			}
			if pe.Line != tc.line {
				t.Fatalf("Line = %d, want %d (%v)", pe.Line, tc.line, err)
			}
			if !strings.Contains(err.Error(), "line ") || !strings.Contains(pe.Reason, tc.reason) {
				t.Fatalf("error %q lacks line or reason %q", err, tc.reason)
			}
			if l.Len() != 0 {
				t.Fatalf("failed Parse returned a non-empty list %v", l)
			}
		})
	}
}

func TestContains(t *testing.T) {
	named := mustList(t, "alice", "bob")
	star := mustList(t, "*")
	var zero List
	for _, tc := range []struct {
		name string
		l    List
		who  string
		want bool
	}{
		{"listed", named, "alice", true},
		{"listed 2", named, "bob", true},
		{"unlisted", named, "carol", false},
		{"case sensitive", named, "Alice", false},
		{"no prefix match", named, "ali", false},
		{"wildcard grants anyone", star, "carol", true},
		{"wildcard does not grant empty", star, "", false},
		{"wildcard does not grant invalid name", star, "bad name", false},
		{"star is not a principal", star, "*", false},
		{"zero list grants nobody", zero, "alice", false},
		{"empty never granted", named, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Contains(tc.who); got != tc.want {
				t.Fatalf("Contains(%q) = %v, want %v", tc.who, got, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	out, err := Format([]string{"bob", "*", "alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "*\nalice\nbob\n"; string(out) != want {
		t.Fatalf("Format = %q, want %q", out, want)
	}
	if out, err := Format(nil); err != nil || len(out) != 0 {
		t.Fatalf("Format(nil) = %q, %v", out, err)
	}
	for _, bad := range []string{"", "a b", "#x", strings.Repeat("x", 256), "é", "a\nb"} {
		if _, err := Format([]string{"ok", bad}); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("Format(%q) err = %v, want ErrInvalidACL", bad, err)
		}
		if _, err := New(bad); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("New(%q) err = %v, want ErrInvalidACL", bad, err)
		}
		if err := ValidPrincipal(bad); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("ValidPrincipal(%q) err = %v, want ErrInvalidACL", bad, err)
		}
	}
	l := mustList(t, "zed", "amy", "*")
	out, _ = Format(l.Principals())
	back, err := Parse(out)
	if err != nil || !back.Equal(l) {
		t.Fatalf("round trip: %v %v vs %v", back, err, l)
	}
	if l.String() != "[* amy zed]" {
		t.Fatalf("String = %q", l.String())
	}
	// Principals returns a copy.
	ps := l.Principals()
	ps[0] = "mutated"
	if l.Principals()[0] != "*" {
		t.Fatal("Principals aliases the list")
	}
}

func TestCheck(t *testing.T) {
	src := mapSource{
		"readers": mustList(t, "alice", "bob"),
		"writers": mustList(t, "alice"),
		"ops":     mustList(t, "carol"),
		"all":     mustList(t, "*"),
		"empty":   {},
	}
	pol := Policy{Admin: "root"}
	full := NodeACL{Names: Names{Read: "readers", Write: "writers", ChangeACL: "ops"}, Owner: "owen"}
	defaults := NodeACL{Owner: "owen"}
	ownerless := NodeACL{}
	missing := NodeACL{Names: Names{Read: "gone", Write: "gone", ChangeACL: "gone"}, Owner: "owen"}
	wild := NodeACL{Names: Names{Read: "all", Write: "all", ChangeACL: "ops"}}
	emptyFile := NodeACL{Names: Names{Read: "empty", Write: "empty", ChangeACL: "empty"}, Owner: "owen"}

	type tc struct {
		name   string
		src    Source
		who    string
		node   NodeACL
		p      Perm
		pol    Policy
		allow  bool
		acl    string // expected DeniedError.ACL on denial
		reason string // substring of the denial message
	}
	for _, c := range []tc{
		// Named ACL files.
		{name: "listed reader", src: src, who: "alice", node: full, p: Read, pol: pol, allow: true},
		{name: "listed reader 2", src: src, who: "bob", node: full, p: Read, pol: pol, allow: true},
		{name: "unlisted reader", src: src, who: "carol", node: full, p: Read, pol: pol, acl: "readers", reason: "not listed"},
		{name: "listed writer", src: src, who: "alice", node: full, p: Write, pol: pol, allow: true},
		{name: "reader cannot write", src: src, who: "bob", node: full, p: Write, pol: pol, acl: "writers", reason: "not listed"},
		{name: "listed acl changer", src: src, who: "carol", node: full, p: ChangeACL, pol: pol, allow: true},
		{name: "writer cannot change acl", src: src, who: "alice", node: full, p: ChangeACL, pol: pol, acl: "ops", reason: "not listed"},
		{name: "owner gets nothing implicit when file named", src: src, who: "owen", node: full, p: Write, pol: pol, acl: "writers", reason: "not listed"},
		{name: "owner cannot read when file named", src: src, who: "owen", node: full, p: Read, pol: pol, acl: "readers"},
		{name: "empty file denies all", src: src, who: "owen", node: emptyFile, p: Read, pol: pol, acl: "empty", reason: "not listed"},

		// Wildcard.
		{name: "wildcard read", src: src, who: "anyone", node: wild, p: Read, pol: pol, allow: true},
		{name: "wildcard write", src: src, who: "zoe", node: wild, p: Write, pol: pol, allow: true},
		{name: "wildcard only where named", src: src, who: "zoe", node: wild, p: ChangeACL, pol: pol, acl: "ops"},
		{name: "wildcard does not admit empty principal", src: src, who: "", node: wild, p: Read, pol: pol, reason: "not an authenticated principal"},

		// Missing file: fail closed, for every perm, even for the owner.
		{name: "missing read", src: src, who: "alice", node: missing, p: Read, pol: pol, acl: "gone", reason: "missing"},
		{name: "missing write owner", src: src, who: "owen", node: missing, p: Write, pol: pol, acl: "gone", reason: "missing"},
		{name: "missing changeacl", src: src, who: "carol", node: missing, p: ChangeACL, pol: pol, acl: "gone", reason: "missing"},
		{name: "nil source is all missing", src: nil, who: "alice", node: full, p: Read, pol: pol, acl: "readers", reason: "missing"},

		// Admin override.
		{name: "admin reads missing", src: src, who: "root", node: missing, p: Read, pol: pol, allow: true},
		{name: "admin writes unlisted", src: src, who: "root", node: full, p: Write, pol: pol, allow: true},
		{name: "admin repairs acl", src: src, who: "root", node: missing, p: ChangeACL, pol: pol, allow: true},
		{name: "admin with nil source", src: nil, who: "root", node: full, p: ChangeACL, pol: pol, allow: true},
		{name: "admin on ownerless default", src: src, who: "root", node: ownerless, p: Write, pol: pol, allow: true},
		{name: "no admin configured", src: src, who: "root", node: full, p: Write, pol: Policy{}, acl: "writers"},
		{name: "empty admin never matches empty who", src: src, who: "", node: defaults, p: Read, pol: Policy{}, reason: "not an authenticated principal"},

		// Defaults (no ACL file named).
		{name: "default read anyone", src: src, who: "stranger", node: defaults, p: Read, pol: pol, allow: true},
		{name: "default read with nil source", src: nil, who: "stranger", node: defaults, p: Read, pol: pol, allow: true},
		{name: "default write owner", src: src, who: "owen", node: defaults, p: Write, pol: pol, allow: true},
		{name: "default changeacl owner", src: nil, who: "owen", node: defaults, p: ChangeACL, pol: pol, allow: true},
		{name: "default write non-owner", src: src, who: "stranger", node: defaults, p: Write, pol: pol, reason: `owner "owen"`},
		{name: "default changeacl non-owner", src: src, who: "stranger", node: defaults, p: ChangeACL, pol: pol, reason: `owner "owen"`},
		{name: "default owner match is exact", src: src, who: "Owen", node: defaults, p: Write, pol: pol, reason: "owner"},
		{name: "default ownerless write", src: src, who: "owen", node: ownerless, p: Write, pol: pol, reason: "no owner"},
		{name: "default ownerless read", src: src, who: "owen", node: ownerless, p: Read, pol: pol, allow: true},
		{name: "mixed: default read, named write", src: src, who: "stranger",
			node: NodeACL{Names: Names{Write: "writers"}, Owner: "owen"}, p: Read, pol: pol, allow: true},
		{name: "mixed: named write ignores owner", src: src, who: "owen",
			node: NodeACL{Names: Names{Write: "writers"}, Owner: "owen"}, p: Write, pol: pol, acl: "writers"},
		{name: "mixed: default changeacl owner", src: src, who: "owen",
			node: NodeACL{Names: Names{Write: "writers"}, Owner: "owen"}, p: ChangeACL, pol: pol, allow: true},

		// Bad callers and perms.
		{name: "empty principal", src: src, who: "", node: defaults, p: Read, pol: pol, reason: "not an authenticated principal"},
		{name: "star principal", src: src, who: "*", node: wild, p: Read, pol: pol, reason: "not an authenticated principal"},
		{name: "star principal even as admin", src: src, who: "*", node: wild, p: Read, pol: Policy{Admin: "*"}, reason: "not an authenticated principal"},
		{name: "malformed principal", src: src, who: "a b", node: wild, p: Read, pol: pol, reason: "not an authenticated principal"},
		{name: "owner empty does not match empty who", src: src, who: "", node: ownerless, p: Write, pol: pol, reason: "not an authenticated principal"},
		{name: "zero perm", src: src, who: "root", node: wild, p: 0, pol: pol, reason: "unknown permission"},
		{name: "out of range perm", src: src, who: "alice", node: wild, p: 9, pol: pol, reason: "unknown permission"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.src, c.who, c.node, c.p, c.pol)
			if c.allow {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("allowed, want denial")
			}
			if !errors.Is(err, ErrPermission) {
				t.Fatalf("%v does not wrap ErrPermission", err)
			}
			var de *DeniedError
			if !errors.As(err, &de) {
				t.Fatalf("%T is not *DeniedError", err)
			}
			if de.Principal != c.who || de.Perm != c.p || de.ACL != c.acl {
				t.Fatalf("DeniedError = %+v, want principal %q perm %v acl %q", de, c.who, c.p, c.acl)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.reason) || !strings.Contains(msg, c.p.String()) ||
				!strings.Contains(msg, `"`+c.who+`"`) || (c.acl != "" && !strings.Contains(msg, `"`+c.acl+`"`)) {
				t.Fatalf("message %q must name principal %q, perm %v, ACL %q and reason %q", msg, c.who, c.p, c.acl, c.reason)
			}
		})
	}
}

// TestCheckRevocation: Check holds no state, so a changed file is effective
// on the very next call.
func TestCheckRevocation(t *testing.T) {
	src := mapSource{"w": mustList(t, "alice")}
	node := NodeACL{Names: Names{Write: "w"}}
	if err := Check(src, "alice", node, Write, Policy{}); err != nil {
		t.Fatal(err)
	}
	src["w"] = mustList(t, "bob")
	if err := Check(src, "alice", node, Write, Policy{}); !errors.Is(err, ErrPermission) {
		t.Fatalf("revoked principal still allowed: %v", err)
	}
	delete(src, "w")
	if err := Check(src, "bob", node, Write, Policy{}); !errors.Is(err, ErrPermission) {
		t.Fatalf("deleted file did not fail closed: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "\n", "alice\nbob\n", "# c\n*\n", " a \r\n\tb\t\n", "a b", "#", "##\n#x",
		"\x00", "\xff", "é", strings.Repeat("a", 255), strings.Repeat("a", 256),
		"a\rb", "*\n*\nx", "a\n\n\n\nb c",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := Parse(in)
		if err != nil {
			var pe *ParseError
			if !errors.Is(err, ErrInvalidACL) || !errors.As(err, &pe) || pe.Line < 1 {
				t.Fatalf("untyped rejection %v", err)
			}
			return
		}
		ps := l.Principals()
		if !slices.IsSorted(ps) || len(slices.Compact(slices.Clone(ps))) != len(ps) {
			t.Fatalf("Principals not sorted/unique: %q", ps)
		}
		for _, p := range ps {
			if err := ValidPrincipal(p); err != nil {
				t.Fatalf("Parse accepted invalid principal: %v", err)
			}
			if p != Wildcard && !l.Contains(p) {
				t.Fatalf("Contains(%q) false for a listed principal", p)
			}
		}
		out, err := Format(ps)
		if err != nil {
			t.Fatalf("Format(Parse(x).Principals()) failed: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Format(..)) failed: %v", err)
		}
		if !back.Equal(l) {
			t.Fatalf("round trip changed list: %v -> %q -> %v", l, out, back)
		}
	})
}
