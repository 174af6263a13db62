package master

import (
	"context"
	"errors"

	"lockcell/fsm"
	"lockcell/wire"
)

var kindCodes = map[fsm.Kind]wire.Code{
	fsm.KindNotFound:           wire.CodeNotFound,
	fsm.KindExists:             wire.CodeExists,
	fsm.KindNotDir:             wire.CodeNotDir,
	fsm.KindIsDir:              wire.CodeIsDir,
	fsm.KindNotEmpty:           wire.CodeNotEmpty,
	fsm.KindGenerationMismatch: wire.CodeGenerationMismatch,
	fsm.KindLockHeld:           wire.CodeLockHeld,
	fsm.KindNotHeld:            wire.CodeNotHeld,
	fsm.KindHandleInvalid:      wire.CodeHandleInvalid,
	fsm.KindSessionExpired:     wire.CodeSessionExpired,
	fsm.KindDuplicate:          wire.CodeDuplicate,
	fsm.KindBadRequest:         wire.CodeBadRequest,
	fsm.KindLockDelay:          wire.CodeLockDelay,
	fsm.KindPermission:         wire.CodePermission,
	fsm.KindCanceled:           wire.CodeCanceled,
	fsm.KindStaleSequencer:     wire.CodeStaleSequencer,
	fsm.KindQuotaExceeded:      wire.CodeQuotaExceeded,
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
	var re *fsm.Error
	if errors.As(err, &re) {
		if c, ok := kindCodes[re.Kind]; ok {
			return &wire.Error{Code: c, Msg: re.Msg}
		}
		return &wire.Error{Code: wire.CodeInternal, Msg: re.Msg}
	}
	switch {
	case errors.Is(err, fsm.ErrNotLeader), errors.Is(err, fsm.ErrClosed), errors.Is(err, errStopped):
		return &wire.Error{Code: wire.CodeNotMaster, Msg: err.Error()}
	case errors.Is(err, fsm.ErrUnknownOutcome):
		return &wire.Error{Code: wire.CodeUnavailable, Msg: err.Error()}
	case errors.Is(err, fsm.ErrTooLarge):
		return &wire.Error{Code: wire.CodeTooLarge, Msg: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &wire.Error{Code: wire.CodeCanceled, Msg: err.Error()}
	}
	return &wire.Error{Code: wire.CodeInternal, Msg: err.Error()}
}

// resultErr returns the state-machine error carried in a result, if any.
func resultErr(r *fsm.Result) error {
	if r.Err != nil {
		return r.Err
	}
	return nil
}

var errStopped = errors.New("master: no longer master")
