//go:build !bug_noinval

package master

// bugNoInval is off: see bug_noinval_on.go.
const bugNoInval = false
