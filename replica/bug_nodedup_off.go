//go:build !bug_nodedup

package replica

// bugNoDedup is off: see bug_nodedup_on.go.
const bugNoDedup = false
