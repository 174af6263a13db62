package admin

import "lockcell/wire"

// The docs of Admin's calls give the wire's limits as numbers; each line
// fails to compile when the wire's changes (a negative constant overflows
// uint64), so the docs are changed with it.
const (
	_ = uint64(wire.BackupChunk) - 512<<10 + (512<<10 - uint64(wire.BackupChunk))
	_ = uint64(wire.MaxListedLocks) - 1000 + (1000 - uint64(wire.MaxListedLocks))
	_ = uint64(wire.MaxQuotaTop) - 5 + (5 - uint64(wire.MaxQuotaTop))
)
