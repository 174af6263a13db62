package master

import "lockcell/fsm"

// Quotas on the namespace (Limits.Nodes, ContentBytes, NodesPerPrincipal,
// ContentBytesPerPrincipal, and the admin's reserves) are not admitted here the way sessions and handles are (limits.go): the
// master puts them into each command that may grow the namespace, and the
// state machine decides when it applies the command, against the counts
// of the state it applies to (replica/quota.go). That makes them exact
// with no reservation to keep: concurrent creates racing for the last
// node are ordered by Raft and only those that fit succeed; a command a
// deposed master proposed carries its quota into the log and is judged
// there against the state its successor sees too; and a retried request
// id gets its first answer from the de-duplication table, never a second
// judgement. A refused command costs one Raft entry and changes nothing.

// setQuota puts the quota into an Open that may create, or a
// SetContents; other commands cannot grow the namespace and carry none,
// so they stay the size they were.
func (w *writes) setQuota(cmd *fsm.Command) {
	switch p := cmd.Payload.(type) {
	case *fsm.OpenArgs:
		if p.Flags&fsm.FlagCreate != 0 {
			p.Quota = w.quota
		}
	case *fsm.SetContentsArgs:
		p.Quota = w.quota
	case *fsm.TxnArgs:
		if len(p.Ops) > 0 {
			p.Quota = w.quota
		}
	}
}

// quotaOf is the quota the master puts into commands: the configured
// limits, the same for every command, so one value is shared by all of
// them (writes.quota) rather than allocated for each. Nothing changes it:
// a command is encoded before anything reads it.
func quotaOf(l Limits) *fsm.Quota {
	return &fsm.Quota{Nodes: int64(l.Nodes), ContentBytes: l.ContentBytes, NodesPerPrincipal: int64(l.NodesPerPrincipal),
		ContentBytesPerPrincipal: l.ContentBytesPerPrincipal,
		NodesAdminReserve:        int64(l.NodesAdminReserve), ContentBytesAdminReserve: l.ContentBytesAdminReserve}
}
