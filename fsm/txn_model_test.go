package fsm

import (
	"pgregory.net/rapid"
)

// The reference model of transactions, written the plain way: check
// everything, then apply the operations one by one with the single
// operations' rules on the live state, and put every node back as it was
// if one of them fails. The state machine decides first and applies after
// (txn.go); the model test holds the two to the same answers and states.

// modelTxn draws a transaction over the model's names: mostly distinct
// names, generations that are sometimes the current ones.
func modelTxn(rt *rapid.T, m *model, pickName func() string) *TxnArgs {
	p := &TxnArgs{}
	for range rapid.IntRange(0, 3).Draw(rt, "txn checks") {
		ck := TxnCheck{Kind: rapid.Uint8Range(TxnCheckExists, TxnCheckSequencer).Draw(rt, "check kind"), Path: pickName()}
		ck.Gen = uint64(rapid.IntRange(0, 3).Draw(rt, "check gen"))
		if n := m.nodes[ck.Path]; n != nil && rapid.Bool().Draw(rt, "current gen") {
			ck.Gen = n.cgen
			if ck.Kind == TxnCheckSequencer {
				ck.Gen = n.lgen
			}
		}
		ck.Mode = rapid.SampledFrom([]uint8{0, LockExclusive, LockShared}).Draw(rt, "check mode")
		p.Checks = append(p.Checks, ck)
	}
	seen := map[string]bool{}
	for range rapid.IntRange(0, 4).Draw(rt, "txn ops") {
		op := TxnOp{Kind: rapid.Uint8Range(TxnOpCreate, TxnOpDelete).Draw(rt, "op kind"), Path: pickName()}
		if seen[op.Path] && !modelChance(rt, 10, "same name twice") {
			continue
		}
		seen[op.Path] = true
		if op.Kind == TxnOpCreate || op.Kind == TxnOpSet {
			op.Contents = []byte(rapid.SampledFrom([]string{"", "t1", "t22"}).Draw(rt, "txn contents"))
		}
		p.Ops = append(p.Ops, op)
	}
	return p
}

func (m *model) txn(idx uint64, c mCmd) mResult {
	p := c.Txn
	seen := map[string]bool{}
	for _, op := range p.Ops {
		if seen[op.Path] {
			return errResult(KindBadRequest)
		}
		seen[op.Path] = true
	}
	if len(p.Ops)+len(p.Checks) == 0 {
		return errResult(KindBadRequest)
	}
	for i, ck := range p.Checks {
		if k := m.txnCheck(c, ck); k != KindNone {
			return mResult{Kind: k, Txn: TxnOutcome{Check: i + 1}}
		}
	}
	saved := make(map[string]mNode, len(m.nodes))
	for path, n := range m.nodes {
		saved[path] = *n
	}
	for i, op := range p.Ops {
		if k := m.txnOp(idx, c, op); k != KindNone {
			m.nodes = make(map[string]*mNode, len(saved))
			for path, n := range saved {
				m.nodes[path] = &n
			}
			return mResult{Kind: k, Txn: TxnOutcome{Op: i + 1}}
		}
	}
	return mResult{Txn: TxnOutcome{Gen: idx}}
}

func (m *model) txnCheck(c mCmd, ck TxnCheck) Kind {
	n := m.nodes[ck.Path]
	if ck.Kind == TxnCheckSequencer {
		// The fenced write's check: a lock the caller may not read is
		// checked as if it were gone.
		switch {
		case n == nil || !m.allowed(c.Principal, c.Admin, n, permRead),
			len(n.holders) == 0, n.lgen != ck.Gen, n.mode != ck.Mode:
			return KindStaleSequencer
		}
		return KindNone
	}
	if n != nil && m.hidden(&c, n) {
		n = nil
	}
	if n != nil && !m.allowed(c.Principal, c.Admin, n, permRead) {
		return KindPermission
	}
	switch ck.Kind {
	case TxnCheckMissing:
		if n != nil {
			return KindExists
		}
		return KindNone
	case TxnCheckExists, TxnCheckGeneration, TxnCheckHeld:
		if n == nil {
			return KindNotFound
		}
	}
	switch ck.Kind {
	case TxnCheckGeneration:
		if n.cgen != ck.Gen {
			return KindGenerationMismatch
		}
	case TxnCheckHeld:
		for _, h := range n.holders {
			if h.Session == c.Session && (ck.Mode == 0 || ck.Mode == n.mode) {
				return KindNone
			}
		}
		return KindNotHeld
	}
	return KindNone
}

// txnOp applies one operation as its single command would, on the state
// the operations before it left.
func (m *model) txnOp(idx uint64, c mCmd, op TxnOp) Kind {
	n := m.nodes[op.Path]
	visible := n != nil && !m.hidden(&c, n)
	switch op.Kind {
	case TxnOpCreate, TxnOpCreateDir:
		dir := op.Kind == TxnOpCreateDir
		parent := m.nodes[modelParent(op.Path)]
		switch {
		case parent == nil || m.hidden(&c, parent):
			return KindNotFound
		case !parent.dir:
			return KindNotDir
		case !m.allowed(c.Principal, c.Admin, parent, permWrite):
			return KindPermission
		case dir && len(op.Contents) > 0:
			return KindBadRequest
		case n != nil:
			return KindExists
		}
		m.nodes[op.Path] = &mNode{dir: dir, contents: string(op.Contents), inst: idx, cgen: idx, agen: idx,
			ctime: c.Time, mtime: c.Time, acl: parent.acl, creator: c.Principal, sum: checksum(op.Contents)}
	case TxnOpSet:
		switch {
		case !visible:
			return KindNotFound
		case n.dir:
			return KindIsDir
		case !m.allowed(c.Principal, c.Admin, n, permWrite):
			return KindPermission
		}
		n.contents, n.cgen, n.mtime, n.sum = string(op.Contents), idx, c.Time, checksum(op.Contents)
	case TxnOpDelete:
		switch {
		case !visible:
			return KindNotFound
		case op.Path == m.root:
			return KindBadRequest
		case !m.allowed(c.Principal, c.Admin, n, permWrite):
			return KindPermission
		case n.dir && m.children(op.Path) > 0:
			return KindNotEmpty
		}
		m.removeNode(op.Path, c.Time)
	}
	return KindNone
}
