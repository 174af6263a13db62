//go:build !unix

package fdlimit

// Soft is unknown here (0): the ports then have no file-descriptor share.
func Soft() uint64 { return 0 }
