//go:build !bug_nolockdelay

package fsm

// bugNoLockDelay is off: see bug_nolockdelay_on.go.
const bugNoLockDelay = false
