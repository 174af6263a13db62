//go:build !unix

package replica

import "io/fs"

// onDisk is the file's apparent size (no block count here).
func onDisk(info fs.FileInfo) int64 { return info.Size() }
