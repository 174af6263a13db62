package master

import (
	"context"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// QuotaUsage (wire.MethodQuotaUsage) tells an operator how near each
// limit a principal and the cell are, so a full cell is seen before the
// refusals, and who fills it. Every figure comes from a counter some part
// already keeps for its limit: the state machine's nodes, contents,
// sessions and handles by principal (replica/quota.go, read.go), the
// invalidator's registrations and the sessions' event budget. So the call
// costs a map lookup a figure, plus, for the admin, one step per principal
// that created nodes to find the biggest ones; never a walk of the
// namespace. The parts are read one after another, each under its own
// lock and never two at once, so the lock order is not in play and the
// figures are each exact as of their own read, not one snapshot.

// quotaUsage answers QuotaUsage for the principal the request names (the
// caller's own when none): a principal other than the caller's is the
// admin's to ask about.
func (e *adminEndpoint) quotaUsage(ctx context.Context, c *call, req *wire.QuotaUsageRequest) (*wire.QuotaUsageResponse, error) {
	who := req.Principal
	if who == "" {
		who = c.caller.Principal
	}
	if len(who) > acl.MaxPrincipalLen {
		return nil, wire.Errorf(wire.CodeBadRequest, "principal name of %d bytes: at most %d", len(who), acl.MaxPrincipalLen)
	}
	if who != c.caller.Principal && !c.isAdmin() {
		return nil, wire.Errorf(wire.CodePermission, "only the cell's admin may see another principal's quota usage (you are %q)", c.caller.Principal)
	}
	if err := e.r.verify(ctx); err != nil {
		return nil, err
	}
	l := e.cfg.Limits
	admin := who == e.cfg.Admin
	var mine, cell fsm.Usage
	var sessions, cellSessions, handles, cellHandles int
	var byNodes, byBytes []fsm.CreatorUsage
	err := e.r.view(func(v fsm.View) error {
		if err := c.liveSession(v); err != nil {
			return err
		}
		mine, cell = v.PrincipalUsage(who), v.Usage()
		sessions, handles, cellHandles = v.PrincipalSessions(who), v.PrincipalHandles(who), v.Handles()
		_, cellSessions, _, _ = v.Counts()
		if c.isAdmin() {
			byNodes, byBytes = v.TopCreators(wire.MaxQuotaTop)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	regs, cellRegs := e.inv.principalRegistrations(who)
	events, cellEvents := e.sess.queuedEventBytes(who)
	nodesReserve, bytesReserve := l.Reserves()
	out := &wire.QuotaUsageResponse{Principal: who, Admin: admin, Limits: []wire.QuotaLimit{
		{Name: wire.QuotaNodesPerPrincipal, Used: mine.Nodes, Max: int64(l.NodesPerPrincipal), Exempt: admin},
		{Name: wire.QuotaContentBytesPerPrincipal, Used: mine.ContentBytes, Max: l.ContentBytesPerPrincipal, Bytes: true, Exempt: admin},
		{Name: wire.QuotaSessionsPerPrincipal, Used: int64(sessions), Max: int64(l.SessionsPerPrincipal)},
		{Name: wire.QuotaHandlesPerPrincipal, Used: int64(handles), Max: int64(l.HandlesPerPrincipal)},
		{Name: wire.QuotaCacheRegistrationsPerPrincipal, Used: int64(regs), Max: int64(l.CacheRegistrationsPerPrincipal)},
		{Name: wire.QuotaEventBytesPerPrincipal, Used: events, Max: l.EventBytesPerPrincipal, Bytes: true},
		{Name: wire.QuotaNodes, Used: cell.Nodes, Max: int64(l.Nodes), Reserve: int64(nodesReserve)},
		{Name: wire.QuotaContentBytes, Used: cell.ContentBytes, Max: l.ContentBytes, Reserve: bytesReserve, Bytes: true},
		{Name: wire.QuotaSessions, Used: int64(cellSessions), Max: int64(l.Sessions)},
		{Name: wire.QuotaHandles, Used: int64(cellHandles), Max: int64(l.Handles)},
		{Name: wire.QuotaCacheRegistrations, Used: int64(cellRegs), Max: int64(l.CacheRegistrations)},
		{Name: wire.QuotaEventBytes, Used: cellEvents, Max: l.EventBytes, Bytes: true},
	}}
	out.TopByNodes, out.TopByContentBytes = principalUsages(byNodes), principalUsages(byBytes)
	return out, nil
}

func principalUsages(us []fsm.CreatorUsage) []wire.PrincipalUsage {
	if len(us) == 0 {
		return nil
	}
	out := make([]wire.PrincipalUsage, len(us))
	for i, u := range us {
		out[i] = wire.PrincipalUsage{Principal: u.Principal, Nodes: u.Nodes, ContentBytes: u.ContentBytes}
	}
	return out
}

// principalRegistrations returns the cacher registrations of principal's sessions
// and of every session: what CacheRegistrationsPerPrincipal and
// CacheRegistrations cap.
func (inv *invalidator) principalRegistrations(principal string) (mine, all int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.byPrincipal[principal], inv.regs
}

// queuedEventBytes returns the bytes of the events queued for principal's
// sessions and for every session, as the event budget counts them: what
// EventBytesPerPrincipal and EventBytes cap.
func (ss *sessions) queuedEventBytes(principal string) (mine, all int64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.budget.by[principal], ss.budget.used
}
