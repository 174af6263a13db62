package fsm

import (
	"container/heap"
	"time"
)

// TTL nodes and container directories (ZooKeeper 3.6's TTL and CONTAINER
// nodes): two lifetime rules a node is created with, kept in the node
// (Node.TTL, Node.Container) so every replica knows them.
//
// A TTL node is a file created with a TTL (OpenArgs.TTL, between MinTTL
// and MaxTTL). Once MTime+TTL passes without a write (a SetContents moves
// MTime and the content generation), the master proposes CmdExpireTTL,
// which deletes it as a Delete would: waiters are told their wait ended,
// handles go invalid, a lock held on it goes with it (as ZooKeeper
// deletes TTL nodes whatever watches them; a client that wants its file
// kept writes to it). The entry names the instance and content generation
// the master saw, and applies only if the node still has them and the
// entry's own Time is at or past MTime+TTL: a write that raced the expiry
// wins, and the decision reads replicated state and the stamped time only,
// never a replica's clock. Directories take no TTL: a directory's life is
// its children's (a container is that rule).
//
// The master's timers are the state's own index (ttlIndex below): every
// replica keeps the TTL nodes in a heap by deadline, derived from the
// nodes and rebuilt on restore, so a new master finds every pending
// expiry in its own state and deletes each node once mtime+TTL has
// passed on its clock. The heap has one entry per TTL node, bounded by
// the node quotas like the nodes themselves.
//
// A container is a directory created with FlagContainer. The command that
// removes its last child (a Delete, a TTL expiry, an ephemeral node's end
// with its session) removes the container too, in the same apply
// (removeNode), and so on up a chain of containers. A container never
// given a child is kept (ZooKeeper removes such ones after a grace; here
// its creator deletes it), and open handles or a held lock do not keep an
// emptied container, as they do not keep a deleted node.

// MinTTL and MaxTTL bound a TTL node's TTL. Below MinTTL the expiry would
// be decided by the master's scan period more than by the TTL; MaxTTL
// keeps MTime+TTL far from overflow and a forgotten file from outliving a
// year of its cell.
const (
	MinTTL = 500 * time.Millisecond
	MaxTTL = 365 * 24 * time.Hour
)

// ExpireTTLArgs: the master's deletion of the TTL node at Path whose TTL
// passed, if it is still instance Instance at content generation Gen.
type ExpireTTLArgs struct {
	Path     string `msgpack:"p,omitempty"`
	Instance uint64 `msgpack:"i,omitempty"`
	Gen      uint64 `msgpack:"g,omitempty"`
}

// CmdType returns CmdExpireTTL.
func (*ExpireTTLArgs) CmdType() CmdType { return CmdExpireTTL }
func (*ExpireTTLArgs) payload()         {}

// checkLifetime refuses an Open whose TTL or container flag cannot be
// honoured: they ask for a create, a TTL only of a plain file, a container
// only of a plain directory.
func checkLifetime(p *OpenArgs) *Error {
	container := p.Flags&FlagContainer != 0
	if p.TTL == 0 && !container {
		return nil
	}
	if p.Flags&FlagCreate == 0 {
		return errf(KindBadRequest, "%s: a TTL or container open needs the create flag", p.Path)
	}
	if p.Flags&FlagEphemeral != 0 {
		return errf(KindBadRequest, "%s: an ephemeral node takes no TTL and is no container: its session is its life", p.Path)
	}
	if p.TTL != 0 {
		if container || p.Flags&FlagDirectory != 0 {
			return errf(KindBadRequest, "%s: only a file takes a TTL", p.Path)
		}
		if p.TTL < int64(MinTTL) || p.TTL > int64(MaxTTL) {
			return errf(KindBadRequest, "%s: TTL %v is outside %v to %v", p.Path, time.Duration(p.TTL), MinTTL, MaxTTL)
		}
	}
	if container && p.Flags&FlagDirectory == 0 {
		return errf(KindBadRequest, "%s: only a directory can be a container", p.Path)
	}
	return nil
}

// expireTTL applies CmdExpireTTL (see above). Its errors say why the node
// was kept; the master proposes again from the index if it is still due.
func (f *FSM) expireTTL(index uint64, c *Command, p *ExpireTTLArgs) *Result {
	n := f.nodes[p.Path]
	switch {
	case n == nil || n.Instance != p.Instance:
		return &Result{Err: errf(KindNotFound, "%s: the TTL node expired is gone", p.Path)}
	case n.TTL == 0:
		return &Result{Err: errf(KindBadRequest, "%s is not a TTL node", p.Path)}
	case n.ContentGen != p.Gen:
		return &Result{Err: errf(KindGenerationMismatch, "%s: written since (content generation %d, not %d)", p.Path, n.ContentGen, p.Gen)}
	case c.Time < n.MTime+n.TTL:
		return &Result{Err: errf(KindBadRequest, "%s: TTL not yet passed", p.Path)}
	}
	f.removeNode(index, n, c.Time)
	return &Result{}
}

// ttlIndex is the TTL nodes in a min-heap by deadline (MTime+TTL, then
// name, so the order is the same on every replica), with each entry
// found by name for the updates of a write or a delete. Derived state:
// outside the snapshot and the hash, rebuilt on restore.
type ttlIndex struct {
	heap   ttlHeap
	byPath map[string]*ttlEntry
}

type ttlEntry struct {
	deadline int64
	path     string
	pos      int
}

type ttlHeap []*ttlEntry

func (h ttlHeap) Len() int { return len(h) }
func (h ttlHeap) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	return h[i].path < h[j].path
}
func (h ttlHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *ttlHeap) Push(x any) {
	e := x.(*ttlEntry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *ttlHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// track adds or moves n's entry (n a TTL node).
func (x *ttlIndex) track(n *Node) {
	if n.TTL == 0 {
		return
	}
	if x.byPath == nil {
		x.byPath = map[string]*ttlEntry{}
	}
	d := n.MTime + n.TTL
	if e := x.byPath[n.Path]; e != nil {
		e.deadline = d
		heap.Fix(&x.heap, e.pos)
		return
	}
	e := &ttlEntry{deadline: d, path: n.Path}
	x.byPath[n.Path] = e
	heap.Push(&x.heap, e)
}

// forget drops path's entry, if any.
func (x *ttlIndex) forget(path string) {
	if e := x.byPath[path]; e != nil {
		heap.Remove(&x.heap, e.pos)
		delete(x.byPath, path)
	}
}

// ttlIndexOf builds the index of nodes.
func ttlIndexOf(nodes map[string]*Node) ttlIndex {
	var x ttlIndex
	for _, n := range nodes {
		if n.TTL != 0 {
			if x.byPath == nil {
				x.byPath = map[string]*ttlEntry{}
			}
			e := &ttlEntry{deadline: n.MTime + n.TTL, path: n.Path, pos: len(x.heap)}
			x.byPath[n.Path] = e
			x.heap = append(x.heap, e)
		}
	}
	heap.Init(&x.heap)
	return x
}

// TTLExpiry names a TTL node whose deadline has passed, as the master
// proposes its deletion (ExpireTTLArgs).
type TTLExpiry struct {
	Path     string
	Instance uint64
	Gen      uint64
	// Deadline is MTime+TTL, Unix ns.
	Deadline int64
}

// DueTTLs returns up to limit TTL nodes whose deadline is at or before now
// (Unix ns), earliest first, and the earliest deadline of the nodes not
// returned (0 when there are none). The cost is O(k log k) for the k
// nodes returned, not a pass over every TTL node: the heap's top is
// walked in deadline order, a frontier of candidates at a time.
func (v View) DueTTLs(now int64, limit int) ([]TTLExpiry, int64) {
	f := v.f
	h := f.ttls.heap
	if len(h) == 0 {
		return nil, 0
	}
	var out []TTLExpiry
	front := &ttlFrontier{h: h, idx: []int{0}}
	for front.Len() > 0 {
		e := h[front.idx[0]]
		if e.deadline > now || len(out) >= limit {
			return out, e.deadline
		}
		i := heap.Pop(front).(int)
		if n := f.nodes[e.path]; n != nil {
			out = append(out, TTLExpiry{Path: n.Path, Instance: n.Instance, Gen: n.ContentGen, Deadline: e.deadline})
		}
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				heap.Push(front, c)
			}
		}
	}
	return out, 0
}

// ttlFrontier is the heap positions DueTTLs may visit next, ordered as
// the heap they index: every entry before them in deadline order has
// been visited, as every ancestor of an entry comes before it.
type ttlFrontier struct {
	h   ttlHeap
	idx []int
}

func (f *ttlFrontier) Len() int           { return len(f.idx) }
func (f *ttlFrontier) Less(i, j int) bool { return f.h.Less(f.idx[i], f.idx[j]) }
func (f *ttlFrontier) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *ttlFrontier) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *ttlFrontier) Pop() any {
	x := f.idx[len(f.idx)-1]
	f.idx = f.idx[:len(f.idx)-1]
	return x
}

// TTLNodes counts the TTL nodes: the entries of the expiry index.
func (v View) TTLNodes() int { return len(v.f.ttls.heap) }
