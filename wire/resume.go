package wire

import "strings"

// MethodResumeSession re-attaches a new process to a live session whose
// ticket it holds (session id and secret, as Client.SessionTicket gave
// them to the process before). The caller must be the session's own
// principal. The session gets a new incarnation: calls and KeepAlives
// that carry an older one (the process that held the session before) are
// refused with CodeSessionExpired (SessionMovedMsg), and every lock the
// session holds gets a new lock generation, so sequencers issued before
// the resume stop being valid. The session's blocking Acquires still
// queued are withdrawn; its handles, and the locks they hold, stay. The
// header names no session and no epoch (like CreateSession); the request
// does.
//
// A ticket whose secret does not match, or presented by another
// principal, is answered CodeUnknownSession whether or not the session
// exists, so a caller without the secret learns nothing; a matching
// ticket of a session that has ended is answered CodeSessionExpired.
const MethodResumeSession Method = 29

func init() {
	// Here rather than in messages.go's table, so that this method's
	// wiring lives in one file.
	methodNames[MethodResumeSession] = "ResumeSession"
}

// ResumeSecretSize is the size of a session's resume secret.
const ResumeSecretSize = 32

// MaxResumeHandles bounds the handles a ResumeSession reply lists, so the
// reply stays well inside a frame (names are at most 1 KiB): a session
// with more open handles is told Truncated, and the handles left out stay
// open at the master until the session ends.
const MaxResumeHandles = 1024

// SessionMovedMsg opens the message of the CodeSessionExpired error that
// answers a call of a session's earlier incarnation: another process
// resumed the session (IsSessionMoved).
const SessionMovedMsg = "session moved"

// IsSessionMoved reports whether err is the CodeSessionExpired answer to
// a call made by a session's earlier incarnation (SessionMovedMsg).
func IsSessionMoved(err error) bool {
	var e *Error
	for err != nil {
		if x, ok := err.(*Error); ok {
			e = x
			break
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return e != nil && e.Code == CodeSessionExpired && strings.HasPrefix(e.Msg, SessionMovedMsg)
}

// ResumeSessionRequest names the session to resume and proves the caller
// holds its secret (ResumeSecretSize bytes).
type ResumeSessionRequest struct {
	Session uint64 `msgpack:"s"`
	Secret  []byte `msgpack:"k"`
}

// ResumeSessionResponse is the resumed session: the master's epoch, a
// full lease, the session's new incarnation (every later call's header
// carries it), the first request id the new process may use (NextSeq:
// every id below it was the old process's), and the handles the session
// has open.
type ResumeSessionResponse struct {
	Session     uint64          `msgpack:"s"`
	Epoch       uint64          `msgpack:"e"`
	LeaseMillis int64           `msgpack:"l"`
	Incarnation uint64          `msgpack:"in"`
	NextSeq     uint64          `msgpack:"q"`
	Handles     []ResumedHandle `msgpack:"h,omitempty"`
	// Truncated: the session has more open handles than MaxResumeHandles;
	// Handles lists those with the lowest ids.
	Truncated bool `msgpack:"t,omitempty"`
}

// ResumedHandle is one handle a resumed session has open: its id, the
// node's name and instance, the flags and event mask it was opened with,
// and the lock it holds (LockMode LockFree: none) at its new generation.
type ResumedHandle struct {
	Handle    uint64 `msgpack:"h"`
	Path      string `msgpack:"p"`
	Instance  uint64 `msgpack:"i,omitempty"`
	Flags     uint32 `msgpack:"f,omitempty"`
	EventMask uint32 `msgpack:"em,omitempty"`
	LockMode  uint8  `msgpack:"lm,omitempty"`
	LockGen   uint64 `msgpack:"lg,omitempty"`
}
