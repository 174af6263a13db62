//go:build unix

package main

import (
	"os"
	"syscall"
)

// releaseSignals are the signals lock --on-release-request may pass on to
// its command: those a program can catch to wind down, and none that
// stops or kills it outright.
var releaseSignals = map[string]os.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "TERM": syscall.SIGTERM,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}
