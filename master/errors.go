package master

import (
	"context"
	"errors"

	"lockcell/replica"
	"lockcell/wire"
)

var kindCodes = map[replica.Kind]wire.Code{
	replica.KindNotFound:           wire.CodeNotFound,
	replica.KindExists:             wire.CodeExists,
	replica.KindNotDir:             wire.CodeNotDir,
	replica.KindIsDir:              wire.CodeIsDir,
	replica.KindNotEmpty:           wire.CodeNotEmpty,
	replica.KindGenerationMismatch: wire.CodeGenerationMismatch,
	replica.KindLockHeld:           wire.CodeLockHeld,
	replica.KindNotHeld:            wire.CodeNotHeld,
	replica.KindHandleInvalid:      wire.CodeHandleInvalid,
	replica.KindSessionExpired:     wire.CodeSessionExpired,
	replica.KindDuplicate:          wire.CodeDuplicate,
	replica.KindBadRequest:         wire.CodeBadRequest,
	replica.KindLockDelay:          wire.CodeLockDelay,
	replica.KindPermission:         wire.CodePermission,
	replica.KindCanceled:           wire.CodeCanceled,
	replica.KindStaleSequencer:     wire.CodeStaleSequencer,
	replica.KindQuotaExceeded:      wire.CodeQuotaExceeded,
}

// toWire converts any error a handler meets into a typed wire error, so
// the client always gets a code it can act on.
func toWire(err error) error {
	if err == nil {
		return nil
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	var re *replica.Error
	if errors.As(err, &re) {
		if c, ok := kindCodes[re.Kind]; ok {
			return &wire.Error{Code: c, Msg: re.Msg}
		}
		return &wire.Error{Code: wire.CodeInternal, Msg: re.Msg}
	}
	switch {
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrClosed), errors.Is(err, errStopped):
		return &wire.Error{Code: wire.CodeNotMaster, Msg: err.Error()}
	case errors.Is(err, replica.ErrUnknownOutcome):
		return &wire.Error{Code: wire.CodeUnavailable, Msg: err.Error()}
	case errors.Is(err, replica.ErrTooLarge):
		return &wire.Error{Code: wire.CodeTooLarge, Msg: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &wire.Error{Code: wire.CodeCanceled, Msg: err.Error()}
	}
	return &wire.Error{Code: wire.CodeInternal, Msg: err.Error()}
}

// resultErr returns the state-machine error carried in a result, if any.
func resultErr(r *replica.Result) error {
	if r.Err != nil {
		return r.Err
	}
	return nil
}

var errStopped = errors.New("master: no longer master")
