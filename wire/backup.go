package wire

// MethodBackup pages a backup file out of the master (admin only).
const MethodBackup Method = 19

// BackupChunk is the most file bytes one BackupResponse carries: well
// under MaxFrameSize, so a page never nears the frame limit.
const BackupChunk = 512 << 10

// BackupRequest asks for one page of a backup. ID 0 starts a new backup:
// the master takes a consistent snapshot (at an index it confirmed as
// leader), keeps the file in memory for this caller and answers with its
// description and first page. Later requests name the backup's ID and the
// Offset of the next byte wanted.
type BackupRequest struct {
	ID     uint64 `msgpack:"i,omitempty"`
	Offset uint64 `msgpack:"o,omitempty"`
}

// BackupResponse is one page of a backup file: Chunk holds the file's
// bytes from Offset (at most BackupChunk of them). Every page repeats the
// description, so a client needs nothing but pages.
type BackupResponse struct {
	ID     uint64 `msgpack:"i"`
	Offset uint64 `msgpack:"o"`
	Chunk  []byte `msgpack:"b,omitempty"`
	// Total is the file's length in bytes.
	Total uint64 `msgpack:"t"`
	// Checksum is the SHA-256 the file ends with (of all bytes before it).
	Checksum []byte `msgpack:"k"`
	Cell     string `msgpack:"c"`
	// Applied is the index of the last entry the backed-up state applied.
	Applied uint64 `msgpack:"a"`
	Term    uint64 `msgpack:"r"`
	Epoch   uint64 `msgpack:"e"`
	// Time is when the snapshot was taken (Unix ns, the master's clock).
	Time     int64  `msgpack:"tm"`
	Nodes    uint64 `msgpack:"n"`
	Sessions uint64 `msgpack:"s"`
}
