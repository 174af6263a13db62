package replica

// Quota is what the namespace may hold: nodes (files and directories,
// ephemeral ones included, the root not counted) in the cell, the bytes of
// all files' contents in the cell, and nodes created by one principal that
// still exist. A zero field sets no cap.
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
}

// Usage is what the namespace holds, as the quotas count it.
type Usage struct {
	// Nodes is the number of files and directories below the root.
	Nodes int64
	// ContentBytes is the sum of the contents of every file.
	ContentBytes int64
}

// usage is the FSM's running count of what Quota caps. It is derived from
// the nodes: kept up to date by every create, write and removal, and
// rebuilt from the nodes on restore, so every replica at an index agrees
// and a snapshot needs no extra field.
type usage struct {
	bytes int64
	// byCreator counts existing nodes by the principal that created them.
	// A node with no recorded creator (one made by a command without a
	// principal) counts under "", which no caller is.
	byCreator map[string]int64
}

func newUsage() usage { return usage{byCreator: map[string]int64{}} }

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
	u.bytes += int64(len(n.Contents))
	u.byCreator[n.Creator]++
}

func (u *usage) remove(n *Node) {
	u.bytes -= int64(len(n.Contents))
	if u.byCreator[n.Creator]--; u.byCreator[n.Creator] <= 0 {
		delete(u.byCreator, n.Creator)
	}
}

// nodeCount is the number of nodes the quota counts: all but the root.
func (f *FSM) nodeCount() int64 { return int64(len(f.nodes) - 1) }

// checkQuota decides whether c may add nodes (0 or 1) and grow the cell's
// contents by grow bytes (negative: shrink) under the quota q its payload
// carries; name is what an error names. The
// admin is held to the cell-wide quotas, which protect the cell, but not
// to the per-principal one: the admin builds the tree and repairs it, and
// its nodes still count towards the cell's.
func (f *FSM) checkQuota(c *Command, q *Quota, name string, nodes, grow int64) *Error {
	if q == nil {
		return nil
	}
	if nodes > 0 && q.Nodes > 0 && f.nodeCount()+nodes > q.Nodes {
		return errf(KindQuotaExceeded, "%s: the cell's node quota is reached: it holds %d nodes, the limit is %d",
			name, f.nodeCount(), q.Nodes)
	}
	if nodes > 0 && q.NodesPerPrincipal > 0 && !c.Admin {
		if have := f.usage.byCreator[c.Principal]; have+nodes > q.NodesPerPrincipal {
			return errf(KindQuotaExceeded, "%s: principal %q's node quota is reached: it created %d nodes that exist, the limit is %d",
				name, c.Principal, have, q.NodesPerPrincipal)
		}
	}
	if grow > 0 && q.ContentBytes > 0 && f.usage.bytes+grow > q.ContentBytes {
		return errf(KindQuotaExceeded, "%s: the cell's content quota is reached: it holds %d bytes of contents, %d more would pass the limit of %d",
			name, f.usage.bytes, grow, q.ContentBytes)
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
	return f.usage.byCreator[principal]
}
