package wire

// MethodAuditRead reads the cell's audit trail from the replica called,
// master or not: every mutation the cell applied, in index order, with
// its caller. Session-less and the admin's alone.
const MethodAuditRead Method = 28

func init() { methodNames[MethodAuditRead] = "AuditRead" }

// MaxAuditRecords bounds the records of one AuditRead reply; its bytes
// are bounded by MaxAuditReplyBytes, well inside a frame.
const (
	MaxAuditRecords    = 2000
	MaxAuditReplyBytes = 1 << 20
	// MaxAuditWaitMillis bounds how long one AuditRead waits for a
	// record (a follower of the trail asks again).
	MaxAuditWaitMillis = 30_000
)

// AuditReadRequest selects records: from index Since on (0: the oldest
// kept), at or after SinceTime (Unix nanoseconds; 0: any), about the name
// Prefix or a name below it ("": every name), at most Max (0 or more
// than MaxAuditRecords: MaxAuditRecords). WaitMillis, when set, makes a
// call that would return no record wait up to that long (at most
// MaxAuditWaitMillis) for one to be written, so that following the trail
// costs one call per batch of records, not a poll loop.
type AuditReadRequest struct {
	Since      uint64 `msgpack:"s,omitempty"`
	SinceTime  int64  `msgpack:"st,omitempty"`
	Prefix     string `msgpack:"p,omitempty"`
	Max        uint32 `msgpack:"m,omitempty"`
	WaitMillis int64  `msgpack:"w,omitempty"`
}

// AuditReadResponse holds the records, each one JSON object as the
// replica stores it (the format of package audit's Record: index, time,
// op, principal, session, client identity, name, detail, result).
// Next is the Since of the call that continues from here; Oldest the
// first index the replica still keeps (older ones were rotated away) and
// Last the newest it holds. Replica names the replica that answered.
type AuditReadResponse struct {
	Records [][]byte `msgpack:"r"`
	Next    uint64   `msgpack:"n"`
	Oldest  uint64   `msgpack:"o"`
	Last    uint64   `msgpack:"l"`
	Replica string   `msgpack:"id"`
}
