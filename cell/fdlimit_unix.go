//go:build unix

package cell

import "syscall"

// fdLimit is the process's soft limit on open file descriptors (0 when it
// cannot be read). Go's runtime raised it to the hard limit at start
// (package syscall, since Go 1.19), so it is what the process may use.
func fdLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
