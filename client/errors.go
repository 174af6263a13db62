package client

import "errors"

// Typed errors. Every error a Client or Handle returns matches one of these
// under errors.Is when it has a known kind; an error the cell returned
// matches the one of its kind.
var (
	ErrNotFound           = codeErr(codeNotFound)
	ErrExists             = codeErr(codeExists)
	ErrPermission         = codeErr(codePermission)
	ErrGenerationMismatch = codeErr(codeGenerationMismatch)
	ErrLockHeld           = codeErr(codeLockHeld)
	ErrNotHeld            = codeErr(codeNotHeld)
	ErrSessionExpired     = codeErr(codeSessionExpired)
	ErrUnknownSession     = codeErr(codeUnknownSession)
	ErrInvalidName        = codeErr(codeInvalidName)
	ErrTooLarge           = codeErr(codeTooLarge)
	ErrHandleInvalid      = codeErr(codeHandleInvalid)
	ErrNotEmpty           = codeErr(codeNotEmpty)
	ErrNotDir             = codeErr(codeNotDir)
	ErrIsDir              = codeErr(codeIsDir)
	ErrLockDelay          = codeErr(codeLockDelay)
	ErrEpochChanged       = codeErr(codeBadEpoch)
	ErrBadRequest         = codeErr(codeBadRequest)
	ErrCanceled           = codeErr(codeCanceled)
	ErrStaleSequencer     = codeErr(codeStaleSequencer)
	ErrBadSequencer       = codeErr(codeBadSequencer)
	// ErrTooMany: a limit of the cell was reached (sessions per principal
	// or connection, handles per session, calls in flight per session).
	ErrTooMany = codeErr(codeTooMany)
	// ErrQuotaExceeded: a create or write would take the cell past its
	// quota of nodes or of content bytes, or the caller's principal past
	// its quota of nodes; the message names the quota and its limit.
	// Nothing was changed: no node was created, the old contents stand.
	// Reads, deletes, locks and KeepAlives keep working, and a delete
	// frees room.
	ErrQuotaExceeded = codeErr(codeQuotaExceeded)

	// ErrNoMaster means no master answered within Config.RetryTimeout: the
	// cell has lost its quorum, or none of its replicas is reachable.
	ErrNoMaster = errors.New("lockcell: no master reachable (the cell has no quorum or cannot be reached)")
	// ErrClosed means the Client or Handle was closed by the application.
	ErrClosed = errors.New("lockcell: closed")
)

// OpError records the operation and the name that failed, like
// io/fs.PathError; Unwrap gives the typed cause.
type OpError struct {
	Op   string
	Path string
	Err  error
}

func (e *OpError) Error() string {
	if e.Path == "" {
		return e.Op + ": " + e.Err.Error()
	}
	return e.Op + " " + e.Path + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

func opErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Path: path, Err: err}
}
