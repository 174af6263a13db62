//go:build !unix

package cell

// fdLimit is unknown here: the HTTP port then has no file-descriptor share.
func fdLimit() uint64 { return 0 }
