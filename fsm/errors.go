package fsm

import (
	"errors"
	"fmt"
)

// Kind classifies an error the state machine returns as a value in a
// Result. Results are stored in snapshots and backups (the de-duplication
// table), so every kind has an explicit number that never changes; new
// kinds take new numbers. TestPersistedEnumValues pins them.
type Kind uint8

// The kinds of state-machine errors.
const (
	KindNone               Kind = 0
	KindNotFound           Kind = 1
	KindExists             Kind = 2
	KindNotDir             Kind = 3
	KindIsDir              Kind = 4
	KindNotEmpty           Kind = 5
	KindGenerationMismatch Kind = 6
	KindLockHeld           Kind = 7
	KindNotHeld            Kind = 8
	KindHandleInvalid      Kind = 9
	KindSessionExpired     Kind = 10
	KindDuplicate          Kind = 11
	KindBadRequest         Kind = 12
	KindLockDelay          Kind = 13
	KindPermission         Kind = 14
	KindCanceled           Kind = 15
	KindStaleSequencer     Kind = 16
	KindQuotaExceeded      Kind = 17
)

// Error is a state-machine error: deterministic, stored in the request
// de-duplication table, and mapped to a wire code by the master.
type Error struct {
	Kind Kind   `msgpack:"k"`
	Msg  string `msgpack:"m,omitempty"`
}

func (e *Error) Error() string { return e.Msg }

// Is matches another *Error of the same kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

func errf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Errors of the replica itself (not of the state machine).
var (
	// ErrNotLeader means this replica cannot propose: the command was not
	// applied.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrUnknownOutcome means leadership was lost while the command was in
	// flight: it may still commit. Retry with the same request id.
	ErrUnknownOutcome = errors.New("replica: leadership lost, outcome unknown")
	// ErrTooLarge means the encoded command exceeds MaxCommandSize.
	ErrTooLarge = errors.New("replica: command too large")
	// ErrClosed means the replica has shut down.
	ErrClosed = errors.New("replica: closed")
	// ErrMalformedCommand means a Raft entry is not a command this version
	// can decode: empty, of an unknown command version, or not bounded,
	// well-formed msgpack of a Command. DecodeCommand's errors wrap it.
	ErrMalformedCommand = errors.New("replica: malformed command")
	// ErrMalformedSnapshot means snapshot bytes are not a snapshot of this
	// cell that this version could have written: of another version or
	// cell, not bounded, well-formed msgpack of a snapshot image, or an
	// image of an inconsistent state (nil or repeated entries, nodes
	// outside a directory, dangling references, impossible locks).
	// Restore's rejections wrap it; the FSM keeps its state.
	ErrMalformedSnapshot = errors.New("replica: malformed snapshot")
	// ErrSnapshotTooLarge means a snapshot stream is longer than Restore
	// reads. It wraps ErrMalformedSnapshot.
	ErrSnapshotTooLarge = fmt.Errorf("%w: too large", ErrMalformedSnapshot)
)
