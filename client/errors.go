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

	// ErrCertificateRefused means a replica refused this client's TLS
	// certificate (unknown CA, expired, not yet valid, not a user
	// certificate...). The cell's replicas share one CA, so the call is not
	// retried at another: it fails at once.
	ErrCertificateRefused = errors.New("lockcell: the cell refused this client's TLS certificate")
	// ErrAllRefused means Dial found nothing listening: in one round over
	// every configured replica each refused the TCP connection (ECONNREFUSED),
	// so no cell runs at those addresses (or they are wrong). Dial then fails
	// at once, naming the addresses, instead of retrying for RetryTimeout. Any
	// other failure (a connect that times out, a replica that answers but
	// knows no master) keeps Dial retrying as before, and a Client that Dial
	// has returned is never failed this way: it keeps hunting for a master
	// through its jeopardy and grace period.
	ErrAllRefused = errors.New("lockcell: connection refused by every replica")
	// ErrTooManyConnections means a replica refused the connection because a
	// cap on connections was full: its connections from this address
	// (--max-conns-per-ip, 64 by default), of this principal
	// (--max-conns-per-principal) or in all (--max-conns). The error also
	// matches ErrTooMany, and its message names the cap and its value.
	//
	// A Client is one session and holds one connection per replica it talks
	// to (in practice the master's), however many goroutines call through it
	// and however many handles, locks and parked calls it has: every call in
	// flight is a stream of that one connection. A process that dials one
	// Client per goroutine or per worker uses one connection to the master
	// for each, and meets the per-address cap at 64; it should share one
	// Client (or a few) among them instead, set Config.ShareConnections on
	// its Clients (their sessions then share one connection per replica), or
	// the operator raise the cap.
	//
	// Dial fails with it at once when the replica named as the master refused
	// the connection, or every replica did; a Client that Dial has returned
	// keeps retrying through RetryTimeout (a place may come free), and then
	// fails with ErrNoMaster wrapping it.
	ErrTooManyConnections = errors.New("lockcell: connection refused: too many connections")
	// ErrTLSIncomplete: some but not all of EnvCert, EnvKey and EnvCA are
	// set. An EnvError carrying it names the first one missing.
	ErrTLSIncomplete = errors.New("lockcell: LOCKCELL_CERT, LOCKCELL_KEY and LOCKCELL_CA go together")
	// ErrPoisoned is the error of every call on a handle after Poison (but
	// Close), and of the calls in flight on it when Poison was called.
	ErrPoisoned = errors.New("lockcell: handle poisoned")
	// ErrLockBroken is the cause (context.Cause of Handle.LockContext, under
	// errors.Is) when the cell's admin broke the lock the handle held
	// (admin.Admin.BreakLock): the lock is free or another's, at a later generation, and
	// the handle's sequencer is stale at every resource server that checks it.
	ErrLockBroken = errors.New("lockcell: lock broken by the cell's admin")
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
