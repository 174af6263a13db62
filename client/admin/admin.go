// Package admin holds the calls operators, the lockcell CLI and
// monitoring make to a cell, apart from the library applications link to
// (package client): the cell's status and health, its audit trail,
// backups, membership and leadership, quotas, and the listings and
// lock-breaking that look at every session.
//
// Calls that go through a session are methods of Admin, made through a
// Client's session and with its retries, routing and fail-over (New).
// Calls that need no session (QueryStatus, QueryStatusWith,
// QueryStatusDetail, StateHash, ReadAudit) ask one replica directly, over
// a connection made as a client.Config says; VerifyBackup and JudgeHealth
// make no call. Errors match the typed errors of package client under
// errors.Is.
package admin

import (
	"lockcell/cache"
	"lockcell/client"
	"lockcell/client/internal/link"
)

// Admin makes the admin and diagnostic calls through a Client's session.
// It holds nothing but the Client: make one wherever it is needed, and it
// is as safe for concurrent use as the Client. Most of its calls are the
// cell's admin's alone (client.ErrPermission for any other principal); each says
// which.
type Admin struct{ c *client.Client }

// New returns the Admin of c, whose calls go through c's session.
func New(c *client.Client) *Admin { return &Admin{c: c} }

func opErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &client.OpError{Op: op, Path: path, Err: err}
}

// CacheStats counts the client cache's work: reads served from it (Hits)
// and not (Misses); apart from them, opens answered by a remembered
// absence (NegativeHits) and not (NegativeMisses); invalidations applied,
// entries evicted to stay within the size bound, and the entries and
// bytes held now.
type CacheStats struct {
	Hits           uint64
	Misses         uint64
	NegativeHits   uint64
	NegativeMisses uint64
	Invalidations  uint64
	Evictions      uint64
	Entries        int64
	Bytes          int64
}

// CacheStats reports the Client's cache counters (all zero with
// client.Config.DisableCache). client.Client.Collector exports the same figures to
// Prometheus.
func (a *Admin) CacheStats() CacheStats {
	st := link.CacheStats(a.c)
	return cacheStatsOf(st)
}

func cacheStatsOf(st cache.Stats) CacheStats {
	return CacheStats{Hits: st.Hits, Misses: st.Misses, NegativeHits: st.NegativeHits, NegativeMisses: st.NegativeMisses,
		Invalidations: st.Invalidations, Evictions: st.Evictions, Entries: st.Entries, Bytes: st.Bytes}
}

// Master returns the address of the replica the Client believes is
// master.
func (a *Admin) Master() string { return link.Master(a.c) }

// ReplicaAddrs returns the client addresses of the replicas the Client
// tries when it looks for a master: client.Config.Replicas until it has
// heard the cell's membership from the master (right after Dial), the
// live members' addresses from then on, followed by any seed that never
// named a member (such as a load balancer's address). A client none of
// whose Config.Replicas is a member's own client address (it reaches the
// cell through proxies, NAT or a load balancer) keeps to its
// Config.Replicas.
func (a *Admin) ReplicaAddrs() []string { return link.ReplicaAddrs(a.c) }
