// Package wire is the client↔master protocol of lockcell: the method numbers,
// the request and response types, the typed error codes, and the framing
// codec. It is a leaf package so that the client can speak the protocol
// without linking any server code. It holds no state and starts no goroutines.
package wire

import (
	"errors"
	"fmt"
)

// Code is a stable numeric error kind carried in every Status. Codes are
// append-only: never renumber or reuse one, old clients depend on them.
type Code uint8

// The error kinds. Keep numbers unique and never reorder.
const (
	CodeOK                 Code = 0
	CodeNotMaster          Code = 1  // this replica is not the master; Status.Leader names it when known
	CodeBadEpoch           Code = 2  // the call named another master epoch
	CodeSessionExpired     Code = 3  // the session has expired or was closed
	CodeNotFound           Code = 4  // no such node (or parent)
	CodeExists             Code = 5  // the node exists already
	CodePermission         Code = 6  // the caller may not do this
	CodeGenerationMismatch Code = 7  // compare-and-swap lost: the content (or, for SetACL, the ACL) generation differs
	CodeLockHeld           Code = 8  // the lock is held in a conflicting mode
	CodeNotHeld            Code = 9  // Release of a lock this handle does not hold
	CodeInvalidName        Code = 10 // the name breaks a naming rule
	CodeTooLarge           Code = 11 // contents or frame over the limit
	CodeHandleInvalid      Code = 12 // the handle is closed, or its node was deleted or re-created
	CodeNotEmpty           Code = 13 // delete of a directory that has children
	CodeNotDir             Code = 14 // a directory operation on a file, or a parent that is a file
	CodeBadRequest         Code = 15 // malformed or contradictory request
	CodeInternal           Code = 16 // a bug on the server; the call did not take effect
	CodeLockDelay          Code = 17 // the lock is free but under lock-delay after its holder failed
	CodeDuplicate          Code = 18 // a request id the cell has already completed and forgotten
	CodeUnavailable        Code = 19 // the master lost leadership or is starting: the outcome is unknown, retry with the same request id
	CodeUnknownSession     Code = 20 // the session id was never created in this cell
	CodeTooMany            Code = 21 // a per-connection or per-session limit was reached
	CodeCanceled           Code = 22 // the call was cancelled before it took effect
	CodeIsDir              Code = 23 // a file operation (contents) on a directory
	CodeStaleSequencer     Code = 24 // the sequencer's lock is no longer held at that generation and mode
	CodeBadSequencer       Code = 25 // the sequencer is malformed, forged, or of another cell
	CodeQuotaExceeded      Code = 26 // a create or write would take the cell or the principal past a quota on nodes or content bytes; nothing changed
)

var codeNames = map[Code]string{
	CodeOK: "ok", CodeNotMaster: "not master", CodeBadEpoch: "wrong master epoch",
	CodeSessionExpired: "session expired", CodeNotFound: "not found", CodeExists: "already exists",
	CodePermission: "permission denied", CodeGenerationMismatch: "generation mismatch",
	CodeLockHeld: "lock held", CodeNotHeld: "lock not held", CodeInvalidName: "invalid name",
	CodeTooLarge: "too large", CodeHandleInvalid: "handle invalid", CodeNotEmpty: "directory not empty",
	CodeNotDir: "not a directory", CodeBadRequest: "bad request", CodeInternal: "internal error",
	CodeLockDelay: "lock under lock-delay", CodeDuplicate: "duplicate request", CodeUnavailable: "master unavailable",
	CodeUnknownSession: "unknown session", CodeTooMany: "limit reached", CodeCanceled: "canceled",
	CodeIsDir: "is a directory", CodeStaleSequencer: "stale sequencer", CodeBadSequencer: "bad sequencer",
	CodeQuotaExceeded: "quota exceeded",
}

// machineNames are the codes' stable machine names: the "code" of the
// CLI's JSON errors and the "code" label of the call metrics.
var machineNames = map[Code]string{
	CodeOK: "ok", CodeNotMaster: "not_master", CodeBadEpoch: "bad_epoch", CodeSessionExpired: "session_expired",
	CodeNotFound: "not_found", CodeExists: "exists", CodePermission: "permission",
	CodeGenerationMismatch: "generation_mismatch", CodeLockHeld: "lock_held", CodeNotHeld: "not_held",
	CodeInvalidName: "invalid_name", CodeTooLarge: "too_large", CodeHandleInvalid: "handle_invalid",
	CodeNotEmpty: "not_empty", CodeNotDir: "not_dir", CodeBadRequest: "bad_request",
	CodeInternal: "internal", CodeLockDelay: "lock_delay", CodeDuplicate: "duplicate",
	CodeUnavailable: "unavailable", CodeUnknownSession: "unknown_session", CodeTooMany: "too_many",
	CodeCanceled: "canceled", CodeIsDir: "is_dir", CodeStaleSequencer: "stale_sequencer",
	CodeBadSequencer: "bad_sequencer", CodeQuotaExceeded: "quota_exceeded",
}

// Name is the code's stable machine name, lower case with underscores
// ("quota_exceeded"), for scripts and metric labels; "code_N" for a
// code this build does not know (one a newer peer sent).
func (c Code) Name() string {
	if s, ok := machineNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code_%d", uint8(c))
}

// String names the code for people.
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Sentinel errors, one per code, usable with errors.Is on any error the
// client or master returns. The client package re-exports them.
var (
	ErrNotMaster          = &Error{Code: CodeNotMaster}
	ErrBadEpoch           = &Error{Code: CodeBadEpoch}
	ErrSessionExpired     = &Error{Code: CodeSessionExpired}
	ErrNotFound           = &Error{Code: CodeNotFound}
	ErrExists             = &Error{Code: CodeExists}
	ErrPermission         = &Error{Code: CodePermission}
	ErrGenerationMismatch = &Error{Code: CodeGenerationMismatch}
	ErrLockHeld           = &Error{Code: CodeLockHeld}
	ErrNotHeld            = &Error{Code: CodeNotHeld}
	ErrInvalidName        = &Error{Code: CodeInvalidName}
	ErrTooLarge           = &Error{Code: CodeTooLarge}
	ErrHandleInvalid      = &Error{Code: CodeHandleInvalid}
	ErrNotEmpty           = &Error{Code: CodeNotEmpty}
	ErrNotDir             = &Error{Code: CodeNotDir}
	ErrIsDir              = &Error{Code: CodeIsDir}
	ErrBadRequest         = &Error{Code: CodeBadRequest}
	ErrInternal           = &Error{Code: CodeInternal}
	ErrLockDelay          = &Error{Code: CodeLockDelay}
	ErrDuplicate          = &Error{Code: CodeDuplicate}
	ErrUnavailable        = &Error{Code: CodeUnavailable}
	ErrUnknownSession     = &Error{Code: CodeUnknownSession}
	ErrTooMany            = &Error{Code: CodeTooMany}
	ErrCanceled           = &Error{Code: CodeCanceled}
	ErrStaleSequencer     = &Error{Code: CodeStaleSequencer}
	ErrBadSequencer       = &Error{Code: CodeBadSequencer}
	ErrQuotaExceeded      = &Error{Code: CodeQuotaExceeded}
)

// Error is a typed protocol error. Two Errors match under errors.Is when
// their codes are equal, so a detailed error from the wire matches the
// package sentinel of its kind.
type Error struct {
	Code Code
	Msg  string
}

// Error reports the kind and, when present, the detail.
func (e *Error) Error() string {
	if e.Msg == "" {
		return "lockcell: " + e.Code.String()
	}
	return "lockcell: " + e.Code.String() + ": " + e.Msg
}

// Is matches any *Error with the same code, and any error that reports
// the same code through a WireCode method: the sentinels a package of its
// own declares (package client's) then match what the cell returns.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		return t.Code == e.Code
	case interface{ WireCode() Code }:
		return t.WireCode() == e.Code
	}
	return false
}

// Errorf builds a typed error of kind code with a formatted detail.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, CodeOK for
// nil, and CodeInternal for an error of no known kind.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
