// Package cell composes a lockcell replica process: the replica (Raft and
// the state machine), the master that serves on the leader, and the client
// port speaking the wire protocol over TCP and yamux. It also starts a
// whole five-replica development cell in one process.
package cell

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/cell/certs"
	"lockcell/cell/clientport"
	"lockcell/master"
	"lockcell/replica"
	"lockcell/wire"
)

// Peer is one member of the cell.
type Peer struct {
	// ID is the member's Raft server id.
	ID string
	// ClientAddr is where clients reach the member (host:port).
	ClientAddr string
	// RaftAddr is where the other members reach its Raft transport.
	RaftAddr string
}

// Config configures one replica process.
type Config struct {
	// Cell is the cell name; the namespace is /ls/<Cell>.
	Cell string
	// Self is this replica's id; it must be one of Peers.
	Self string
	// Peers lists every member, this one included, identically on all.
	// They are the cell's bootstrap configuration; members added later
	// are learnt from the cell (the replicated member table). A joining
	// replica (Join) may list only itself.
	Peers []Peer
	// Join makes a replica with an empty data folder wait to be added to
	// an existing cell by its master (a membership change) instead of
	// bootstrapping a cell from Peers (replica.Config.Join).
	Join bool
	// LogStore is where the replica keeps its Raft log
	// (replica.Config.LogStore): "auto" (also "": where the folder has
	// it, badger for a new folder), "badger" or "wal".
	LogStore string
	// Dir is this replica's data folder.
	Dir string
	// LeaseTTL is the session lease (default 12 s).
	LeaseTTL time.Duration
	// MaxLeaseTTL and KeepAliveTarget are lease lengthening under load
	// (master.Config): every replica of a cell must have the same ones.
	MaxLeaseTTL     time.Duration
	KeepAliveTarget int
	// DefaultLockDelay is the lock-delay of handles that ask for none
	// (default and maximum 1 min).
	DefaultLockDelay time.Duration
	// Timings are the Raft timings (zero values take defaults).
	Timings replica.Timings
	// Logger receives structured logs.
	Logger *slog.Logger
	// AuditLogger, when set, receives the master's audit lines (every
	// permission denial and ACL change, at Info) instead of Logger, so
	// that they are kept whatever level Logger keeps (master.Config.Audit).
	AuditLogger *slog.Logger
	// AuditRetainBytes bounds the replica's audit trail on disk (the
	// records of every mutation, in DATA/audit): past it the oldest
	// segments are deleted. 0: audit.DefaultRetainBytes.
	AuditRetainBytes int64
	// MetricsAddr, when set, is the replica's HTTP port for operators:
	// Prometheus metrics at /metrics, /healthz, /readyz and a status page
	// at / (with /status.json). With TLS it speaks TLS with the client
	// port's certificate and takes a user certificate, if given, as the
	// caller's identity; names are shown only as HTTPNames says. On a
	// plain cell it must be loopback, like the other ports.
	MetricsAddr string
	// Pprof also serves Go's profiler at /debug/pprof/ on MetricsAddr
	// (off by default: a profile costs CPU and shows the program's
	// internals), to the admin only.
	Pprof bool
	// HTTP bounds the HTTP port's connections and their times (zero
	// fields: DefaultHTTPLimits).
	HTTP HTTPLimits
	// HTTPNames says who sees lock names, principals and client names on
	// the HTTP port (default HTTPNamesAuthenticated).
	HTTPNames HTTPNames

	// TLS, when set, secures the client port with mutual TLS: the
	// replica's server configuration, which must require and verify
	// client certificates (certs.ServerConfig). A caller's principal is
	// its certificate's Common Name (certs.PrincipalOf). Without it every
	// caller is master.AnonymousPrincipal, and the cell says so loudly.
	TLS *tls.Config
	// PeerTLS secures the Raft port: only replica certificates of the
	// cell's CA may speak there, on either end (certs.PeerConfig). It is
	// required with TLS, so that a secured client port never sits next
	// to an open Raft port.
	PeerTLS *tls.Config
	// Insecure must be set to run without TLS, a plain cell: every
	// caller of the client port is master.AnonymousPrincipal, the admin,
	// and anyone who reaches the Raft port is taken for a replica (it can
	// depose the master and rewrite the log). Validate refuses a Config
	// without TLS unless Insecure is set, and one with both.
	Insecure bool
	// InsecureAnyAddress lets an Insecure cell listen on addresses other
	// than loopback (127.0.0.0/8, ::1, localhost). Without it, Validate
	// refuses an Insecure cell whose client or Raft address is not
	// loopback, so that a plain cell is reachable from this machine only.
	InsecureAnyAddress bool
	// Admin is the cell admin principal (master.Config.Admin): allowed
	// everything, so broken ACLs can be repaired. Default "admin"
	// (certs.AdminUser) with TLS, master.AnonymousPrincipal without.
	Admin string
	// ProxyPrincipals are the principals trusted as proxies
	// (master.Config.ProxyPrincipals, `lockcelld serve
	// --proxy-principals`): only they may call on behalf of another
	// principal. Every replica of a cell should name the same.
	ProxyPrincipals []string
	// Limits of the client port; zero fields take DefaultConnLimits.
	Limits ConnLimits
	// SessionLimits are the master's caps on sessions and handles
	// (zero values: master.DefaultLimits).
	SessionLimits master.Limits
	// StateHashInterval is the least time between two state hashes this
	// replica computes for CellStatus callers (default
	// DefaultStateHashInterval).
	StateHashInterval time.Duration
	// HistoryChanges and HistoryBytes bound the change history that
	// subtree watches read and resume from (fsm.FSM.SetHistoryLimits):
	// the recent changes to nodes every replica keeps in memory. Zero:
	// fsm.DefaultHistoryChanges, fsm.DefaultHistoryBytes.
	HistoryChanges int
	HistoryBytes   int64

	// Transport, when set, replaces the replica's TCP (or, with PeerTLS,
	// TLS) Raft transport; it is for fault-injection tests, which wrap a
	// transport to drop or delay Raft RPCs (replica.Config.Transport).
	// Its LocalAddr must be this replica's RaftAddr, and it cannot be
	// combined with PeerTLS, which only the built-in transport applies.
	// The server owns it: Close closes it, and so does a New that fails
	// (possibly after the replica already did, so its Close must bear a
	// second call, as raft's transports do).
	Transport raft.Transport
}

// SessionLimits are the master's caps on sessions, handles and reads
// (master.Limits), named here so that binaries need not import master.
type SessionLimits = master.Limits

// DefaultSessionLimits are the master's limits when none are set.
var DefaultSessionLimits = master.DefaultLimits

// ConnLimits bound what one client host or connection may hold on the
// client port (clientport.Limits, named here so that binaries need not
// import the port).
type ConnLimits = clientport.Limits

// DefaultConnLimits are the client port's limits when none are set.
var DefaultConnLimits = clientport.DefaultLimits

// ConnStats counts what the client port refused since the server started,
// and what it holds now (clientport.Stats).
type ConnStats = clientport.Stats

// ClientFDShare returns the most connections the client ports of this
// process may hold together and the file-descriptor limit it is a share
// of (clientport.FDShare).
func ClientFDShare() (share int, limit uint64) { return clientport.FDShare() }

// Validate reports the first problem with the configuration.
func (c *Config) Validate() error {
	if err := wire.ValidCellName(c.Cell); err != nil {
		return err
	}
	if len(c.Peers) == 0 {
		return fmt.Errorf("cell: no peers configured")
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.ID == "" || p.ClientAddr == "" || p.RaftAddr == "" {
			return fmt.Errorf("cell: peer %+v needs an id, a client address and a raft address", p)
		}
		if ids[p.ID] {
			return fmt.Errorf("cell: peer id %q appears twice", p.ID)
		}
		for _, a := range []string{p.ClientAddr, p.RaftAddr} {
			if addrs[a] {
				return fmt.Errorf("cell: address %s appears twice", a)
			}
			addrs[a] = true
		}
		ids[p.ID] = true
		self = self || p.ID == c.Self
	}
	if !self {
		return fmt.Errorf("cell: this replica's id %q is not among the peers", c.Self)
	}
	if c.Dir == "" {
		return fmt.Errorf("cell: no data folder")
	}
	if c.HistoryChanges < 0 || c.HistoryBytes < 0 {
		return fmt.Errorf("cell: the change history's bounds are negative (%d changes, %d bytes)", c.HistoryChanges, c.HistoryBytes)
	}
	if c.MaxLeaseTTL < 0 {
		return fmt.Errorf("cell: the longest lease under load is negative (%v)", c.MaxLeaseTTL)
	}
	if c.MaxLeaseTTL > master.MaxLeaseBound {
		return fmt.Errorf("cell: the longest lease under load is %v, more than %v", c.MaxLeaseTTL, master.MaxLeaseBound)
	}
	if lease := cmp.Or(c.LeaseTTL, master.DefaultLeaseTTL); c.MaxLeaseTTL != 0 && c.MaxLeaseTTL < lease {
		return fmt.Errorf("cell: the longest lease under load (%v) is shorter than the lease (%v)", c.MaxLeaseTTL, lease)
	}
	if c.Pprof && c.MetricsAddr == "" {
		return fmt.Errorf("cell: Pprof serves on the HTTP port, and no MetricsAddr is set")
	}
	if err := c.validateHTTP(); err != nil {
		return err
	}
	if share, limit := ClientFDShare(); share > 0 && c.Limits.MaxConns > share {
		return fmt.Errorf("%w: the client port's MaxConns (--max-conns) is %d, and the file-descriptor limit %d leaves the client ports %d "+
			"(five eighths); raise the limit (LimitNOFILE=, ulimit -n) or lower the cap", ErrFDReserve, c.Limits.MaxConns, limit, share)
	}
	if c.Transport != nil {
		if c.PeerTLS != nil {
			return fmt.Errorf("cell: PeerTLS secures only the built-in Raft transport, and Transport replaces it")
		}
		if got, want := string(c.Transport.LocalAddr()), c.self().RaftAddr; got != want {
			return fmt.Errorf("cell: the Raft transport's local address %q is not this replica's Raft address %q", got, want)
		}
	}
	if c.TLS == nil && !c.Insecure {
		return fmt.Errorf("cell: no TLS: a plain cell lets anyone in as the admin, so it must be asked for (Insecure)")
	}
	if c.TLS != nil && c.Insecure {
		return fmt.Errorf("cell: Insecure and TLS contradict each other")
	}
	if c.Insecure && !c.InsecureAnyAddress {
		self := c.self()
		for _, a := range []string{self.ClientAddr, self.RaftAddr} {
			if !IsLoopbackAddr(a) {
				return fmt.Errorf("cell: a plain (Insecure) cell listens on loopback only, and %s is not (InsecureAnyAddress lifts this)", a)
			}
		}
	}
	// The admin's quota reserves must leave the other principals room.
	if err := c.SessionLimits.Check(); err != nil {
		return fmt.Errorf("cell: %w", err)
	}
	if c.TLS != nil {
		if c.PeerTLS == nil {
			return fmt.Errorf("cell: TLS on the client port needs PeerTLS too: an open Raft port would let anyone in")
		}
		if c.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
			return fmt.Errorf("cell: the client port's TLS must require and verify client certificates (identity is the certificate)")
		}
	}
	return nil
}

// AnonymousPrincipal is every caller's principal on a plain (Insecure)
// cell, where it is also the admin unless Config.Admin says otherwise.
const AnonymousPrincipal = master.AnonymousPrincipal

// IsLoopbackAddr reports whether the listen address host:port can only be
// reached from this machine: its host is a loopback IP (127.0.0.0/8,
// ::1) or "localhost". An empty host (all interfaces) is not loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// admin is the admin principal the master gets.
func (c *Config) admin() string {
	switch {
	case c.Admin != "":
		return c.Admin
	case c.TLS != nil:
		return certs.AdminUser
	}
	return master.AnonymousPrincipal
}

func (c *Config) self() Peer {
	for _, p := range c.Peers {
		if p.ID == c.Self {
			return p
		}
	}
	return Peer{}
}

// ParsePeers reads the --peers syntax: comma-separated
// "id=clientaddr/raftaddr" items, e.g. "1=127.0.0.1:7001/127.0.0.1:7101".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, addrs, ok := strings.Cut(item, "=")
		client, raft, ok2 := strings.Cut(addrs, "/")
		if !ok || !ok2 || id == "" || client == "" || raft == "" {
			return nil, fmt.Errorf("cell: peer %q is not id=clientaddr/raftaddr", item)
		}
		out = append(out, Peer{ID: id, ClientAddr: client, RaftAddr: raft})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cell: no peers in %q", s)
	}
	return out, nil
}

// FormatPeers is the inverse of ParsePeers.
func FormatPeers(ps []Peer) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.ID + "=" + p.ClientAddr + "/" + p.RaftAddr)
	}
	return b.String()
}

// LoopbackPeers returns n peers on 127.0.0.1 with ids 1..n, client ports
// from clientBase and Raft ports from raftBase.
func LoopbackPeers(n, clientBase, raftBase int) []Peer {
	ps := make([]Peer, n)
	for i := range ps {
		ps[i] = Peer{ID: strconv.Itoa(i + 1),
			ClientAddr: "127.0.0.1:" + strconv.Itoa(clientBase+i),
			RaftAddr:   "127.0.0.1:" + strconv.Itoa(raftBase+i)}
	}
	return ps
}

// DefaultKeepAliveTarget is master.DefaultKeepAliveTarget, for flags.
const DefaultKeepAliveTarget = master.DefaultKeepAliveTarget
