//go:build !bug_readnoverify

package master

// bugReadNoVerify is off: see bug_readnoverify_on.go.
const bugReadNoVerify = false
