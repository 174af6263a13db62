//go:build !bug_nofence

package sequencer

// bugNoFence is off: see bug_nofence_on.go.
const bugNoFence = false
