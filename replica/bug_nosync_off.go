//go:build !bug_nosync

package replica

// bugNoSync is off: see bug_nosync_on.go.
const bugNoSync = false
