package fsm

import (
	"strconv"
)

// Sequential names (ZooKeeper's SEQUENTIAL nodes). An Open with
// FlagSequential and FlagCreate names a prefix, say /ls/c/q/job-, and
// creates /ls/c/q/job-0000000017: the prefix followed by the parent
// directory's counter (Node.ChildSeq) in SeqDigits zero-padded decimal
// digits, ZooKeeper's width. The counter is replicated state of the
// directory, so every replica picks the same name; it grows by one past
// each number handed out and never goes back while the directory lives,
// so a number is never reused, even after its child is deleted (a
// directory deleted and made again starts at 0, as in ZooKeeper).
//
// A name the counter reaches that is taken already (someone created it
// by hand) is skipped: the create takes the first free number at or past
// the counter, and the counter moves past it. Every replica sees the same
// children, so the skip is deterministic; it costs one lookup per taken
// name, bounded by the directory's children.
//
// Past MaxChildSeq the directory has no number left: a sequential create
// there fails with KindBadRequest rather than grow the width, so the
// names of one directory always sort in the order they were made
// (consumers of a queue rely on that). Ten billion creates in one
// directory is years of a busy queue; a new directory starts afresh.

// SeqDigits is the width of a sequential name's number.
const SeqDigits = 10

// MaxChildSeq is the last number a directory hands out: the largest
// SeqDigits digits hold.
const MaxChildSeq = 9_999_999_999

// maxChildSeq is MaxChildSeq typed for the counter.
const maxChildSeq uint64 = MaxChildSeq

// SeqMaxNameLen and SeqMaxComponentLen are the naming bounds a
// sequential name must keep; the master checks a
// sequential Open's prefix with them (prefix plus SeqDigits digits) before
// proposing, and apply checks them again, since the created name exists
// nowhere before apply. They are wire.MaxNameLen and MaxComponentLen,
// which fsm cannot import (the master asserts they agree).
const (
	SeqMaxNameLen      = 1024
	SeqMaxComponentLen = 255
)

// SeqName is the name a sequential create of prefix makes with number n.
func SeqName(prefix string, n uint64) string {
	var b [SeqDigits]byte
	s := strconv.AppendUint(b[:0], n, 10)
	out := make([]byte, 0, len(prefix)+SeqDigits)
	out = append(out, prefix...)
	for range SeqDigits - len(s) {
		out = append(out, '0')
	}
	return string(append(out, s...))
}

// openSequential applies an Open with FlagSequential: a create of a new
// node under a name of its own (see above), which the result carries in
// Name. It is a create like any other (the parent's write permission, the
// quota, the kind and contents rules of checkCreate), except that it never
// opens an existing node.
func (f *FSM) openSequential(index uint64, c *Command, s *Session, p *OpenArgs) *Result {
	if p.Flags&FlagCreate == 0 {
		return &Result{Err: errf(KindBadRequest, "%s: a sequential open needs the create flag", p.Path)}
	}
	base := baseOf(p.Path)
	if len(p.Path)+SeqDigits > SeqMaxNameLen || len(base)+SeqDigits > SeqMaxComponentLen {
		return &Result{Err: errf(KindBadRequest, "%s: the prefix leaves no room for a %d-digit sequence number", p.Path, SeqDigits)}
	}
	parent, err := f.checkCreate(c, p)
	if err != nil {
		return &Result{Err: err}
	}
	if f.isACLFile(p.Path) {
		// ACLs name their files: a name no one chose cannot be named.
		return &Result{Err: errf(KindBadRequest, "%s: ACL files cannot be created with sequential names", p.Path)}
	}
	n := parent.ChildSeq
	for ; n <= maxChildSeq; n++ {
		if _, taken := parent.children[base+SeqName("", n)]; !taken {
			break
		}
	}
	if n > maxChildSeq {
		return &Result{Err: errf(KindBadRequest, "%s: directory %s has handed out its last sequence number %d",
			p.Path, parent.Path, maxChildSeq)}
	}
	name := SeqName(p.Path, n)
	parent.ChildSeq = n + 1
	node := f.createNode(index, c, p, parent, name)
	f.openHandle(index, c, s, p, node)
	return &Result{Handle: index, Created: true, Stat: node.stat(), Name: name}
}
