package wire

import (
	"strings"
)

// Naming limits (docs/spec.md#names).
const (
	MaxNameLen      = 1024
	MaxComponentLen = 255
)

// ValidateName checks that name is a valid node name in cell: it must look
// like /ls/<cell>[/component...], where every component is 1 to 255 bytes of
// [A-Za-z0-9._-] and is not "." or "..", and the whole name is at most 1024
// bytes. The error is a CodeInvalidName *Error that names the broken rule.
func ValidateName(cell, name string) error {
	if len(name) > MaxNameLen {
		return Errorf(CodeInvalidName, "%.40q...: name is %d bytes, the limit is %d", name, len(name), MaxNameLen)
	}
	root := "/ls/" + cell
	if name != root && !strings.HasPrefix(name, root+"/") {
		// Both are clipped: the cell may be as long and as odd as the
		// name (a caller's ValidCellName check may come later), and a
		// rejection must stay a few KiB whatever it rejects.
		return Errorf(CodeInvalidName, "%.256q: names must start with %.270s", name, root+"/")
	}
	rest := strings.TrimPrefix(name, root)
	if rest == "" {
		return nil
	}
	rest = rest[1:]
	for _, c := range strings.Split(rest, "/") {
		if err := validComponent(c); err != nil {
			return Errorf(CodeInvalidName, "%q: %v", name, err)
		}
	}
	return nil
}

type ruleError string

func (r ruleError) Error() string { return string(r) }

func validComponent(c string) error {
	switch {
	case c == "":
		return ruleError("empty component (a doubled or trailing '/')")
	case c == "." || c == "..":
		return ruleError("components may not be '.' or '..'")
	case len(c) > MaxComponentLen:
		return ruleError("a component is longer than 255 bytes")
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return ruleError("components may hold only [A-Za-z0-9._-], found " + quoteByte(b))
		}
	}
	return nil
}

func quoteByte(b byte) string {
	const hex = "0123456789abcdef"
	if b >= 0x20 && b < 0x7f {
		return "'" + string(rune(b)) + "'"
	}
	return "byte 0x" + string([]byte{hex[b>>4], hex[b&15]})
}

// ValidCellName reports whether cell can be used as a cell name (it is a
// name component).
func ValidCellName(cell string) error {
	if err := validComponent(cell); err != nil {
		return Errorf(CodeInvalidName, "cell name %.256q: %v", cell, err)
	}
	return nil
}

// Parent returns the parent of a valid non-root name.
func Parent(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i]
}

// Base returns the last component of a name.
func Base(name string) string {
	return name[strings.LastIndexByte(name, '/')+1:]
}
