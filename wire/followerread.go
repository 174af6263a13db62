package wire

// MethodFollowerRead is a read any replica answers from its own applied
// state, when the caller accepts a bounded staleness: a GetContentsAndStat,
// GetStat or ReadDir (FollowerReadRequest.Read) on one of the caller's
// handles. A replica that is not the master answers it only when it can
// prove its state holds every write acknowledged more than MaxStaleMillis
// before it answered (docs/flows.md, "Flow: a follower read"), and the
// state holds at least MinIndex; otherwise it answers CodeStaleRead and the
// caller asks the master. The serving master answers it as the ordinary,
// linearizable read. The checks are the master's (the session's owner, the
// caller's right to read the node, a sequencer), so a caller that may not
// read a node is answered exactly what the master would answer. A replica
// that predates the method answers NotMaster (or, as master, BadRequest).
const MethodFollowerRead Method = 35

// CodeStaleRead answers a follower read that the replica cannot serve
// within the caller's bound: it has not heard the leader's commit index
// recently enough, has not applied it yet, or holds less than the
// caller's MinIndex (or does not know the session or handle yet). Nothing
// was read; ask the master.
const CodeStaleRead Code = 27

// ErrStaleRead matches (errors.Is) every CodeStaleRead answer.
var ErrStaleRead = &Error{Code: CodeStaleRead}

func init() {
	methodNames[MethodFollowerRead] = "FollowerRead"
	codeNames[CodeStaleRead] = "stale read refused"
	machineNames[CodeStaleRead] = "stale_read"
}

// FollowerReadRequest is one follower read. Read names the read
// (MethodGetContentsAndStat, MethodGetStat or MethodReadDir) and Req is
// its request, whose Cache must be false: an answer that may be stale is
// never cached. MaxStaleMillis is the staleness the caller accepts (at
// least 1). MinIndex is the lowest command index the answering state may
// be at: the highest the caller has seen (a generation in a Stat, an
// earlier follower read's Index), so that a caller never reads a state
// older than one it saw before, nor misses its own writes.
type FollowerReadRequest struct {
	Read           Method        `msgpack:"r"`
	Req            HandleRequest `msgpack:"q"`
	MaxStaleMillis int64         `msgpack:"ms"`
	MinIndex       uint64        `msgpack:"mi,omitempty"`
}

// FollowerReadResponse is the answer of a follower read: exactly one of
// Contents, Stat and Dir, as Read asked. Replica is the id of the replica
// that answered, Index the command index of the state it answered from,
// AgeMillis how old, at most, that state was (every write acknowledged
// more than AgeMillis before the answer is in it). Master says the serving
// master answered, with a linearizable read (AgeMillis 0).
type FollowerReadResponse struct {
	Replica   string            `msgpack:"rp"`
	Index     uint64            `msgpack:"ix"`
	AgeMillis int64             `msgpack:"ag,omitempty"`
	Master    bool              `msgpack:"m,omitempty"`
	Contents  *ContentsResponse `msgpack:"c,omitempty"`
	Stat      *StatResponse     `msgpack:"s,omitempty"`
	Dir       *ReadDirResponse  `msgpack:"d,omitempty"`
}

// FollowerReadable reports whether m is a read a follower may serve.
func FollowerReadable(m Method) bool {
	return m == MethodGetContentsAndStat || m == MethodGetStat || m == MethodReadDir
}
