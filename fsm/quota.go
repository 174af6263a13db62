package fsm

// Quota is what the namespace may hold: nodes (files and directories,
// ephemeral ones included, the root not counted) in the cell, the bytes of
// all files' contents in the cell, nodes created by one principal that
// still exist, and the bytes of the files one principal created. A zero
// field sets no cap, so an entry written before a field existed applies
// as it always did.
//
// The last part of each cell-wide quota is kept for the admin
// (NodesAdminReserve, ContentBytesAdminReserve): every other principal is
// refused once the cell holds the quota less the reserve, so the admin can
// still write ACL files and repair the tree when the others have filled
// the cell. The admin is exempt from the per-principal quotas.
//
// The master puts its quota into every command that could grow the
// namespace (an Open that may create, a SetContents), and apply decides
// against the counts of the state it applies to. The outcome so depends
// on the log alone: commands racing for the last unit of a quota are
// ordered by Raft and exactly the ones that fit succeed, whichever master
// proposed them and however many masters came and went, and a retried
// request id gets its first answer from the de-duplication table. A
// refused command changes nothing: no node is made, the old contents stay.
type Quota struct {
	Nodes             int64 `msgpack:"n,omitempty"`
	ContentBytes      int64 `msgpack:"b,omitempty"`
	NodesPerPrincipal int64 `msgpack:"pn,omitempty"`
	// ContentBytesPerPrincipal caps the contents of the files one
	// principal created, whoever writes them (quotaOwner).
	ContentBytesPerPrincipal int64 `msgpack:"pb,omitempty"`
	// NodesAdminReserve and ContentBytesAdminReserve are the parts of
	// Nodes and ContentBytes only the admin may fill.
	NodesAdminReserve        int64 `msgpack:"rn,omitempty"`
	ContentBytesAdminReserve int64 `msgpack:"rb,omitempty"`
}

// Usage is what the namespace holds, as the quotas count it.
type Usage struct {
	// Nodes is the number of files and directories below the root.
	Nodes int64
	// ContentBytes is the sum of the contents of every file.
	ContentBytes int64
}

// owned is what the existing nodes one principal created hold.
type owned struct {
	nodes int64
	bytes int64 // their contents
}

// usage is the FSM's running count of what Quota caps. It is derived from
// the nodes: kept up to date by every create, write and removal, and
// rebuilt from the nodes on restore, so every replica at an index agrees
// and a snapshot needs no extra field.
type usage struct {
	bytes int64
	// byCreator counts existing nodes and their contents by the principal
	// that created them (Node.Creator), the owner of the bytes whoever
	// wrote them. A node with no recorded creator (one made by a command
	// without a principal) counts under "", which no caller is.
	byCreator map[string]owned
}

func newUsage() usage { return usage{byCreator: map[string]owned{}} }

// usageOf counts nodes; root is left out (it always exists).
func usageOf(nodes map[string]*Node, root string) usage {
	u := newUsage()
	for p, n := range nodes {
		if p != root {
			u.add(n)
		}
	}
	return u
}

func (u *usage) add(n *Node) {
	size := int64(len(n.Contents))
	u.bytes += size
	o := u.byCreator[n.Creator]
	o.nodes++
	o.bytes += size
	u.byCreator[n.Creator] = o
}

func (u *usage) remove(n *Node) {
	size := int64(len(n.Contents))
	u.bytes -= size
	o := u.byCreator[n.Creator]
	o.nodes--
	o.bytes -= size
	if o.nodes <= 0 {
		delete(u.byCreator, n.Creator)
	} else {
		u.byCreator[n.Creator] = o
	}
}

// resize counts n's contents changing from old bytes to its present ones.
func (u *usage) resize(n *Node, old int64) {
	grow := int64(len(n.Contents)) - old
	u.bytes += grow
	o := u.byCreator[n.Creator]
	o.bytes += grow
	u.byCreator[n.Creator] = o
}

// nodeCount is the number of nodes the quota counts: all but the root.
func (f *FSM) nodeCount() int64 { return int64(len(f.nodes) - 1) }

// QuotaReason names the quota a command met.
type QuotaReason int

// The quotas apply refuses by; QuotaReasons counts each.
const (
	QuotaNodes QuotaReason = iota
	QuotaNodesPerPrincipal
	QuotaContentBytes
	QuotaContentBytesPerPrincipal
	quotaReasons
)

func (r QuotaReason) String() string {
	return [...]string{"nodes", "nodes_per_principal", "content_bytes", "content_bytes_per_principal"}[r]
}

// refuse counts a refusal by reason r and returns its error.
func (f *FSM) refuse(r QuotaReason, format string, args ...any) *Error {
	f.refusals[r].Add(1)
	return errf(KindQuotaExceeded, format, args...)
}

// cellLimit is the part of a cell-wide quota limit the command's caller
// may fill: all of it for the admin, the limit less the admin's reserve
// for everyone else. reserved says whether a reserve was taken off.
func cellLimit(c *Command, limit, reserve int64) (int64, bool) {
	if c.Admin || reserve <= 0 {
		return limit, false
	}
	return limit - reserve, true
}

// checkQuota decides whether c may add nodes (0 or 1) and grow the cell's
// contents by grow bytes (negative: shrink) under the quota q its payload
// carries; owner is the principal the grown file is charged to (its
// creator) and name is what an error names.
//
// The admin is held to the whole of the cell-wide quotas, which protect
// every replica's memory and snapshot, and everyone else to them less the
// admin's reserve; the admin is exempt from the per-principal quotas: it
// builds the tree and repairs it, and its nodes and bytes still count
// towards the cell's. Contents are charged to the file's creator, not to
// the writer: the counts then follow from the nodes alone, and a
// principal that may write another's file can grow it only within that
// owner's share (and the cell's), as it could empty it anyway. Messages
// of the quotas older entries can meet are kept word for word: results
// are replicated state.
func (f *FSM) checkQuota(c *Command, q *Quota, name, owner string, nodes, grow int64) *Error {
	if q == nil {
		return nil
	}
	if nodes > 0 && q.Nodes > 0 {
		limit, reserved := cellLimit(c, q.Nodes, q.NodesAdminReserve)
		if have := f.nodeCount(); have+nodes > limit {
			if reserved {
				return f.refuse(QuotaNodes, "%s: the cell's node quota is reached: it holds %d nodes, the limit is %d of which the last %d are kept for the admin",
					name, have, q.Nodes, q.NodesAdminReserve)
			}
			return f.refuse(QuotaNodes, "%s: the cell's node quota is reached: it holds %d nodes, the limit is %d",
				name, have, q.Nodes)
		}
	}
	if nodes > 0 && q.NodesPerPrincipal > 0 && !c.Admin {
		if have := f.usage.byCreator[c.Principal].nodes; have+nodes > q.NodesPerPrincipal {
			return f.refuse(QuotaNodesPerPrincipal, "%s: principal %q's node quota is reached: it created %d nodes that exist, the limit is %d",
				name, c.Principal, have, q.NodesPerPrincipal)
		}
	}
	if grow > 0 && q.ContentBytes > 0 {
		limit, reserved := cellLimit(c, q.ContentBytes, q.ContentBytesAdminReserve)
		if have := f.usage.bytes; have+grow > limit {
			if reserved {
				return f.refuse(QuotaContentBytes, "%s: the cell's content quota is reached: it holds %d bytes of contents, %d more would pass the limit of %d less the %d kept for the admin",
					name, have, grow, q.ContentBytes, q.ContentBytesAdminReserve)
			}
			return f.refuse(QuotaContentBytes, "%s: the cell's content quota is reached: it holds %d bytes of contents, %d more would pass the limit of %d",
				name, have, grow, q.ContentBytes)
		}
	}
	if grow > 0 && q.ContentBytesPerPrincipal > 0 && !c.Admin {
		if have := f.usage.byCreator[owner].bytes; have+grow > q.ContentBytesPerPrincipal {
			return f.refuse(QuotaContentBytesPerPrincipal, "%s: principal %q's content quota is reached: the files it created hold %d bytes, %d more would pass the limit of %d per principal",
				name, owner, have, grow, q.ContentBytesPerPrincipal)
		}
	}
	return nil
}

// Usage returns what the namespace holds, as the quotas count it.
func (f *FSM) Usage() Usage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Usage{Nodes: f.nodeCount(), ContentBytes: f.usage.bytes}
}

// PrincipalNodes returns how many existing nodes principal created.
func (f *FSM) PrincipalNodes(principal string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.usage.byCreator[principal].nodes
}

// PrincipalContentBytes returns the bytes of contents of the existing
// files principal created: what the per-principal content quota counts.
func (f *FSM) PrincipalContentBytes(principal string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.usage.byCreator[principal].bytes
}

// QuotaStats is what the quotas count, for metrics.
type QuotaStats struct {
	Usage
	// MaxPrincipalNodes and MaxPrincipalContentBytes are the largest
	// counts of one principal, the excluded one (the admin, which no
	// per-principal quota holds) and nodes with no creator left out.
	MaxPrincipalNodes, MaxPrincipalContentBytes int64
	// Refusals counts the commands this state machine refused, by the
	// quota they met, since it started (entries replayed at a start
	// included): every replica applies every command, so all count alike.
	Refusals [quotaReasons]uint64
}

// QuotaStats returns the counts, the largest principal's leaving out
// exclude. It walks the principals that created nodes, under the read
// lock: for scrapes, not for the request path.
func (f *FSM) QuotaStats(exclude string) QuotaStats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := QuotaStats{Usage: Usage{Nodes: f.nodeCount(), ContentBytes: f.usage.bytes}}
	for p, o := range f.usage.byCreator {
		if p != "" && p != exclude {
			st.MaxPrincipalNodes = max(st.MaxPrincipalNodes, o.nodes)
			st.MaxPrincipalContentBytes = max(st.MaxPrincipalContentBytes, o.bytes)
		}
	}
	for r := range st.Refusals {
		st.Refusals[r] = f.refusals[r].Load()
	}
	return st
}

// Usage returns what the namespace holds, as the quotas count it.
func (v View) Usage() Usage {
	return Usage{Nodes: v.f.nodeCount(), ContentBytes: v.f.usage.bytes}
}

// PrincipalUsage returns what the existing nodes principal created hold:
// what its per-principal node and content quotas count.
func (v View) PrincipalUsage(principal string) Usage {
	o := v.f.usage.byCreator[principal]
	return Usage{Nodes: o.nodes, ContentBytes: o.bytes}
}

// CreatorUsage is what the existing nodes one principal created hold.
type CreatorUsage struct {
	Principal string
	Usage
}

// TopCreators returns the k principals whose existing nodes are the most
// numerous, and the k whose files hold the most content bytes, most
// first (ties by name); nodes with no recorded creator are left out. It
// walks the principals that created nodes, one step each, not the nodes:
// for the admin's occasional look, not for every request.
func (v View) TopCreators(k int) (byNodes, byBytes []CreatorUsage) {
	if k <= 0 {
		return nil, nil
	}
	nodesFirst := func(a, b CreatorUsage) bool {
		return a.Nodes > b.Nodes || a.Nodes == b.Nodes && a.Principal < b.Principal
	}
	bytesFirst := func(a, b CreatorUsage) bool {
		return a.ContentBytes > b.ContentBytes || a.ContentBytes == b.ContentBytes && a.Principal < b.Principal
	}
	for p, o := range v.f.usage.byCreator {
		if p == "" {
			continue
		}
		cu := CreatorUsage{Principal: p, Usage: Usage{Nodes: o.nodes, ContentBytes: o.bytes}}
		byNodes = keepTop(byNodes, cu, k, nodesFirst)
		byBytes = keepTop(byBytes, cu, k, bytesFirst)
	}
	return byNodes, byBytes
}

// keepTop inserts x into top, ordered by first and at most k long, and
// returns it: k steps at most, so choosing k of n costs n·k, not a sort.
func keepTop(top []CreatorUsage, x CreatorUsage, k int, first func(a, b CreatorUsage) bool) []CreatorUsage {
	if len(top) == k && !first(x, top[k-1]) {
		return top
	}
	if len(top) < k {
		top = append(top, x)
	} else {
		top[k-1] = x
	}
	for i := len(top) - 1; i > 0 && first(top[i], top[i-1]); i-- {
		top[i], top[i-1] = top[i-1], top[i]
	}
	return top
}
