package client

import (
	"time"

	"lockcell/wire"
)

// The codes of the typed errors, named here so that the declarations of
// the errors (errors.go) show client's names, not the wire's.
const (
	codeNotFound           = wire.CodeNotFound
	codeExists             = wire.CodeExists
	codePermission         = wire.CodePermission
	codeGenerationMismatch = wire.CodeGenerationMismatch
	codeLockHeld           = wire.CodeLockHeld
	codeNotHeld            = wire.CodeNotHeld
	codeSessionExpired     = wire.CodeSessionExpired
	codeUnknownSession     = wire.CodeUnknownSession
	codeInvalidName        = wire.CodeInvalidName
	codeTooLarge           = wire.CodeTooLarge
	codeHandleInvalid      = wire.CodeHandleInvalid
	codeNotEmpty           = wire.CodeNotEmpty
	codeNotDir             = wire.CodeNotDir
	codeIsDir              = wire.CodeIsDir
	codeLockDelay          = wire.CodeLockDelay
	codeBadEpoch           = wire.CodeBadEpoch
	codeBadRequest         = wire.CodeBadRequest
	codeCanceled           = wire.CodeCanceled
	codeStaleSequencer     = wire.CodeStaleSequencer
	codeBadSequencer       = wire.CodeBadSequencer
	codeTooMany            = wire.CodeTooMany
	codeQuotaExceeded      = wire.CodeQuotaExceeded
)

// codeError is a typed error of package client: one per code. It matches
// (errors.Is) every error of its code the cell returns, through
// wire.Error's Is, which asks WireCode; and it unwraps to the wire's
// sentinel of its code, so errors.Is against the wire's sentinels,
// errors.As to *wire.Error and wire.CodeOf (the CLI's JSON code names)
// see its code too.
type codeError struct{ w *wire.Error }

func codeErr(c wire.Code) error { return &codeError{w: &wire.Error{Code: c}} }

func (e *codeError) Error() string { return e.w.Error() }

// Unwrap returns the wire's error of the same code.
func (e *codeError) Unwrap() error { return e.w }

// WireCode reports the code, for wire.Error's Is.
func (e *codeError) WireCode() wire.Code { return e.w.Code }

// client's constants carry the wire's values without naming the wire in
// their declarations; each line below fails to compile when a pair
// differs (a negative constant overflows uint64).
const (
	_ = uint64(Read) - uint64(wire.OpenRead) + (uint64(wire.OpenRead) - uint64(Read))
	_ = uint64(Write) - uint64(wire.OpenWrite) + (uint64(wire.OpenWrite) - uint64(Write))
	_ = uint64(Create) - uint64(wire.OpenCreate) + (uint64(wire.OpenCreate) - uint64(Create))
	_ = uint64(Excl) - uint64(wire.OpenExcl) + (uint64(wire.OpenExcl) - uint64(Excl))
	_ = uint64(Directory) - uint64(wire.OpenDirectory) + (uint64(wire.OpenDirectory) - uint64(Directory))
	_ = uint64(Ephemeral) - uint64(wire.OpenEphemeral) + (uint64(wire.OpenEphemeral) - uint64(Ephemeral))
	_ = uint64(Sequential) - uint64(wire.OpenSequential) + (uint64(wire.OpenSequential) - uint64(Sequential))
	_ = uint64(Exclusive) - uint64(wire.LockExclusive) + (uint64(wire.LockExclusive) - uint64(Exclusive))
	_ = uint64(Shared) - uint64(wire.LockShared) + (uint64(wire.LockShared) - uint64(Shared))

	_ = uint64(OnContentsModified) - uint64(wire.MaskContentsModified) + (uint64(wire.MaskContentsModified) - uint64(OnContentsModified))
	_ = uint64(OnChildAdded) - uint64(wire.MaskChildAdded) + (uint64(wire.MaskChildAdded) - uint64(OnChildAdded))
	_ = uint64(OnChildRemoved) - uint64(wire.MaskChildRemoved) + (uint64(wire.MaskChildRemoved) - uint64(OnChildRemoved))
	_ = uint64(OnLockAcquired) - uint64(wire.MaskLockAcquired) + (uint64(wire.MaskLockAcquired) - uint64(OnLockAcquired))
	_ = uint64(OnConflictingLock) - uint64(wire.MaskConflictingLock) + (uint64(wire.MaskConflictingLock) - uint64(OnConflictingLock))
	_ = uint64(OnHandleInvalid) - uint64(wire.MaskHandleInvalid) + (uint64(wire.MaskHandleInvalid) - uint64(OnHandleInvalid))

	_ = uint64(MaxReleaseReason) - uint64(wire.MaxReleaseReason) + (uint64(wire.MaxReleaseReason) - uint64(MaxReleaseReason))
	_ = uint64(RequestReleaseInterval/time.Millisecond) - uint64(wire.RequestReleaseIntervalMillis) +
		(uint64(wire.RequestReleaseIntervalMillis) - uint64(RequestReleaseInterval/time.Millisecond))
	_ = uint64(MaxIdentityLen) - uint64(wire.MaxIdentityLen) + (uint64(wire.MaxIdentityLen) - uint64(MaxIdentityLen))
	_ = uint64(MaxStatHolders) - uint64(wire.MaxStatHolders) + (uint64(wire.MaxStatHolders) - uint64(MaxStatHolders))
)
