//go:build unix

package replica

import (
	"io/fs"
	"syscall"
)

// onDisk is the bytes of the blocks the file holds.
func onDisk(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
