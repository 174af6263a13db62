package fsm

import (
	"slices"

	"lockcell/acl"
)

// Transactions (CmdTxn): a list of checks and a list of operations on
// names, applied in one command, so in one Raft entry. Either every check
// passes and every operation applies, or nothing changes. Everything is
// decided before the first change: the checks and each operation's
// preconditions (existence, kind, permissions, ACL file syntax, quotas)
// against the state before the transaction, with an overlay of what the
// operations before it create and delete. The operations then apply in
// order exactly as the single commands would (createNode, the body of
// setContents, removeNode), so watchers get the same events.
//
// Each name is the subject of at most one operation: an operation never
// depends on the outcome of another on the same name, which keeps the
// plan's overlay small and the meaning obvious (etcd refuses the same).

// CmdTxn is a transaction: TxnArgs.
const CmdTxn CmdType = 22

// The kinds of TxnCheck. Numbers are part of the log format.
const (
	TxnCheckExists     uint8 = 1 // Path exists
	TxnCheckMissing    uint8 = 2 // Path does not exist
	TxnCheckGeneration uint8 = 3 // Path's content generation is Gen
	TxnCheckHeld       uint8 = 4 // Path's lock is held by a handle of the calling session (in Mode, unless 0)
	TxnCheckSequencer  uint8 = 5 // the lock Path is held at generation Gen in Mode (a verified sequencer)
)

// The kinds of TxnOp. Numbers are part of the log format.
const (
	TxnOpCreate    uint8 = 1 // make the file Path with Contents
	TxnOpCreateDir uint8 = 2 // make the directory Path
	TxnOpSet       uint8 = 3 // replace the file Path's contents
	TxnOpDelete    uint8 = 4 // delete the file or empty directory Path
)

// Bounds of one transaction. It is one command in one Raft entry: its
// contents together are at most what one file may hold, and its names at
// most 2*64 KiB, so it stays under MaxCommandSize with room for the
// envelope.
const (
	MaxTxnChecks   = 64
	MaxTxnOps      = 64
	MaxTxnContents = 256 * 1024
)

// TxnCheck is one condition of a transaction.
type TxnCheck struct {
	Kind uint8  `msgpack:"t"`
	Path string `msgpack:"p"`
	Gen  uint64 `msgpack:"g,omitempty"`
	Mode uint8  `msgpack:"m,omitempty"`
}

// TxnOp is one operation of a transaction.
type TxnOp struct {
	Kind     uint8  `msgpack:"t"`
	Path     string `msgpack:"p"`
	Contents []byte `msgpack:"c,omitempty"`
}

// TxnArgs: if every check holds, the operations apply in order; if not,
// or if one of them cannot apply, nothing does.
type TxnArgs struct {
	Checks []TxnCheck `msgpack:"k,omitempty"`
	Ops    []TxnOp    `msgpack:"o,omitempty"`
	// Quota, when set, caps what the transaction may add (quota.go),
	// counted as the net change of all its operations.
	Quota *Quota `msgpack:"qu,omitempty"`
}

// CmdType returns CmdTxn.
func (*TxnArgs) CmdType() CmdType { return CmdTxn }

func (*TxnArgs) payload() {}

// TxnOutcome answers a transaction (Result.Txn). Its presence in a stored
// result is what makes a snapshot version 6.
type TxnOutcome struct {
	// Gen is the command index the transaction applied at: the content
	// generation of every file it created or wrote, and the instance of
	// every node it created. 0 when it failed.
	Gen uint64 `msgpack:"g,omitempty"`
	// Check is 1 + the index of the check that failed, 0 if none did.
	Check int `msgpack:"k,omitempty"`
	// Op is 1 + the index of the operation that could not apply, 0 if
	// none (a quota refusal names no operation).
	Op int `msgpack:"o,omitempty"`
}

// ValidateTxn checks a transaction's shape: its bounds, known kinds, and
// each name the subject of at most one operation. Names are the master's
// to validate (it knows the cell); apply relies on none of this beyond
// determinism, as every replica applies the same bytes.
func ValidateTxn(p *TxnArgs) *Error {
	if len(p.Ops) == 0 && len(p.Checks) == 0 {
		return errf(KindBadRequest, "a transaction needs a check or an operation")
	}
	if len(p.Checks) > MaxTxnChecks || len(p.Ops) > MaxTxnOps {
		return errf(KindBadRequest, "a transaction of %d checks and %d operations (at most %d and %d)",
			len(p.Checks), len(p.Ops), MaxTxnChecks, MaxTxnOps)
	}
	for i, ck := range p.Checks {
		if ck.Kind < TxnCheckExists || ck.Kind > TxnCheckSequencer {
			return errf(KindBadRequest, "check %d (%s): unknown kind %d", i, ck.Path, ck.Kind)
		}
	}
	total := 0
	seen := make(map[string]bool, len(p.Ops))
	for i, op := range p.Ops {
		if op.Kind < TxnOpCreate || op.Kind > TxnOpDelete {
			return errf(KindBadRequest, "operation %d (%s): unknown kind %d", i, op.Path, op.Kind)
		}
		if seen[op.Path] {
			return errf(KindBadRequest, "operation %d (%s): a name may be the subject of one operation of a transaction", i, op.Path)
		}
		seen[op.Path] = true
		if len(op.Contents) > 0 && op.Kind != TxnOpCreate && op.Kind != TxnOpSet {
			return errf(KindBadRequest, "operation %d (%s): only create and set carry contents", i, op.Path)
		}
		total += len(op.Contents)
	}
	if total > MaxTxnContents {
		return errf(KindBadRequest, "a transaction's contents of %d bytes exceed %d", total, MaxTxnContents)
	}
	return nil
}

// txn applies a transaction (f.mu held).
func (f *FSM) txn(index uint64, c *Command, p *TxnArgs) *Result {
	if err := ValidateTxn(p); err != nil {
		return &Result{Err: err}
	}
	for i, ck := range p.Checks {
		if err := f.txnCheck(c, ck); err != nil {
			return &Result{Err: errf(err.Kind, "check %d (%s): %s", i, ck.Path, err.Msg), Txn: &TxnOutcome{Check: i + 1}}
		}
	}
	pl := txnPlan{f: f, c: c, created: map[string]bool{}, deleted: map[string]bool{}, kids: map[string]int{},
		grow: map[string]owned{}}
	for i, op := range p.Ops {
		if err := pl.plan(op); err != nil {
			return &Result{Err: errf(err.Kind, "operation %d (%s): %s", i, op.Path, err.Msg), Txn: &TxnOutcome{Op: i + 1}}
		}
	}
	if err := pl.checkQuota(p); err != nil {
		return &Result{Err: err, Txn: &TxnOutcome{}}
	}
	for _, op := range p.Ops {
		f.txnApply(index, c, op)
	}
	return &Result{Txn: &TxnOutcome{Gen: index}}
}

// visible is the node at name as c's caller may know it: nil when there
// is none or it is hidden from the caller (as Open answers).
func (f *FSM) visible(c *Command, name string) *Node {
	n := f.nodes[name]
	if n != nil && f.hiddenFrom(c, n) {
		return nil
	}
	return n
}

// txnCheck evaluates one check. Every check of a node the caller can see
// needs read permission on it; a node it can neither read nor write
// reads as missing, so a failed check tells nothing a single call would
// not.
func (f *FSM) txnCheck(c *Command, ck TxnCheck) *Error {
	if ck.Kind == TxnCheckSequencer {
		// Exactly the fenced write's check (checkFence).
		fc := &Fence{Path: ck.Path, Mode: ck.Mode, Generation: ck.Gen}
		if reason := fenceReasonOf(fc, f.fenceNode(fc, c.Principal, c.Admin)); reason != "" {
			return errf(KindStaleSequencer, "%s", reason)
		}
		return nil
	}
	n := f.visible(c, ck.Path)
	if n != nil {
		if err := f.permit(c, n, acl.Read); err != nil {
			return err
		}
	}
	switch ck.Kind {
	case TxnCheckExists:
		if n == nil {
			return errf(KindNotFound, "%s does not exist", ck.Path)
		}
	case TxnCheckMissing:
		if n != nil {
			return errf(KindExists, "%s exists", ck.Path)
		}
	case TxnCheckGeneration:
		if n == nil {
			return errf(KindNotFound, "%s does not exist", ck.Path)
		}
		if n.ContentGen != ck.Gen {
			return errf(KindGenerationMismatch, "content generation is %d, not %d", n.ContentGen, ck.Gen)
		}
	case TxnCheckHeld:
		if n == nil {
			return errf(KindNotFound, "%s does not exist", ck.Path)
		}
		for _, h := range n.Holders {
			if h.Session == c.Session && (ck.Mode == 0 || ck.Mode == n.LockMode) {
				return nil
			}
		}
		if ck.Mode != 0 {
			return errf(KindNotHeld, "%s is not locked %s by this session", ck.Path, modeName(ck.Mode))
		}
		return errf(KindNotHeld, "%s is not locked by this session", ck.Path)
	}
	return nil
}

// txnPlan decides whether each operation can apply, in order, against the
// state before the transaction and what the operations before it do.
type txnPlan struct {
	f       *FSM
	c       *Command
	created map[string]bool // made by an earlier operation; true: a directory
	deleted map[string]bool // deleted by an earlier operation (or emptied away: a container, an ephemeral directory)
	kids    map[string]int  // change of a directory's child count
	// grow is the net change of nodes and bytes by creator; nodes and
	// bytes the net change of the cell's.
	grow         map[string]owned
	nodes, bytes int64
	// name is the first operation that grows the namespace, for a quota
	// refusal's message.
	name string
}

// exists says whether name is there, as far as the caller may know,
// after the operations planned so far; dir says it is a directory.
func (pl *txnPlan) exists(name string) (ok, dir bool, n *Node) {
	if d, ok := pl.created[name]; ok {
		return true, d, nil
	}
	if pl.deleted[name] {
		return false, false, nil
	}
	n = pl.f.visible(pl.c, name)
	return n != nil, n != nil && n.Dir, n
}

// aclNode is the node whose ACL names decide access to name: its own,
// or, for a directory an earlier operation creates, the one it will be:
// the ACL names of its nearest existing ancestor, which it takes when
// created, and the caller as its creator.
func (pl *txnPlan) aclNode(name string) *Node {
	if _, made := pl.created[name]; !made {
		return pl.f.nodes[name]
	}
	for p := parentOf(name); p != ""; p = parentOf(p) {
		if _, made := pl.created[p]; made {
			continue
		}
		if n := pl.f.nodes[p]; n != nil {
			return &Node{Path: name, Dir: true, ReadACL: n.ReadACL, WriteACL: n.WriteACL, ChangeACL: n.ChangeACL, Creator: pl.c.Principal}
		}
	}
	return pl.f.nodes[pl.f.Root()] // not reached: the root is never created
}

func (pl *txnPlan) account(owner string, nodes, bytes int64, name string) {
	o := pl.grow[owner]
	o.nodes += nodes
	o.bytes += bytes
	pl.grow[owner] = o
	pl.nodes += nodes
	pl.bytes += bytes
	if pl.name == "" && (nodes > 0 || bytes > 0) {
		pl.name = name
	}
}

func (pl *txnPlan) plan(op TxnOp) *Error {
	f, c := pl.f, pl.c
	switch op.Kind {
	case TxnOpCreate, TxnOpCreateDir:
		dir := op.Kind == TxnOpCreateDir
		parentPath := parentOf(op.Path)
		pok, pdir, _ := pl.exists(parentPath)
		if parentPath == "" || !pok {
			return errf(KindNotFound, "parent directory %s does not exist", parentPath)
		}
		if !pdir {
			return errf(KindNotDir, "parent %s is a file", parentPath)
		}
		if err := f.permit(c, pl.aclNode(parentPath), acl.Write); err != nil {
			return err
		}
		if dir && len(op.Contents) > 0 {
			return errf(KindBadRequest, "a directory has no contents")
		}
		if err := f.checkACLContents(op.Path, op.Contents); err != nil {
			return err
		}
		if f.nodes[op.Path] != nil && !pl.deleted[op.Path] {
			// Taken, hidden or not: a create answers "exists", as Open
			// does (openHidden), only once the caller may create there.
			return errf(KindExists, "%s already exists", op.Path)
		}
		pl.created[op.Path] = dir
		pl.kids[parentPath]++
		pl.account(c.Principal, 1, int64(len(op.Contents)), op.Path)
	case TxnOpSet:
		ok, dir, n := pl.exists(op.Path)
		if !ok || n == nil {
			return errf(KindNotFound, "%s does not exist", op.Path)
		}
		if dir {
			return errf(KindIsDir, "%s is a directory", op.Path)
		}
		if err := f.permit(c, n, acl.Write); err != nil {
			return err
		}
		if err := f.checkACLContents(op.Path, op.Contents); err != nil {
			return err
		}
		pl.account(n.Creator, 0, int64(len(op.Contents))-int64(len(n.Contents)), op.Path)
	case TxnOpDelete:
		ok, _, n := pl.exists(op.Path)
		if !ok || n == nil {
			return errf(KindNotFound, "%s does not exist", op.Path)
		}
		if op.Path == f.Root() {
			return errf(KindBadRequest, "the cell root cannot be deleted")
		}
		if err := f.permit(c, n, acl.Write); err != nil {
			return err
		}
		if n.Dir && len(n.children)+pl.kids[op.Path] > 0 {
			return errf(KindNotEmpty, "%s is not empty", op.Path)
		}
		pl.remove(n)
	}
	return nil
}

// remove plans n's deletion and, as removeNode does, that of a parent it
// leaves empty that goes with its last child: a container, or an
// ephemeral directory with no handle open.
func (pl *txnPlan) remove(n *Node) {
	for n != nil {
		pl.deleted[n.Path] = true
		pl.account(n.Creator, -1, -int64(len(n.Contents)), n.Path)
		parentPath := parentOf(n.Path)
		pl.kids[parentPath]--
		parent := pl.f.nodes[parentPath]
		if parent == nil || !(parent.Container || parent.Ephemeral && parent.openHandles == 0) || len(parent.children)+pl.kids[parentPath] > 0 {
			return
		}
		n = parent
	}
}

// checkQuota refuses a transaction whose net change would pass a quota:
// the cell's counts with the net change of all operations, each
// principal's with the net change of the nodes it created (in name
// order, so every replica names the same one in its refusal).
func (pl *txnPlan) checkQuota(p *TxnArgs) *Error {
	if p.Quota == nil {
		return nil
	}
	name := pl.name
	if name == "" && len(p.Ops) > 0 {
		name = p.Ops[0].Path
	}
	cell := *p.Quota
	cell.NodesPerPrincipal, cell.ContentBytesPerPrincipal = 0, 0
	if err := pl.f.checkQuota(pl.c, &cell, name, pl.c.Principal, pl.nodes, pl.bytes); err != nil {
		return err
	}
	per := Quota{NodesPerPrincipal: p.Quota.NodesPerPrincipal, ContentBytesPerPrincipal: p.Quota.ContentBytesPerPrincipal}
	owners := make([]string, 0, len(pl.grow))
	for o := range pl.grow {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		g := pl.grow[o]
		nodes := int64(0)
		if o == pl.c.Principal {
			nodes = g.nodes // the per-principal node quota counts the caller's own
		}
		if err := pl.f.checkQuota(pl.c, &per, name, o, nodes, g.bytes); err != nil {
			return err
		}
	}
	return nil
}

// txnApply applies one planned operation as its single command would.
func (f *FSM) txnApply(index uint64, c *Command, op TxnOp) {
	switch op.Kind {
	case TxnOpCreate, TxnOpCreateDir:
		flags := FlagCreate
		if op.Kind == TxnOpCreateDir {
			flags |= FlagDirectory
		}
		f.createNode(index, c, &OpenArgs{Path: op.Path, Flags: flags, Contents: op.Contents}, f.nodes[parentOf(op.Path)], op.Path)
	case TxnOpSet:
		n := f.nodes[op.Path]
		old := int64(len(n.Contents))
		n.Contents = op.Contents
		f.usage.resize(n, old)
		n.ContentGen = index
		n.Checksum = checksum(op.Contents)
		n.MTime = c.Time
		f.note(Change{Kind: ChangeNode, Path: n.Path})
		f.note(Change{Kind: ChangeContents, Path: n.Path})
	case TxnOpDelete:
		if n := f.nodes[op.Path]; n != nil {
			f.removeNode(index, n, c.Time)
		}
	}
}

// txnAffectedPaths adds to set every name a transaction may change: each
// operation's name, the listing of its parent (and of ephemeral parents
// a delete may empty away), and what an ACL file it writes governs.
func (f *FSM) txnAffectedPaths(set map[string]bool, p *TxnArgs, addNode func(string)) {
	for _, op := range p.Ops {
		switch op.Kind {
		case TxnOpSet:
			set[op.Path] = true
		default:
			addNode(op.Path)
		}
		f.addACLDependents(set, op.Path)
	}
}
