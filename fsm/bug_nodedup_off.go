//go:build !bug_nodedup

package fsm

// bugNoDedup is off: see bug_nodedup_on.go.
const bugNoDedup = false
