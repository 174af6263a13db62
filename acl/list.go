package acl

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// List is a parsed ACL file: a sorted set of principal names, possibly
// including Wildcard. The zero List is empty and grants nobody anything.
// A List is immutable once built; share it freely.
type List struct {
	principals []string // sorted, unique, each valid
}

// ParseError is returned by Parse for a bad line. It wraps ErrInvalidACL.
type ParseError struct {
	Line   int    // 1-based line number in the file
	Text   string // the offending (trimmed) line, truncated for display
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%v: line %d %q: %s", ErrInvalidACL, e.Line, e.Text, e.Reason)
}

func (e *ParseError) Unwrap() error { return ErrInvalidACL }

// lineSpace is what Parse trims around a line: ASCII white space only, so
// "\r\n" files parse and no non-ASCII byte is ever silently dropped.
const lineSpace = " \t\r\v\f"

// Parse parses the contents of an ACL file (format in the package comment).
// It rejects the whole file on the first bad line.
func Parse(contents []byte) (List, error) {
	var ps []string
	for i, line := range bytes.Split(contents, []byte{'\n'}) {
		line = bytes.Trim(line, lineSpace)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		p := string(line)
		if reason := principalProblem(p); reason != "" {
			return List{}, &ParseError{Line: i + 1, Text: truncate(p, 64), Reason: reason}
		}
		ps = append(ps, p)
	}
	return List{principals: sortUnique(ps)}, nil
}

// New builds a List from principal names, validating each as Parse would
// and dropping duplicates.
func New(principals ...string) (List, error) {
	ps := make([]string, 0, len(principals))
	for i, p := range principals {
		if err := validEntry(i, p); err != nil {
			return List{}, err
		}
		ps = append(ps, p)
	}
	return List{principals: sortUnique(ps)}, nil
}

// Format is the inverse of Parse: it renders principals (validated; sorted
// and de-duplicated in the output) one a line, each ending in '\n'. For
// every List l, Parse(Format(l.Principals())) equals l.
func Format(principals []string) ([]byte, error) {
	l, err := New(principals...)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, p := range l.principals {
		n += len(p) + 1
	}
	out := make([]byte, 0, n)
	for _, p := range l.principals {
		out = append(out, p...)
		out = append(out, '\n')
	}
	return out, nil
}

// Contains reports whether the list grants principal: the list names it,
// or holds Wildcard. Only valid principal names are ever granted; "" and
// "*" itself are not principals and get false.
func (l List) Contains(principal string) bool {
	if principal == Wildcard || ValidPrincipal(principal) != nil {
		return false
	}
	if _, found := slices.BinarySearch(l.principals, principal); found {
		return true
	}
	_, found := slices.BinarySearch(l.principals, Wildcard)
	return found
}

// Principals returns the list's entries (Wildcard included, if present),
// sorted; the caller owns the returned slice.
func (l List) Principals() []string { return slices.Clone(l.principals) }

// Len is the number of distinct entries.
func (l List) Len() int { return len(l.principals) }

// Equal reports whether two lists hold the same entries.
func (l List) Equal(o List) bool { return slices.Equal(l.principals, o.principals) }

// String renders the list for logs: "[alice bob *]".
func (l List) String() string { return "[" + strings.Join(l.principals, " ") + "]" }

// ValidPrincipal reports whether s may appear in an ACL file: Wildcard, or
// 1-255 bytes of printable ASCII (0x21-0x7E) not starting with '#'. The
// error wraps ErrInvalidACL.
func ValidPrincipal(s string) error {
	if reason := principalProblem(s); reason != "" {
		return fmt.Errorf("%w: principal %q: %s", ErrInvalidACL, truncate(s, 64), reason)
	}
	return nil
}

func validEntry(i int, p string) error {
	if reason := principalProblem(p); reason != "" {
		return fmt.Errorf("%w: principal #%d %q: %s", ErrInvalidACL, i+1, truncate(p, 64), reason)
	}
	return nil
}

// principalProblem returns "" for a valid entry, else why not.
func principalProblem(s string) string {
	switch {
	case s == "":
		return "empty principal name"
	case len(s) > MaxPrincipalLen:
		return fmt.Sprintf("principal name longer than %d bytes", MaxPrincipalLen)
	case s[0] == '#':
		return "principal name may not start with '#' (it would read as a comment)"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return fmt.Sprintf("byte 0x%02x at offset %d is not printable ASCII (spaces and control bytes are not allowed)", c, i)
		}
	}
	return ""
}

func sortUnique(ps []string) []string {
	if len(ps) == 0 {
		return nil
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
