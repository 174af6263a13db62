package wire

// MethodTxn applies a transaction: a list of checks and a list of
// operations on names (not handles), in one replicated command. Either
// every check holds and every operation applies, or nothing changes. It
// is mutating: it carries a request id, and a retry of the same id gets
// the first outcome back.
//
// A failed check, or an operation that cannot apply, is not a call error:
// the reply says which (TxnResponse.Failed), with the code and message a
// single call would have had. Errors of the whole call (a malformed
// transaction, a quota it would pass, a session that expired) are call
// errors as usual.
const MethodTxn Method = 30

func init() { methodNames[MethodTxn] = "Txn" }

// The kinds of a TxnCheck.
const (
	TxnCheckExists     uint8 = 1 // Path exists
	TxnCheckMissing    uint8 = 2 // Path does not exist
	TxnCheckGeneration uint8 = 3 // Path's content generation is Generation
	TxnCheckHeld       uint8 = 4 // Path's lock is held by a handle of the calling session (in Mode, unless 0)
	TxnCheckSequencer  uint8 = 5 // Sequencer is still valid
)

// The kinds of a TxnOp.
const (
	TxnOpCreate    uint8 = 1 // make the file Path with Contents; it must not exist
	TxnOpCreateDir uint8 = 2 // make the directory Path; it must not exist
	TxnOpSet       uint8 = 3 // replace the file Path's contents
	TxnOpDelete    uint8 = 4 // delete the file or empty directory Path
)

// Bounds of one transaction (docs/limits.md). The contents of all its
// operations together are at most one file's (MaxContents), so a
// transaction is at most one write's size plus its names: one Raft entry,
// well inside a frame.
const (
	MaxTxnChecks   = 64
	MaxTxnOps      = 64
	MaxTxnContents = MaxContents
)

// TxnCheck is one condition of a transaction.
type TxnCheck struct {
	Kind       uint8  `msgpack:"k"`
	Path       string `msgpack:"p,omitempty"`
	Generation uint64 `msgpack:"g,omitempty"`
	Mode       uint8  `msgpack:"m,omitempty"`
	// Sequencer is the sequencer a TxnCheckSequencer checks (its lock's
	// name is the sequencer's own; Path is ignored).
	Sequencer []byte `msgpack:"sq,omitempty"`
}

// TxnOp is one operation of a transaction.
type TxnOp struct {
	Kind     uint8  `msgpack:"k"`
	Path     string `msgpack:"p"`
	Contents []byte `msgpack:"c,omitempty"`
}

// TxnRequest is a transaction: the checks, then the operations, applied
// in order. Each name may be the subject of at most one operation.
type TxnRequest struct {
	Checks []TxnCheck `msgpack:"k,omitempty"`
	Ops    []TxnOp    `msgpack:"o,omitempty"`
}

// TxnFailure says why a transaction changed nothing: Check (or Op) is
// the index of the check that failed (the operation that could not
// apply), -1 for the other; Code and Msg are what a single call would
// have answered.
type TxnFailure struct {
	Check int    `msgpack:"k"`
	Op    int    `msgpack:"o"`
	Code  Code   `msgpack:"c"`
	Msg   string `msgpack:"m,omitempty"`
}

// TxnResponse is a transaction's outcome: Generation, the content
// generation of every file it created or wrote (and the instance of every
// node it created), or Failed.
type TxnResponse struct {
	Generation uint64      `msgpack:"g,omitempty"`
	Failed     *TxnFailure `msgpack:"f,omitempty"`
}
