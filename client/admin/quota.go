package admin

import (
	"context"

	"lockcell/client/internal/link"
	"lockcell/wire"
)

// QuotaLimit is one limit of the cell and what it counts now, as
// QuotaUsage reports it. Name is the limit's name (the lockcelld flag
// that sets it without "--max-": "nodes_per_principal", "content_bytes",
// ...). Reserve is the part of Max only the admin may fill (the cell's
// node and content quotas): every other principal is refused from
// Max-Reserve on. Exempt: the limit does not hold the principal reported
// on (the admin is exempt from the per-principal node and content
// quotas). Bytes: Used and Max count bytes. Percent is Used against Max
// (0 to 100, more if a lowered limit left more stored). Full says the
// principal reported on can add nothing more under this limit: Used has
// reached Max, or Max-Reserve for any principal but the admin; never for
// an exempt limit.
type QuotaLimit struct {
	Name    string  `json:"limit"`
	Used    int64   `json:"used"`
	Max     int64   `json:"max"`
	Reserve int64   `json:"admin_reserve"`
	Bytes   bool    `json:"bytes"`
	Exempt  bool    `json:"exempt"`
	Percent float64 `json:"percent"`
	Full    bool    `json:"full"`
}

// CreatorUsage is what the existing nodes one principal created hold: the
// counts its per-principal node and content quotas are held to.
type CreatorUsage struct {
	Principal    string `json:"principal"`
	Nodes        int64  `json:"nodes"`
	ContentBytes int64  `json:"content_bytes"`
}

// QuotaReport is what QuotaUsage reports: on Principal (Admin: it is the
// cell's admin), its per-principal limits and then the cell's, in that
// order (names ending in "_per_principal" first). TopByNodes and
// TopByContentBytes name the cell's biggest principals, most first (at
// most 5 each); they are empty unless the caller is the
// admin. Each figure is exact as of its own read at the master; together
// they are not one snapshot.
type QuotaReport struct {
	Principal         string         `json:"principal"`
	Admin             bool           `json:"admin"`
	Limits            []QuotaLimit   `json:"limits"`
	TopByNodes        []CreatorUsage `json:"top_by_nodes"`
	TopByContentBytes []CreatorUsage `json:"top_by_content_bytes"`
}

// Limit returns the limit named name, and whether the report has it.
func (r *QuotaReport) Limit(name string) (QuotaLimit, bool) {
	for _, l := range r.Limits {
		if l.Name == name {
			return l, true
		}
	}
	return QuotaLimit{}, false
}

// QuotaUsage asks the master how much principal holds against each
// per-principal limit, and the cell against each cell-wide one with the
// admin's reserves: nodes and content bytes, sessions, open handles,
// cache registrations and queued event bytes. An empty principal is the
// caller's own; only the cell's admin may name another (client.ErrPermission
// otherwise), and only the admin is told the biggest principals. The
// master reads its counters, never the namespace, and rations the call as
// a read.
func (a *Admin) QuotaUsage(ctx context.Context, principal string) (*QuotaReport, error) {
	var resp wire.QuotaUsageResponse
	if err := link.Call(a.c, ctx, wire.MethodQuotaUsage, false, &wire.QuotaUsageRequest{Principal: principal}, &resp); err != nil {
		return nil, opErr("quota usage", principal, err)
	}
	r := &QuotaReport{Principal: resp.Principal, Admin: resp.Admin, Limits: make([]QuotaLimit, 0, len(resp.Limits)),
		TopByNodes: creatorUsages(resp.TopByNodes), TopByContentBytes: creatorUsages(resp.TopByContentBytes)}
	for _, l := range resp.Limits {
		q := QuotaLimit{Name: l.Name, Used: l.Used, Max: l.Max, Reserve: l.Reserve, Bytes: l.Bytes, Exempt: l.Exempt}
		if l.Max > 0 {
			q.Percent = 100 * float64(l.Used) / float64(l.Max)
		}
		room := l.Max
		if !resp.Admin {
			room -= l.Reserve
		}
		q.Full = !l.Exempt && l.Max > 0 && l.Used >= room
		r.Limits = append(r.Limits, q)
	}
	return r, nil
}

func creatorUsages(us []wire.PrincipalUsage) []CreatorUsage {
	out := make([]CreatorUsage, 0, len(us))
	for _, u := range us {
		out = append(out, CreatorUsage{Principal: u.Principal, Nodes: u.Nodes, ContentBytes: u.ContentBytes})
	}
	return out
}
