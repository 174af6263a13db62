package wire

// MethodQuotaUsage reports what one principal holds against each
// per-principal limit and what the cell holds against each cell-wide
// limit, with the admin's reserves. A read served by the master from its
// counters (no walk of the namespace), rationed like the other reads. Any
// caller may ask about its own principal; only the admin about another,
// and only the admin is told the cell's biggest principals.
const MethodQuotaUsage Method = 27

func init() { methodNames[MethodQuotaUsage] = "QuotaUsage" }

// MaxQuotaTop is how many principals a QuotaUsage reply names in each of
// its top lists.
const MaxQuotaTop = 5

// The names of the limits a QuotaUsage reply reports, in the order it
// reports them: the per-principal ones, then the cell's. They are the
// names of the lockcelld flags that set them, without "--max-".
const (
	QuotaNodesPerPrincipal              = "nodes_per_principal"
	QuotaContentBytesPerPrincipal       = "content_bytes_per_principal"
	QuotaSessionsPerPrincipal           = "sessions_per_principal"
	QuotaHandlesPerPrincipal            = "handles_per_principal"
	QuotaCacheRegistrationsPerPrincipal = "cache_registrations_per_principal"
	QuotaEventBytesPerPrincipal         = "event_bytes_per_principal"
	QuotaNodes                          = "nodes"
	QuotaContentBytes                   = "content_bytes"
	QuotaSessions                       = "sessions"
	QuotaHandles                        = "handles"
	QuotaCacheRegistrations             = "cache_registrations"
	QuotaEventBytes                     = "event_bytes"
)

// QuotaUsageRequest names the principal to report on: "" is the caller's
// own. A principal other than the caller's is the admin's to ask about
// (CodePermission otherwise).
type QuotaUsageRequest struct {
	Principal string `msgpack:"p,omitempty"`
}

// QuotaLimit is one limit and what it counts now. Reserve is the part of
// Max only the admin may fill (the cell's node and content quotas), so
// every other principal is refused from Max-Reserve on. Exempt says the
// limit does not hold the principal reported on (the admin and its
// per-principal node and content quotas); Bytes that it counts bytes, not
// things. Names are the Quota* constants; a client shows a name it does
// not know as it is.
type QuotaLimit struct {
	Name    string `msgpack:"n"`
	Used    int64  `msgpack:"u,omitempty"`
	Max     int64  `msgpack:"m,omitempty"`
	Reserve int64  `msgpack:"r,omitempty"`
	Bytes   bool   `msgpack:"b,omitempty"`
	Exempt  bool   `msgpack:"x,omitempty"`
}

// PrincipalUsage is what the existing nodes one principal created hold.
type PrincipalUsage struct {
	Principal    string `msgpack:"p"`
	Nodes        int64  `msgpack:"n,omitempty"`
	ContentBytes int64  `msgpack:"b,omitempty"`
}

// QuotaUsageResponse reports on Principal (Admin: it is the cell's
// admin): its limits, then the cell's, in the order of the Quota*
// constants. To the admin only, TopByNodes and TopByContentBytes name the
// MaxQuotaTop principals whose existing nodes are the most numerous and
// hold the most content bytes, most first. Each figure is exact as of its
// own read; they are not one snapshot of the cell.
type QuotaUsageResponse struct {
	Principal         string           `msgpack:"p"`
	Admin             bool             `msgpack:"a,omitempty"`
	Limits            []QuotaLimit     `msgpack:"l,omitempty"`
	TopByNodes        []PrincipalUsage `msgpack:"tn,omitempty"`
	TopByContentBytes []PrincipalUsage `msgpack:"tb,omitempty"`
}
