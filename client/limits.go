package client

import "time"

// Limits of the cell that a client meets; each says what it bounds. The
// values are the cell's own.
const (
	// MaxIdentityLen is the most bytes Identity.Host and Identity.Program
	// may each have.
	MaxIdentityLen = 256
	// MaxStatHolders is the most holders a Stat names.
	MaxStatHolders = 64
	// MaxReleaseReason bounds the reason of a RequestRelease.
	MaxReleaseReason = 1024
	// RequestReleaseInterval is how often one session may ask the holders of
	// one lock to let go; RequestRelease fails with ErrTooMany sooner.
	RequestReleaseInterval = time.Second
)
