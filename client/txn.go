package client

import (
	"context"
	"fmt"

	"lockcell/wire"
)

// Transactions: checks and operations on several names, applied by the
// cell in one replicated command, so all or nothing (docs/spec.md,
// "Transactions"). The shape is etcd's clientv3 Txn: build with If and
// Then, send with Commit.

// Cmp is one check of a transaction (Exists, Missing, GenerationIs,
// Holds, SequencerValid).
type Cmp struct{ w wire.TxnCheck }

// Exists holds when name exists (as far as the caller may know: a name
// it may neither read nor write reads as missing).
func Exists(name string) Cmp { return Cmp{wire.TxnCheck{Kind: wire.TxnCheckExists, Path: name}} }

// Missing holds when name does not exist (or the caller may neither
// read nor write it).
func Missing(name string) Cmp { return Cmp{wire.TxnCheck{Kind: wire.TxnCheckMissing, Path: name}} }

// GenerationIs holds when name's content generation (Stat.ContentGen,
// what IfGeneration compares) is gen.
func GenerationIs(name string, gen uint64) Cmp {
	return Cmp{wire.TxnCheck{Kind: wire.TxnCheckGeneration, Path: name, Generation: gen}}
}

// Holds holds when a handle of this client's session holds name's lock,
// in mode (0: in either mode).
func Holds(name string, mode LockMode) Cmp {
	return Cmp{wire.TxnCheck{Kind: wire.TxnCheckHeld, Path: name, Mode: uint8(mode)}}
}

// SequencerValid holds while the lock seq names is still held at seq's
// generation in seq's mode: the check a fenced write makes
// (SetSequencer).
func SequencerValid(seq Sequencer) Cmp {
	return Cmp{wire.TxnCheck{Kind: wire.TxnCheckSequencer, Sequencer: seq}}
}

// Op is one operation of a transaction (OpCreate, OpMkdir, OpSet,
// OpDelete). Each name may be the subject of one operation of a
// transaction.
type Op struct{ w wire.TxnOp }

// OpCreate makes the file name with data as its contents; name must not
// exist and its parent directory must (or be made by an earlier OpMkdir).
// A node made by a transaction is never ephemeral: an ephemeral node
// needs a handle, which a transaction does not open.
func OpCreate(name string, data []byte) Op {
	return Op{wire.TxnOp{Kind: wire.TxnOpCreate, Path: name, Contents: data}}
}

// OpMkdir makes the directory name.
func OpMkdir(name string) Op { return Op{wire.TxnOp{Kind: wire.TxnOpCreateDir, Path: name}} }

// OpSet replaces the file name's contents with data.
func OpSet(name string, data []byte) Op {
	return Op{wire.TxnOp{Kind: wire.TxnOpSet, Path: name, Contents: data}}
}

// OpDelete deletes the file or empty directory name.
func OpDelete(name string) Op { return Op{wire.TxnOp{Kind: wire.TxnOpDelete, Path: name}} }

// Txn is a transaction being built: checks (If) and operations (Then),
// sent by Commit. A Txn is used by one goroutine and committed once.
type Txn struct {
	c      *Client
	ctx    context.Context
	checks []wire.TxnCheck
	ops    []wire.TxnOp
}

// Txn starts a transaction in c's session. ctx bounds Commit.
func (c *Client) Txn(ctx context.Context) *Txn { return &Txn{c: c, ctx: ctx} }

// If adds checks; all of them must hold for the operations to apply.
func (t *Txn) If(cs ...Cmp) *Txn {
	for _, c := range cs {
		t.checks = append(t.checks, c.w)
	}
	return t
}

// Then adds operations, applied in order if every check holds.
func (t *Txn) Then(ops ...Op) *Txn {
	for _, o := range ops {
		t.ops = append(t.ops, o.w)
	}
	return t
}

// TxnResult is a committed transaction's outcome.
type TxnResult struct {
	// Generation is the content generation of every file the
	// transaction created or wrote (and the instance of every node it
	// created): the value a later GenerationIs compares.
	Generation uint64
	// Generations has one entry per operation, in order: Generation for
	// a create or a set, 0 for a delete.
	Generations []uint64
}

// TxnError says why a transaction changed nothing: the check that did
// not hold (Check, its index among the If checks, Op -1) or the
// operation that could not apply (Op, Check -1), with its name. Err is
// what the single call would have answered, so errors.Is(err,
// ErrGenerationMismatch), ErrNotFound, ErrExists, ErrNotHeld,
// ErrStaleSequencer, ErrPermission... match a *TxnError too. A name the
// caller may neither read nor write fails a check as a missing one does.
type TxnError struct {
	Check, Op int
	Path      string
	Err       error
}

func (e *TxnError) Error() string {
	if e.Check >= 0 {
		return fmt.Sprintf("txn: check %d (%s) failed: %v", e.Check, e.Path, e.Err)
	}
	return fmt.Sprintf("txn: operation %d (%s) cannot apply: %v", e.Op, e.Path, e.Err)
}

// Unwrap returns the error the failed check or operation had.
func (e *TxnError) Unwrap() error { return e.Err }

// Commit sends the transaction: if every check holds, every operation
// applies, in one replicated command, and nothing else happens between
// the checks and the operations; otherwise nothing changes and the error
// is a *TxnError naming the check or operation. Other errors (a quota
// the transaction would pass: ErrQuotaExceeded; more than 64 checks or
// operations or more than 256 KiB of contents: ErrTooLarge; a malformed
// transaction: ErrBadRequest) are the whole call's. Commit is retried
// across a master change under one request id, so the cell applies the
// transaction at most once and a retry gets the first outcome.
func (t *Txn) Commit() (*TxnResult, error) {
	name := ""
	if len(t.ops) > 0 {
		name = t.ops[0].Path
	} else if len(t.checks) > 0 {
		name = t.checks[0].Path
	}
	total := 0
	for _, o := range t.ops {
		total += len(o.Contents)
	}
	if len(t.checks) > wire.MaxTxnChecks || len(t.ops) > wire.MaxTxnOps || total > wire.MaxTxnContents {
		return nil, opErr("txn", name, wire.Errorf(wire.CodeTooLarge,
			"a transaction of %d checks, %d operations and %d bytes of contents exceeds the limits of %d, %d and %d",
			len(t.checks), len(t.ops), total, wire.MaxTxnChecks, wire.MaxTxnOps, wire.MaxTxnContents))
	}
	var resp wire.TxnResponse
	if err := t.c.call(t.ctx, wire.MethodTxn, true, &wire.TxnRequest{Checks: t.checks, Ops: t.ops}, &resp); err != nil {
		return nil, opErr("txn", name, err)
	}
	if f := resp.Failed; f != nil {
		e := &TxnError{Check: f.Check, Op: f.Op, Err: &wire.Error{Code: f.Code, Msg: f.Msg}}
		switch {
		case f.Check >= 0 && f.Check < len(t.checks):
			e.Path = t.checks[f.Check].Path
		case f.Op >= 0 && f.Op < len(t.ops):
			e.Path = t.ops[f.Op].Path
		}
		return nil, e
	}
	r := &TxnResult{Generation: resp.Generation, Generations: make([]uint64, len(t.ops))}
	for i, o := range t.ops {
		if o.Kind != wire.TxnOpDelete {
			r.Generations[i] = resp.Generation
		}
	}
	return r, nil
}
