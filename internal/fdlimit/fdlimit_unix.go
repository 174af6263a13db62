//go:build unix

// Package fdlimit reads the process's limit on open file descriptors, the
// figure the client and HTTP ports take their shares of.
package fdlimit

import "syscall"

// Soft is the process's soft limit on open file descriptors (0 when it
// cannot be read). Go's runtime raised it to the hard limit at start
// (package syscall, since Go 1.19), so it is what the process may use.
func Soft() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
