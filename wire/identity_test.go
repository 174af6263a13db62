package wire_test

import (
	"strings"
	"testing"

	"lockcell/wire"
)

// A declared identity is refused when a Stat could not show it as it is,
// and accepted up to the limit otherwise.
func TestCheckIdentity(t *testing.T) {
	long := strings.Repeat("h", wire.MaxIdentityLen)
	for _, c := range []struct {
		host    string
		pid     int64
		program string
		ok      bool
	}{
		{"", 0, "", true},
		{long, 1<<31 - 1, long, true},
		{"héllo", 1, "wörk", true},
		{long + "x", 1, "p", false},
		{"h", 1, long + "x", false},
		{"a\nb", 1, "p", false},
		{"h", 1, "x\x1b[2J", false},
		{"\xff", 1, "p", false},
		{"h", 1, "a\u0085b", false},
		{"h", -1, "p", false},
	} {
		if err := wire.CheckIdentity(c.host, c.pid, c.program); (err == nil) != c.ok {
			t.Errorf("CheckIdentity(%.20q, %d, %.20q) = %v, want ok=%v", c.host, c.pid, c.program, err, c.ok)
		}
	}
}
