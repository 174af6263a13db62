//go:build unix && !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package main

// getTermios is not implemented here: every file counts as a terminal, so
// lock's command stays in lockcell's process group (the safe choice for
// interactive use; a lost lock then stops only the command itself).
func getTermios(uintptr) (struct{}, error) { return struct{}{}, nil }
