package master

import (
	"context"
	"errors"

	"lockcell/fsm"
	"lockcell/wire"
)

// The wire's transaction kinds and bounds are the state machine's (each
// line fails to compile when a pair differs).
const (
	_ = uint64(fsm.TxnCheckSequencer) - uint64(wire.TxnCheckSequencer) + (uint64(wire.TxnCheckSequencer) - uint64(fsm.TxnCheckSequencer))
	_ = uint64(fsm.TxnCheckExists) - uint64(wire.TxnCheckExists) + (uint64(wire.TxnCheckExists) - uint64(fsm.TxnCheckExists))
	_ = uint64(fsm.TxnCheckMissing) - uint64(wire.TxnCheckMissing) + (uint64(wire.TxnCheckMissing) - uint64(fsm.TxnCheckMissing))
	_ = uint64(fsm.TxnCheckGeneration) - uint64(wire.TxnCheckGeneration) + (uint64(wire.TxnCheckGeneration) - uint64(fsm.TxnCheckGeneration))
	_ = uint64(fsm.TxnCheckHeld) - uint64(wire.TxnCheckHeld) + (uint64(wire.TxnCheckHeld) - uint64(fsm.TxnCheckHeld))
	_ = uint64(fsm.TxnOpCreate) - uint64(wire.TxnOpCreate) + (uint64(wire.TxnOpCreate) - uint64(fsm.TxnOpCreate))
	_ = uint64(fsm.TxnOpCreateDir) - uint64(wire.TxnOpCreateDir) + (uint64(wire.TxnOpCreateDir) - uint64(fsm.TxnOpCreateDir))
	_ = uint64(fsm.TxnOpSet) - uint64(wire.TxnOpSet) + (uint64(wire.TxnOpSet) - uint64(fsm.TxnOpSet))
	_ = uint64(fsm.TxnOpDelete) - uint64(wire.TxnOpDelete) + (uint64(wire.TxnOpDelete) - uint64(fsm.TxnOpDelete))
	_ = uint64(fsm.MaxTxnOps) - uint64(wire.MaxTxnOps) + (uint64(wire.MaxTxnOps) - uint64(fsm.MaxTxnOps))
	_ = uint64(fsm.MaxTxnChecks) - uint64(wire.MaxTxnChecks) + (uint64(wire.MaxTxnChecks) - uint64(fsm.MaxTxnChecks))
	_ = uint64(fsm.MaxTxnContents) - uint64(wire.MaxTxnContents) + (uint64(wire.MaxTxnContents) - uint64(fsm.MaxTxnContents))
)

// txn serves MethodTxn: the request's names are validated and its
// sequencers verified (signature, cell) here, then the whole transaction
// is one command, proposed after every name it may change is invalidated
// (View.AffectedPaths). A failed check or an operation that cannot apply
// is the reply's Failed, with the code a single call would answer.
func (e *fileEndpoint) txn(ctx context.Context, c *call, req *wire.TxnRequest) (*wire.TxnResponse, error) {
	if len(req.Checks) > wire.MaxTxnChecks || len(req.Ops) > wire.MaxTxnOps {
		return nil, wire.Errorf(wire.CodeTooLarge, "a transaction of %d checks and %d operations exceeds the limits of %d and %d",
			len(req.Checks), len(req.Ops), wire.MaxTxnChecks, wire.MaxTxnOps)
	}
	args := fsm.TxnArgs{Checks: make([]fsm.TxnCheck, 0, len(req.Checks)), Ops: make([]fsm.TxnOp, 0, len(req.Ops))}
	for i, ck := range req.Checks {
		fc := fsm.TxnCheck{Kind: ck.Kind, Path: ck.Path, Gen: ck.Generation, Mode: ck.Mode}
		if ck.Kind == wire.TxnCheckSequencer {
			s, err := e.r.verifySequencer(ck.Sequencer)
			if err != nil {
				return nil, txnCallErr(err, "check %d", i)
			}
			// A permit is checked as the replicas check it: shared, at
			// the holder's own generation (fsm.Fence.Replicated).
			rf := (&fsm.Fence{Path: s.Path, Mode: uint8(s.Mode), Generation: s.Generation}).Replicated()
			fc.Path, fc.Mode, fc.Gen = rf.Path, rf.Mode, rf.Generation
		} else if err := wire.ValidateName(e.cfg.Cell, ck.Path); err != nil {
			return nil, txnCallErr(err, "check %d", i)
		}
		args.Checks = append(args.Checks, fc)
	}
	total := 0
	for i, op := range req.Ops {
		if err := wire.ValidateName(e.cfg.Cell, op.Path); err != nil {
			return nil, txnCallErr(err, "operation %d", i)
		}
		total += len(op.Contents)
		args.Ops = append(args.Ops, fsm.TxnOp{Kind: op.Kind, Path: op.Path, Contents: op.Contents})
	}
	if total > wire.MaxTxnContents {
		return nil, wire.Errorf(wire.CodeTooLarge, "a transaction's contents of %d bytes exceed the limit of %d", total, wire.MaxTxnContents)
	}
	if err := fsm.ValidateTxn(&args); err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "%s", err.Msg)
	}
	if len(args.Ops) > 0 {
		c.path = args.Ops[0].Path // for the audit log
	} else {
		c.path = args.Checks[0].Path
	}
	res, err := e.w.apply(ctx, c, commandOf(args))
	var re *fsm.Error
	if err != nil && res != nil && res.Txn != nil && (res.Txn.Check > 0 || res.Txn.Op > 0) && errors.As(err, &re) {
		code, ok := kindCodes[re.Kind]
		if !ok {
			code = wire.CodeInternal
		}
		return &wire.TxnResponse{Failed: &wire.TxnFailure{Check: res.Txn.Check - 1, Op: res.Txn.Op - 1, Code: code, Msg: re.Msg}}, nil
	}
	if err != nil {
		return nil, err
	}
	var gen uint64
	if res.Txn != nil {
		gen = res.Txn.Gen
	}
	return &wire.TxnResponse{Generation: gen}, nil
}

// txnCallErr prefixes a refusal of one check or operation with which it
// is, keeping its code (invalid name, bad sequencer).
func txnCallErr(err error, format string, i int) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return wire.Errorf(we.Code, format+": %s", i, we.Msg)
	}
	return wire.Errorf(wire.CodeBadRequest, format+": %v", i, err)
}
