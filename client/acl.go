package client

import (
	"context"

	"lockcell/wire"
)

// ACL names the three ACL files of a node (docs/spec.md#acls): base names of
// files in /ls/<cell>/acl/, each listing principals one a line. An empty name
// means the default rule: anyone may read, only the node's creator may write
// or change its ACLs (the cell admin may always do everything).
type ACL struct {
	Read      string
	Write     string
	ChangeACL string
}

// ACLDir returns the folder of the cell's ACL files, /ls/<cell>/acl.
func (c *Client) ACLDir() string { return "/ls/" + c.cfg.Cell + "/acl" }

// GetACL returns the node's ACL names (they are part of its Stat).
func (h *Handle) GetACL(ctx context.Context) (ACL, error) {
	st, err := h.GetStat(ctx)
	if err != nil {
		return ACL{}, err
	}
	return ACL{Read: st.ReadACL, Write: st.WriteACL, ChangeACL: st.ChangeACL}, nil
}

// SetACL replaces the node's three ACL names and returns its new Stat
// (ACLGen grows). It needs the change-ACL permission; it takes effect for
// every call the cell admits after it returns, including reads that other
// clients would have served from their caches, which the cell invalidates
// first.
//
// With IfGeneration(gen) it is a compare-and-swap on the node's ACL
// generation (Stat.ACLGen, not its content generation): it changes the
// names only if ACLGen is still gen, and otherwise fails with
// ErrGenerationMismatch, changing nothing. A read-modify-write of one of
// the three names (GetStat, then SetACL with the ACLGen it returned)
// thus never undoes another client's change made in between.
func (h *Handle) SetACL(ctx context.Context, a ACL, opts ...SetOption) (Stat, error) {
	h.markDirty()
	var so setOptions
	for _, o := range opts {
		o(&so)
	}
	var resp wire.StatResponse
	err := h.do(ctx, "setacl", wire.MethodSetACL, &wire.SetACLRequest{Handle: h.id.Load(), Read: a.Read, Write: a.Write, ChangeACL: a.ChangeACL,
		IfGeneration: so.gen, HasIfGeneration: so.hasGen}, &resp)
	if err != nil {
		return Stat{}, err
	}
	return statFrom(resp.Stat), nil
}
