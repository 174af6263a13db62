package wire

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxIdentityLen bounds the host and the program a client declares at
// CreateSession, in bytes each.
const MaxIdentityLen = 256

// CheckIdentity reports why a declared identity is refused, nil when it
// is fine: a host or program longer than MaxIdentityLen bytes, not UTF-8
// or holding a control character (it would garble the terminal of
// whoever reads a Stat), or a negative pid. The master refuses such a
// CreateSession with CodeBadRequest.
func CheckIdentity(host string, pid int64, program string) error {
	for _, v := range [...]struct{ what, s string }{{"host", host}, {"program", program}} {
		switch {
		case len(v.s) > MaxIdentityLen:
			return fmt.Errorf("declared %s of %d bytes: at most %d", v.what, len(v.s), MaxIdentityLen)
		case !utf8.ValidString(v.s):
			return fmt.Errorf("declared %s is not UTF-8", v.what)
		}
		if i := indexControl(v.s); i >= 0 {
			return fmt.Errorf("declared %s has a control character at byte %d", v.what, i)
		}
	}
	if pid < 0 {
		return fmt.Errorf("declared pid %d is negative", pid)
	}
	return nil
}

func indexControl(s string) int {
	for i, r := range s {
		if unicode.IsControl(r) {
			return i
		}
	}
	return -1
}

// LockDelayCause is what started a lock-delay: the session that expired
// while holding the lock, its principal and declared identity, and Time,
// when it expired (Unix ns, the master's clock).
type LockDelayCause struct {
	Session   uint64 `msgpack:"s"`
	Principal string `msgpack:"p,omitempty"`
	Host      string `msgpack:"ho,omitempty"`
	PID       int64  `msgpack:"pi,omitempty"`
	Program   string `msgpack:"pg,omitempty"`
	Time      int64  `msgpack:"t,omitempty"`
}
