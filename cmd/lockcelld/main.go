// Command lockcelld runs lockcell replicas: "dev" starts a whole
// five-replica cell in one process on loopback; "serve" runs one replica of
// a real cell; "certs" writes a development CA and certificates for mutual
// TLS.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/audit"
	"lockcell/buildinfo"
	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/fsm"
	"lockcell/replica"
)

func main() {
	// A daemon must outlive the reader of its output: with SIGPIPE at its
	// default, a log line written after a log shipper (or `| grep -q` in a
	// script) closed the pipe would kill the replica. Ignored, such a write
	// fails with EPIPE and the replica serves on.
	signal.Ignore(syscall.SIGPIPE)
	app := &cli.App{
		Name:    "lockcelld",
		Usage:   "lockcell replica daemon",
		Version: buildinfo.Version(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "debug, info, warn or error", EnvVars: []string{"LOCKCELL_LOG_LEVEL"}},
			&cli.BoolFlag{Name: "log-json", Usage: "structured JSON logs"},
			&cli.StringFlag{Name: "audit-log", Value: "stderr", EnvVars: []string{"LOCKCELL_AUDIT_LOG"},
				Usage: "where this replica's audit lines (permission denials, ACL changes it served as master) go, whatever --log-level says: stderr, stdout, a file (appended; SIGHUP reopens it, for rotation) or off"},
		},
		Commands: []*cli.Command{devCommand(), serveCommand(), certsCommand(), restoreCommand(), mirrorCommand(), proxyCommand()},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lockcelld:", err)
		os.Exit(1)
	}
}

func logger(c *cli.Context) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		level = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Bool("log-json") {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// auditFiles are the --audit-log files this process opened: SIGHUP
// reopens them (reopenAuditLogs), for log rotation.
var auditFiles struct {
	sync.Mutex
	open []*cell.AuditFile
}

// auditLogger opens the --audit-log stream; it stays open for the life of
// the process, and SIGHUP reopens its file.
func auditLogger(c *cli.Context) (*slog.Logger, error) {
	l, f, err := cell.OpenAuditLog(c.String("audit-log"), c.Bool("log-json"))
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	auditFiles.Lock()
	auditFiles.open = append(auditFiles.open, f)
	auditFiles.Unlock()
	return l, nil
}

// auditRetain is --audit-retain.
func auditRetain(c *cli.Context) int64 {
	if b, ok := c.Generic("audit-retain").(*byteSize); ok {
		return int64(*b)
	}
	return 0
}

// historyLimits are --history-changes and --history-bytes.
func historyLimits(c *cli.Context) (int, int64) {
	var b int64
	if v, ok := c.Generic("history-bytes").(*byteSize); ok {
		b = int64(*v)
	}
	return c.Int("history-changes"), b
}

// reopenAuditLogs reopens the --audit-log file (SIGHUP), saying so.
func reopenAuditLogs(log *slog.Logger) {
	auditFiles.Lock()
	defer auditFiles.Unlock()
	for _, f := range auditFiles.open {
		if err := f.Reopen(); err != nil {
			log.Error("SIGHUP: the audit log could not be reopened; lines go on to the old file", "err", err)
		} else if f.Path() != "" {
			log.Info("SIGHUP: audit log reopened", "path", f.Path())
		}
	}
}

func timingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "lease", Value: 12 * time.Second, Usage: "session lease"},
		&cli.DurationFlag{Name: "max-lease", Usage: "longest session lease under load: leases lengthen to keep KeepAlives under --keepalive-target a second (0: never; same on every replica; at most 5m)"},
		&cli.IntFlag{Name: "keepalive-target", Value: cell.DefaultKeepAliveTarget, Usage: "KeepAlives a second above which leases lengthen, up to --max-lease"},
		&cli.DurationFlag{Name: "lock-delay", Value: time.Minute, Usage: "default lock-delay (at most 1m)"},
	}
}

// raftFlags are the replica's Raft timings (replica.Timings); the defaults
// are replica.DefaultTimings().
func raftFlags() []cli.Flag {
	d := replica.DefaultTimings()
	return []cli.Flag{
		&cli.DurationFlag{Name: "raft-heartbeat", Value: d.HeartbeatTimeout, Usage: "Raft heartbeat timeout: a follower that hears no leader for this long starts an election (>= --raft-leader-lease)"},
		&cli.DurationFlag{Name: "raft-election", Value: d.ElectionTimeout, Usage: "Raft election timeout: a candidate without a majority for this long tries again (>= --raft-heartbeat; unset, raised to it)"},
		&cli.DurationFlag{Name: "raft-leader-lease", Value: d.LeaderLeaseTimeout, Usage: "Raft leader lease: a leader that cannot reach a majority for this long steps down (<= --raft-heartbeat; unset, lowered to it)"},
		&cli.DurationFlag{Name: "raft-commit-timeout", Value: d.CommitTimeout, Usage: "Raft commit timeout: with no new entry to send, the master tells each follower the commit index every 1-2x this long, so followers apply a write up to 2x this late; the shorter, the more an idle cell costs"},
		&cli.DurationFlag{Name: "snapshot-interval", Value: d.SnapshotInterval, Usage: "how often (randomised up to 2x) Raft checks whether to snapshot"},
		&cli.Uint64Flag{Name: "snapshot-threshold", Value: d.SnapshotThreshold, Usage: "log entries since the last snapshot that trigger a snapshot"},
		&cli.Uint64Flag{Name: "trailing-logs", Value: d.TrailingLogs, Usage: "log entries kept behind a snapshot; a follower further behind installs the snapshot"},
	}
}

// raftTimings reads raftFlags. An election timeout or leader lease left
// unset follows a heartbeat timeout that was set (at least it, at most it,
// as raft requires), so raising --raft-heartbeat alone, or a setting made
// when the defaults were longer, still starts.
func raftTimings(c *cli.Context) replica.Timings {
	t := replica.DefaultTimings()
	t.HeartbeatTimeout, t.ElectionTimeout = c.Duration("raft-heartbeat"), c.Duration("raft-election")
	t.LeaderLeaseTimeout, t.SnapshotInterval = c.Duration("raft-leader-lease"), c.Duration("snapshot-interval")
	t.SnapshotThreshold, t.TrailingLogs = c.Uint64("snapshot-threshold"), c.Uint64("trailing-logs")
	t.CommitTimeout = c.Duration("raft-commit-timeout")
	if !c.IsSet("raft-election") {
		t.ElectionTimeout = max(t.ElectionTimeout, t.HeartbeatTimeout)
	}
	if !c.IsSet("raft-leader-lease") {
		t.LeaderLeaseTimeout = min(t.LeaderLeaseTimeout, t.HeartbeatTimeout)
	}
	return t
}

// limitFlags are the client port's limits (cell.ConnLimits); README's
// table of them is checked against these flags.
func limitFlags() []cli.Flag {
	d, sd := cell.DefaultConnLimits, cell.DefaultSessionLimits
	reserveNodes, reserveBytes := sd.Reserves()
	flags := []cli.Flag{
		&cli.GenericFlag{Name: "audit-retain", Value: newByteSize(audit.DefaultRetainBytes),
			Usage: "disk each replica's audit trail (every mutation of the cell, in DATA/audit, served by lockcell audit) may fill before its oldest records are deleted, e.g. 1GiB"},
		&cli.IntFlag{Name: "history-changes", Value: fsm.DefaultHistoryChanges,
			Usage: "recent changes to nodes each replica keeps in memory for subtree watches (lockcell watch -r) to resume from; a watcher further behind is told to re-read"},
		&cli.GenericFlag{Name: "history-bytes", Value: newByteSize(fsm.DefaultHistoryBytes),
			Usage: "the memory those changes may take, e.g. 64MiB"},
		&cli.IntFlag{Name: "max-conns-per-ip", Value: d.MaxConnsPerIP, Usage: "client connections one IP address may hold"},
		&cli.IntFlag{Name: "max-conns", Value: d.MaxConns, Usage: "client connections this replica may hold (at most five eighths of the file-descriptor limit; the default is lowered to it)"},
		&cli.IntFlag{Name: "max-conns-per-principal", Value: d.MaxConnsPerPrincipal, Usage: "client connections one principal may hold (closed after the TLS handshake)"},
		&cli.IntFlag{Name: "max-streams-per-conn", Value: d.MaxStreamsPerConn, Usage: "calls in flight on one client connection (parked KeepAlives and kept streams included)"},
		&cli.IntFlag{Name: "max-calls-per-session", Value: d.MaxCallsPerSession, Usage: "calls in flight of one session on a connection"},
	}
	flags = append(flags, portBudgetFlags()...)
	return append(flags,
		&cli.IntFlag{Name: "max-streams-per-ip", Value: d.MaxStreamsPerIP, Usage: "client streams open at once from one IP address (calls in flight, parked KeepAlives, kept streams)"},
		&cli.IntFlag{Name: "max-streams-per-principal", Value: d.MaxStreamsPerPrincipal, Usage: "client streams open at once of one principal"},
		&cli.IntFlag{Name: "max-streams", Value: d.MaxStreams, Usage: "client streams open at once in the whole process"},
		&cli.IntFlag{Name: "max-kept-streams-per-ip", Value: d.MaxKeptStreamsPerIP, Usage: "client streams kept idle for a next call from one IP address (one over it is closed after its call)"},
		&cli.IntFlag{Name: "max-kept-streams-per-principal", Value: d.MaxKeptStreamsPerPrincipal, Usage: "client streams kept idle for a next call of one principal"},
		&cli.IntFlag{Name: "max-kept-streams", Value: d.MaxKeptStreams, Usage: "client streams kept idle for a next call in the whole process"},
		&cli.IntFlag{Name: "max-sessions-per-principal", Value: sd.SessionsPerPrincipal, Usage: "live sessions of one principal"},
		&cli.IntFlag{Name: "max-sessions", Value: sd.Sessions, Usage: "live sessions in the cell"},
		&cli.IntFlag{Name: "max-sessions-per-conn", Value: sd.SessionsPerConn, Usage: "live sessions created over one client connection"},
		&cli.IntFlag{Name: "max-handles-per-session", Value: sd.HandlesPerSession, Usage: "open handles of one session"},
		&cli.DurationFlag{Name: "idle-session-timeout", Value: sd.IdleSessionTimeout, Usage: "close a session that has held no open handle and made no call but KeepAlives for this long (0: never); the Go client opens a new one on its next call"},
		&cli.GenericFlag{Name: "max-read-rate", Value: newByteSize(int64(sd.ReadBytesPerSecond)), Usage: "bytes per second each principal but the admin may read from the master (replies plus 2KiB a call), e.g. 8MiB"},
		&cli.GenericFlag{Name: "max-write-rate", Value: newByteSize(int64(sd.WriteBytesPerSecond)), Usage: "bytes per second each principal but the admin may propose as writes (requests plus 256 bytes a call), e.g. 1MiB"},
		&cli.IntFlag{Name: "max-nodes", Value: sd.Nodes, Usage: "files and directories in the cell, ephemeral ones included (the admin too)"},
		&cli.GenericFlag{Name: "max-content-bytes", Value: newByteSize(sd.ContentBytes), Usage: "bytes of all files' contents in the cell together (the admin too), e.g. 512MiB; keep it plus about 200 bytes a node under 1GiB, the largest snapshot"},
		&cli.IntFlag{Name: "max-nodes-per-principal", Value: sd.NodesPerPrincipal, Usage: "existing files and directories one principal created (the admin is exempt)"},
		// The per-principal content share and the admin's reserves;
		// a reserve left unset is derived from its quota.
		&cli.GenericFlag{Name: "max-content-bytes-per-principal", Value: newByteSize(sd.ContentBytesPerPrincipal), Usage: "bytes of contents of the files one principal created, whoever writes them (the admin is exempt), e.g. 64MiB"},
		&cli.IntFlag{Name: "admin-reserve-nodes", Value: reserveNodes, Usage: "the last nodes of --max-nodes, which only the admin may create (default: a hundredth of --max-nodes, at least 100, at most a tenth)"},
		&cli.GenericFlag{Name: "admin-reserve-content-bytes", Value: newByteSize(reserveBytes), Usage: "the last bytes of --max-content-bytes, which only the admin may fill, e.g. to repair ACL files (default: a 128th of --max-content-bytes, at least 1MiB, at most a tenth)"},
		&cli.IntFlag{Name: "max-cache-registrations-per-principal", Value: sd.CacheRegistrationsPerPrincipal, Usage: "names one principal's sessions together may be registered as caching at the master (a read past it is answered uncacheable)"},
		&cli.IntFlag{Name: "max-cache-registrations", Value: sd.CacheRegistrations, Usage: "names the cell's sessions together may be registered as caching at the master"},
		&cli.GenericFlag{Name: "max-event-bytes", Value: newByteSize(sd.EventBytes), Usage: "master memory of all sessions' queued, unacknowledged events together, e.g. 64MiB; a handle event over it becomes an overflow"},
		&cli.GenericFlag{Name: "max-event-bytes-per-principal", Value: newByteSize(sd.EventBytesPerPrincipal), Usage: "the same for the sessions of one principal together (the admin too), e.g. 8MiB"},
		&cli.IntFlag{Name: "max-backups", Value: sd.Backups, Usage: "backups the master builds or holds for paging at once, each a copy of the state (only the admin may take one)"},
		&cli.IntFlag{Name: "max-handles-per-principal", Value: sd.HandlesPerPrincipal, Usage: "open handles of all sessions of one principal together (the admin too)"},
		&cli.IntFlag{Name: "max-handles", Value: sd.Handles, Usage: "open handles in the cell"},
	)
}

// portBudgetFlags are a client port's timeouts and byte budgets, the
// same for a replica's and a proxy's (cell.ConnLimits; limits reads them).
func portBudgetFlags() []cli.Flag {
	d := cell.DefaultConnLimits
	return []cli.Flag{
		&cli.DurationFlag{Name: "handshake-timeout", Value: d.HandshakeTimeout, Usage: "time for a new client connection's TLS handshake and protocol byte"},
		&cli.DurationFlag{Name: "request-timeout", Value: d.RequestTimeout, Usage: "time for a call to deliver its request, and for its reply to be written"},
		&cli.DurationFlag{Name: "stream-idle-timeout", Value: d.StreamIdleTimeout, Usage: "how long a client's kept stream may wait for its next call before it is closed"},
		&cli.GenericFlag{Name: "max-conn-buffer", Value: newByteSize(d.MaxConnBuffer), Usage: "request bytes one client connection may hold unserved (and reply bytes being written, separately), e.g. 4MiB"},
		&cli.GenericFlag{Name: "max-ip-buffer", Value: newByteSize(d.MaxIPBuffer), Usage: "the same for all connections of one IP address together"},
		&cli.GenericFlag{Name: "max-buffer", Value: newByteSize(d.MaxBuffer), Usage: "the same for the whole process"},
		&cli.GenericFlag{Name: "max-ip-rate", Value: newByteSize(d.MaxIPRate), Usage: "bytes per second read from all client connections of one IP address together (a second's worth may come at once), e.g. 16MiB"},
		&cli.DurationFlag{Name: "buffer-stall", Value: d.BufferStall, Usage: "how long a connection over a buffer budget may free nothing before it is closed"},
		&cli.GenericFlag{Name: "buffer-reserve", Value: newByteSize(d.BufferReserve), Usage: "request bytes beyond --max-buffer that only connections whose IP address and principal hold less than their fair share of it may use, e.g. 16MiB"},
	}
}

// sessionLimits are the master's limits the flags of limitFlags set.
func sessionLimits(c *cli.Context) cell.SessionLimits {
	rate := 0
	if b, ok := c.Generic("max-read-rate").(*byteSize); ok {
		rate = int(*b)
	}
	size := func(name string) int64 {
		if b, ok := c.Generic(name).(*byteSize); ok {
			return int64(*b)
		}
		return 0
	}
	l := cell.SessionLimits{SessionsPerPrincipal: c.Int("max-sessions-per-principal"), Sessions: c.Int("max-sessions"),
		SessionsPerConn: c.Int("max-sessions-per-conn"), HandlesPerSession: c.Int("max-handles-per-session"), ReadBytesPerSecond: rate,
		WriteBytesPerSecond: int(size("max-write-rate")),
		Nodes:               c.Int("max-nodes"), ContentBytes: size("max-content-bytes"), NodesPerPrincipal: c.Int("max-nodes-per-principal"),
		EventBytes: size("max-event-bytes"), EventBytesPerPrincipal: size("max-event-bytes-per-principal"),
		CacheRegistrationsPerPrincipal: c.Int("max-cache-registrations-per-principal"), CacheRegistrations: c.Int("max-cache-registrations"),
		Backups: c.Int("max-backups"), HandlesPerPrincipal: c.Int("max-handles-per-principal"), Handles: c.Int("max-handles"),
		IdleSessionTimeout: c.Duration("idle-session-timeout")}
	if l.IdleSessionTimeout == 0 {
		l.IdleSessionTimeout = -1 // 0 on the command line turns idle closing off; in the Limits it means the default
	}
	// The per-principal content share, and the admin's reserves: only a
	// reserve set (here or in --config) is passed on, one left unset
	// follows the quota it is part of.
	if b, ok := c.Generic("max-content-bytes-per-principal").(*byteSize); ok {
		l.ContentBytesPerPrincipal = int64(*b)
	}
	if c.IsSet("admin-reserve-nodes") {
		l.NodesAdminReserve = c.Int("admin-reserve-nodes")
	}
	if b, ok := c.Generic("admin-reserve-content-bytes").(*byteSize); ok && c.IsSet("admin-reserve-content-bytes") {
		l.ContentBytesAdminReserve = int64(*b)
	}
	return l
}

func limits(c *cli.Context) cell.ConnLimits {
	size := func(name string) int64 {
		if b, ok := c.Generic(name).(*byteSize); ok {
			return int64(*b)
		}
		return 0
	}
	// A connection cap left unset is passed as 0, so that its default can
	// be lowered to the port's share of file descriptors; one set above
	// that share is refused (cell.ErrFDReserve).
	setInt := func(name string) int {
		if !c.IsSet(name) {
			return 0
		}
		return c.Int(name)
	}
	return cell.ConnLimits{MaxConnsPerIP: c.Int("max-conns-per-ip"), MaxConns: setInt("max-conns"),
		MaxConnsPerPrincipal: c.Int("max-conns-per-principal"), MaxStreamsPerConn: c.Int("max-streams-per-conn"),
		MaxCallsPerSession: c.Int("max-calls-per-session"), HandshakeTimeout: c.Duration("handshake-timeout"),
		RequestTimeout: c.Duration("request-timeout"), StreamIdleTimeout: c.Duration("stream-idle-timeout"), MaxConnBuffer: size("max-conn-buffer"), MaxIPBuffer: size("max-ip-buffer"),
		MaxBuffer: size("max-buffer"), BufferStall: c.Duration("buffer-stall"), MaxIPRate: size("max-ip-rate"),
		BufferReserve: size("buffer-reserve"), MaxStreamsPerIP: c.Int("max-streams-per-ip"),
		MaxStreamsPerPrincipal: c.Int("max-streams-per-principal"), MaxStreams: c.Int("max-streams"),
		MaxKeptStreamsPerIP: c.Int("max-kept-streams-per-ip"), MaxKeptStreamsPerPrincipal: c.Int("max-kept-streams-per-principal"),
		MaxKeptStreams: c.Int("max-kept-streams")}
}

// httpFlags are the HTTP port's limits (cell.HTTPLimits) and who sees
// names there (cell.HTTPNames); README's table of them is checked against
// these flags.
func httpFlags() []cli.Flag {
	d := cell.DefaultHTTPLimits
	return []cli.Flag{
		&cli.IntFlag{Name: "http-max-conns-per-ip", Value: d.MaxConnsPerIP, Usage: "HTTP port (--metrics) connections one IP address may hold"},
		&cli.IntFlag{Name: "http-max-conns", Value: d.MaxConns, Usage: "HTTP port connections in all (at most an eighth of the file-descriptor limit; the default is lowered to it)"},
		&cli.DurationFlag{Name: "http-read-header-timeout", Value: d.ReadHeaderTimeout, Usage: "time for an HTTP request's headers (and a new connection's TLS handshake)"},
		&cli.DurationFlag{Name: "http-read-timeout", Value: d.ReadTimeout, Usage: "time for a whole HTTP request"},
		&cli.DurationFlag{Name: "http-write-timeout", Value: d.WriteTimeout, Usage: "time to answer an HTTP request (a /debug/pprof/profile must be shorter)"},
		&cli.DurationFlag{Name: "http-idle-timeout", Value: d.IdleTimeout, Usage: "how long an HTTP keep-alive connection may wait for its next request before it is closed"},
		&cli.StringFlag{Name: "http-names", Value: string(cell.HTTPNamesAuthenticated), Usage: "who sees lock names, principals and client names on the status page: authenticated (a caller with a user certificate, what its principal may read; on a plain cell everyone, as on the client port) or hidden (nobody)"},
	}
}

// httpLimits reads httpFlags.
func httpLimits(c *cli.Context) (cell.HTTPLimits, cell.HTTPNames) {
	// An unset cap is passed as 0, which the default follows, lowered to
	// the HTTP port's share of file descriptors where that is smaller;
	// one set above the share is refused.
	maxConns := 0
	if c.IsSet("http-max-conns") {
		maxConns = c.Int("http-max-conns")
	}
	return cell.HTTPLimits{MaxConnsPerIP: c.Int("http-max-conns-per-ip"), MaxConns: maxConns,
		ReadHeaderTimeout: c.Duration("http-read-header-timeout"), ReadTimeout: c.Duration("http-read-timeout"),
		WriteTimeout: c.Duration("http-write-timeout"), IdleTimeout: c.Duration("http-idle-timeout")}, cell.HTTPNames(c.String("http-names"))
}

// byteSize is a flag value in bytes, written like 16MiB (cell.ParseBytes).
type byteSize int64

func newByteSize(n int64) *byteSize { b := byteSize(n); return &b }

func (b *byteSize) Set(s string) error {
	n, err := cell.ParseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) String() string { return cell.FormatBytes(int64(*b)) }

// tlsFlags name a replica's certificate, key and the cell's CA.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cert", Usage: "this replica's certificate (PEM, as made by lockcelld certs): turns mutual TLS on"},
		&cli.StringFlag{Name: "key", Usage: "this replica's private key (PEM)"},
		&cli.StringFlag{Name: "ca", Usage: "the cell's CA certificate (PEM): users and replicas must be signed by it"},
		&cli.StringFlag{Name: "admin", Usage: "admin principal (default: admin with TLS, anonymous without)"},
		&cli.StringFlag{Name: "proxy-principals", Usage: "principals trusted as proxies (lockcelld proxy's --upstream-cert names), comma-separated: only they may call on behalf of another principal"},
		&cli.BoolFlag{Name: "insecure", Usage: "run without TLS: every caller is the admin and anyone who reaches the Raft port is taken for a replica; listens on loopback only"},
		&cli.BoolFlag{Name: "insecure-bind-any", Usage: "with --insecure, allow --listen and --raft addresses other than loopback: the open cell is then reachable from the network"},
	}
}

// insecureBanner is printed on stderr at every start of a plain cell: what
// is open to whom.
func insecureBanner(client, raft []string, anyAddr bool, admin string) string {
	where := "loopback only: reachable from this machine, by every local user and process"
	if anyAddr {
		where = "ANY ADDRESS (--insecure-bind-any): reachable from the network"
	}
	role := "the cell admin: it may read, write, lock, delete and change the ACLs of every file"
	if admin != "" && admin != cell.AnonymousPrincipal {
		role = "the ACLs decide; the admin " + admin + " cannot be reached without TLS"
	}
	return "lockcelld: WARNING: INSECURE CELL: no TLS (--insecure)\n" +
		"  client port " + strings.Join(client, ",") + ": no authentication; every caller is principal \"" +
		cell.AnonymousPrincipal + "\", " + role + "\n" +
		"  Raft port   " + strings.Join(raft, ",") + ": any peer is accepted; whoever connects can depose the master,\n" +
		"              force elections and append entries that rewrite the replicated state\n" +
		"  listening on " + where + "\n" +
		"  For a real cell use mutual TLS: lockcelld certs, then serve --cert --key --ca.\n"
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// daemonSignals are the signals a running replica acts on, caught from the
// first moment of a serve or dev command: a signal that comes while the
// replica still starts (a `systemctl reload` during a slow store open)
// must not meet Go's default action, which ends the process. SIGTERM and
// SIGINT cancel stop; SIGHUP waits on hup (one kept, however many come)
// until the command's loop can act on it, once the replica is up.
type daemonSignals struct {
	stop   context.Context
	cancel context.CancelFunc
	hup    chan os.Signal
}

// catchSignals starts catching the daemon's signals; release stops it.
func catchSignals() *daemonSignals {
	d := &daemonSignals{hup: make(chan os.Signal, 1)}
	signal.Notify(d.hup, syscall.SIGHUP)
	d.stop, d.cancel = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return d
}

// release gives the signals back to their default actions.
func (d *daemonSignals) release() {
	signal.Stop(d.hup)
	d.cancel()
}

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a five-replica development cell in this process on loopback",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "data", Value: "./lockcell-data", Usage: "data folder (one sub-folder per replica)"},
			&cli.StringFlag{Name: "cell", Value: "local", Usage: "cell name"},
			&cli.IntFlag{Name: "port", Value: 7001, Usage: "first client port (replicas use port..port+4)"},
			&cli.IntFlag{Name: "raft-port", Value: 7101, Usage: "first Raft port"},
			&cli.IntFlag{Name: "replicas", Value: 5, Usage: "number of replicas"},
			&cli.IntFlag{Name: "metrics-port", Value: 7201, Usage: "first Prometheus /metrics port (replica i on port+i); 0 turns metrics off"},
			&cli.BoolFlag{Name: "tls", Usage: "mutual TLS on both ports, with a development CA and certificates under DATA/certs (created if missing)"},
		}, append(timingFlags(), limitFlags()...)...),
		Before: func(c *cli.Context) error { return checkSettings(c, "", nil) },
		Action: func(c *cli.Context) error {
			sig := catchSignals()
			defer sig.release()
			log := logger(c)
			if !c.Bool("tls") {
				var client, raft []string
				for _, p := range cell.LoopbackPeers(c.Int("replicas"), c.Int("port"), c.Int("raft-port")) {
					client, raft = append(client, p.ClientAddr), append(raft, p.RaftAddr)
				}
				fmt.Fprint(os.Stderr, insecureBanner(client, raft, false, ""))
			}
			dcfg := cell.DevConfig{Cell: c.String("cell"), Dir: c.String("data"),
				Peers:    cell.LoopbackPeers(c.Int("replicas"), c.Int("port"), c.Int("raft-port")),
				LeaseTTL: c.Duration("lease"), MaxLeaseTTL: c.Duration("max-lease"), KeepAliveTarget: c.Int("keepalive-target"), DefaultLockDelay: c.Duration("lock-delay"), Logger: log,
				MetricsPort: c.Int("metrics-port"), AuditRetainBytes: auditRetain(c)}
			audit, err := auditLogger(c)
			if err != nil {
				return err
			}
			var d *cell.Dev
			if c.Bool("tls") {
				d, err = startDevTLS(dcfg, limits(c), sessionLimits(c), audit)
			} else {
				d, err = startDevWith(dcfg, limits(c), sessionLimits(c), audit, nil)
			}
			if err != nil {
				return err
			}
			defer d.Close()
			ctx := sig.stop
			wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
			m, err := d.WaitForMaster(wctx)
			wcancel()
			if err != nil {
				return err
			}
			_, epoch := m.IsMaster()
			fmt.Printf("lockcell dev cell %q serving: master %s (replica %s, epoch %d); replicas %s; data %s\n",
				c.String("cell"), m.ClientAddr(), m.ID(), epoch, strings.Join(d.Addrs(), ","), c.String("data"))
			if c.Bool("tls") {
				dir, err := filepath.Abs(devCertDir(dcfg.Dir))
				if err != nil {
					return err
				}
				cf, kf := certs.UserFiles(dir, certs.AdminUser)
				fmt.Printf("mutual TLS on; to use the cell as %s:\n", certs.AdminUser)
				fmt.Printf("export LOCKCELL_CERT=%s\nexport LOCKCELL_KEY=%s\nexport LOCKCELL_CA=%s\n", cf, kf, certs.CAFile(dir))
			}
			for {
				select {
				case <-ctx.Done():
					fmt.Println("lockcell dev cell: shutting down")
					return d.Close()
				case <-sig.hup:
					reopenAuditLogs(log)
					log.Info("SIGHUP: a dev cell has no certificates to reload (they are read at start)")
				}
			}
		},
	}
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run one replica of a cell",
		Description: "Runs replica --id of the cell whose members --peers lists (every replica gets the same --peers). " +
			"The Raft flags must agree across the cell; the defaults suit a LAN. A short-lived test cell that " +
			"snapshots often, so a lagging follower installs a snapshot instead of catching up from the log:\n\n" +
			"Example:\n   lockcelld serve --id 1 --data ./r1 --peers 1=127.0.0.1:7001/127.0.0.1:7101,2=...,3=... \\\n" +
			"      --raft-heartbeat 500ms --raft-election 1s --raft-leader-lease 300ms \\\n" +
			"      --snapshot-interval 1s --snapshot-threshold 64 --trailing-logs 32\n\n" +
			"Every flag can be set in a YAML file instead (--config FILE), one per replica; a flag on the " +
			"command line overrides the file, and a key that is no flag is an error:\n\n" +
			"   id: \"1\"\n   data: /var/lib/lockcell\n   peers: [1=10.0.0.1:7001/10.0.0.1:7101, 2=...]\n   max-conn-buffer: 8MiB\n\n" +
			"A new replica joins a running cell with an empty --data and --join (no --peers needed): it asks the cell " +
			"to add it (as the admin: --join-cert/--join-key on a TLS cell), catches up as a non-voter and votes once " +
			"the master promotes it:\n\n" +
			"   lockcelld serve --id 6 --data ./r6 --listen 10.0.0.6:7001 --raft 10.0.0.6:7101 --cert ... --key ... --ca ca.crt \\\n" +
			"      --join 10.0.0.1:7001,10.0.0.2:7001 --join-cert admin.crt --join-key admin.key",
		Before: serveSettings,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML file of this replica's settings: flag names without dashes as keys (flags given here override it)"},
			&cli.StringFlag{Name: "id", Usage: "this replica's id (one of --peers); required, here or in --config"},
			&cli.StringFlag{Name: "data", Usage: "data folder; required, here or in --config"},
			&cli.StringFlag{Name: "cell", Value: "local", Usage: "cell name"},
			&cli.StringFlag{Name: "peers", Usage: "all members: id=clientaddr/raftaddr,...; required, here or in --config"},
			&cli.StringFlag{Name: "listen", Usage: "client address (must match this id's entry in --peers)"},
			&cli.StringFlag{Name: "raft", Usage: "Raft address (must match this id's entry in --peers)"},
			&cli.StringFlag{Name: "metrics", Usage: "serve the HTTP port for operators at ADDR: /metrics, /healthz, /readyz, a status page at / (off when empty); over TLS with --cert, loopback only with --insecure"},
			&cli.BoolFlag{Name: "pprof", Usage: "also serve Go's profiler at /debug/pprof/ on the --metrics port"},
			&cli.StringFlag{Name: "log-store", Value: replica.LogStoreAuto, EnvVars: []string{"LOCKCELL_LOG_STORE"}, Usage: "where the Raft log lives: auto (where the data folder has it; badger for a new folder), badger (two syncs per batch) or wal (hashicorp/raft-wal: one fsync per batch); a data folder keeps the store it was created with"},
		}, append(append(append(append(append(timingFlags(), raftFlags()...), tlsFlags()...), limitFlags()...), joinFlags()...),
			httpFlags()...)...),
		Action: func(c *cli.Context) error {
			sig := catchSignals() // before anything slow: see daemonSignals
			defer sig.release()
			cfg, reloader, err := serveSetup(c)
			if err != nil {
				return err
			}
			jr, err := joinSetup(c, cfg)
			if err != nil {
				return err
			}
			if cfg.Insecure {
				self := cfg.Peers[slices.IndexFunc(cfg.Peers, func(p cell.Peer) bool { return p.ID == cfg.Self })]
				fmt.Fprint(os.Stderr, insecureBanner([]string{self.ClientAddr}, []string{self.RaftAddr}, cfg.InsecureAnyAddress, cfg.Admin))
			}
			s, err := cell.New(cfg)
			if err != nil {
				return err
			}
			fmt.Printf("lockcell replica %s of cell %q listening on %s\n", c.String("id"), c.String("cell"), s.ClientAddr())
			ctx, cancel := sig.stop, sig.cancel
			var joined chan error // the join's outcome; nil (never ready) without --join
			if jr != nil {
				joined = make(chan error, 1)
				joinDone := make(chan struct{})
				self := cfg.Peers[slices.IndexFunc(cfg.Peers, func(p cell.Peer) bool { return p.ID == cfg.Self })]
				go func() {
					defer close(joinDone)
					joined <- joinCell(ctx, s, self, jr, os.Stdout, cfg.Logger)
				}()
				defer func() { cancel(); <-joinDone }() // the join ends with ctx
			}
			// SIGHUP re-reads the certificate, key and CA files; one that
			// came while the replica started is acted on now.
			for {
				select {
				case <-ctx.Done():
					return s.Close()
				case err := <-joined:
					joined = nil
					if err != nil && ctx.Err() == nil {
						s.Close()
						return cli.Exit(err.Error(), 1)
					}
				case <-sig.hup:
					reopenAuditLogs(cfg.Logger)
					if reloader == nil {
						cfg.Logger.Warn("SIGHUP: no certificates to reload (no TLS)")
					} else if reloader.Reload() == nil {
						fmt.Printf("lockcell replica %s: certificate reloaded (serial %s)\n", c.String("id"), reloader.SerialText())
					}
				}
			}
		},
	}
}

// serveConfig is the replica configuration the serve command's flags
// describe.
func serveConfig(c *cli.Context) (cell.Config, error) {
	cfg, _, err := serveSetup(c)
	return cfg, err
}

// serveSetup is serveConfig and, with TLS, the reloader that holds the
// replica's certificates (for SIGHUP).
func serveSetup(c *cli.Context) (cell.Config, *cell.CertReloader, error) {
	var rl *cell.CertReloader
	cfg, err := serveConfigWith(c, func(cert, key, ca string, log *slog.Logger) (server, peer *tls.Config, err error) {
		if rl, err = cell.NewCertReloader(cert, key, ca, log); err != nil {
			return nil, nil, err
		}
		return rl.ServerTLS(), rl.PeerTLS(), nil
	})
	if err != nil {
		return cell.Config{}, nil, err
	}
	return cfg, rl, nil
}

// serveConfigWith is serveConfig with the function that loads the TLS
// configurations from the certificate, key and CA files.
func serveConfigWith(c *cli.Context, loadTLS func(cert, key, ca string, log *slog.Logger) (server, peer *tls.Config, err error)) (cell.Config, error) {
	join := c.String("join") != ""
	for _, name := range []string{"id", "data", "peers"} {
		if c.String(name) == "" && !(join && name == "peers") {
			return cell.Config{}, cli.Exit("--"+name+" is required (on the command line or in --config)", 2)
		}
	}
	log := logger(c)
	var peers []cell.Peer
	var err error
	if c.String("peers") != "" {
		if peers, err = cell.ParsePeers(c.String("peers")); err != nil {
			return cell.Config{}, cli.Exit(err.Error(), 2)
		}
	}
	if join && !slices.ContainsFunc(peers, func(p cell.Peer) bool { return p.ID == c.String("id") }) {
		// A joining replica's own entry: the cell learns the rest.
		if c.String("listen") == "" || c.String("raft") == "" {
			return cell.Config{}, cli.Exit("--join needs this replica's --listen and --raft addresses (or its entry in --peers)", 2)
		}
		peers = append(peers, cell.Peer{ID: c.String("id"), ClientAddr: c.String("listen"), RaftAddr: c.String("raft")})
	}
	for _, p := range peers {
		if p.ID != c.String("id") {
			continue
		}
		if l := c.String("listen"); l != "" && l != p.ClientAddr {
			return cell.Config{}, cli.Exit(fmt.Sprintf("--listen %s differs from peer %s's client address %s", l, p.ID, p.ClientAddr), 2)
		}
		if r := c.String("raft"); r != "" && r != p.RaftAddr {
			return cell.Config{}, cli.Exit(fmt.Sprintf("--raft %s differs from peer %s's Raft address %s", r, p.ID, p.RaftAddr), 2)
		}
	}
	cfg := cell.Config{Cell: c.String("cell"), Self: c.String("id"), Peers: peers, Dir: c.String("data"),
		LeaseTTL: c.Duration("lease"), MaxLeaseTTL: c.Duration("max-lease"), KeepAliveTarget: c.Int("keepalive-target"), DefaultLockDelay: c.Duration("lock-delay"), Timings: raftTimings(c), Logger: log,
		MetricsAddr: c.String("metrics"), Pprof: c.Bool("pprof"), Admin: c.String("admin"), Limits: limits(c), SessionLimits: sessionLimits(c),
		Join: join, LogStore: c.String("log-store"), ProxyPrincipals: splitList(c.String("proxy-principals"))}
	if cfg.LogStore != replica.LogStoreAuto && cfg.LogStore != replica.LogStoreBadger && cfg.LogStore != replica.LogStoreWAL {
		return cell.Config{}, cli.Exit(fmt.Sprintf("--log-store %q: want %s, %s or %s", cfg.LogStore, replica.LogStoreAuto, replica.LogStoreBadger, replica.LogStoreWAL), 2)
	}
	cfg.HTTP, cfg.HTTPNames = httpLimits(c)
	cert, key, ca := c.String("cert"), c.String("key"), c.String("ca")
	switch {
	case cert != "" && key != "" && ca != "":
		if cfg.TLS, cfg.PeerTLS, err = loadTLS(cert, key, ca, log.With("replica", cfg.Self)); err != nil {
			return cell.Config{}, cli.Exit(err.Error(), 2)
		}
	case cert != "" || key != "" || ca != "":
		return cell.Config{}, cli.Exit("--cert, --key and --ca go together", 2)
	case !c.Bool("insecure"):
		return cell.Config{}, cli.Exit("no TLS: give --cert, --key and --ca (lockcelld certs writes a development set), "+
			"or --insecure to run a plain cell where every caller is the admin and anyone who reaches the Raft port is taken for a replica", 2)
	}
	if c.Bool("insecure") && cfg.TLS != nil {
		return cell.Config{}, cli.Exit("--insecure contradicts --cert, --key and --ca", 2)
	}
	if cfg.AuditLogger, err = auditLogger(c); err != nil {
		return cell.Config{}, err
	}
	cfg.AuditRetainBytes = auditRetain(c)
	cfg.HistoryChanges, cfg.HistoryBytes = historyLimits(c)
	if c.Bool("insecure-bind-any") && !c.Bool("insecure") {
		return cell.Config{}, cli.Exit("--insecure-bind-any goes with --insecure only", 2)
	}
	cfg.Insecure, cfg.InsecureAnyAddress = c.Bool("insecure"), c.Bool("insecure-bind-any")
	if err := cfg.Validate(); err != nil {
		return cell.Config{}, cli.Exit(err.Error(), 2)
	}
	return cfg, nil
}

// serveSettings applies the --config file, then checks every numeric
// setting, from the file or not, against its range.
func serveSettings(c *cli.Context) error {
	fromFile, err := applyConfigFile(c)
	if err != nil {
		return err
	}
	return checkSettings(c, c.String("config"), fromFile)
}

// checkSettings checks every numeric flag of the command, however it was
// set (the command line, the config file at path, which set the settings
// fromFile, or the default), against cell.SettingRanges and
// cell.SettingRelations, and refuses the first out of range as a usage
// error naming where it was set: "FILE:LINE: key: value is below the
// minimum ..." or "--key value: below the minimum ...".
func checkSettings(c *cli.Context, path string, fromFile map[string]cell.Setting) error {
	refuse := func(err error) error {
		var re *cell.RangeError
		if !errors.As(err, &re) {
			return cli.Exit(err.Error(), 2)
		}
		if s, ok := fromFile[re.Key]; ok {
			return cli.Exit(fmt.Sprintf("%s:%d: %s: %s is %s", path, s.Line, re.Key, s.Value, re.Reason()), 2)
		}
		return cli.Exit(fmt.Sprintf("--%s %s: %s", re.Key, re.Unit.Format(re.Value), re.Reason()), 2)
	}
	values := map[string]int64{}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		v, ok := numericValue(c, f)
		if !ok {
			continue
		}
		values[name] = v
		if err := cell.CheckSetting(name, v); err != nil {
			return refuse(err)
		}
	}
	if _, ok := values["raft-heartbeat"]; ok {
		// An election timeout or leader lease left unset follows the
		// heartbeat timeout (raftTimings): check what the replica gets.
		t := raftTimings(c)
		values["raft-election"], values["raft-leader-lease"] = int64(t.ElectionTimeout), int64(t.LeaderLeaseTimeout)
	}
	if err := cell.CheckSettingRelations(values); err != nil {
		return refuse(err)
	}
	return nil
}

// numericValue is the value of a numeric flag (a count, a duration or a
// byte size), and false for any other flag.
func numericValue(c *cli.Context, f cli.Flag) (int64, bool) {
	name := f.Names()[0]
	switch f.(type) {
	case *cli.IntFlag:
		return int64(c.Int(name)), true
	case *cli.Int64Flag:
		return c.Int64(name), true
	case *cli.UintFlag:
		return int64(c.Uint(name)), true
	case *cli.Uint64Flag:
		return int64(min(c.Uint64(name), math.MaxInt64)), true
	case *cli.DurationFlag:
		return int64(c.Duration(name)), true
	case *cli.GenericFlag:
		if b, ok := c.Generic(name).(*byteSize); ok {
			return int64(*b), true
		}
	}
	return 0, false
}

// applyConfigFile sets the flags the --config file names, except those
// given on the command line or in the environment, which win, and returns
// the settings it applied by key. A key that names no flag of the command
// (or a global one) is a usage error: a mistyped setting must not be
// silently ignored.
func applyConfigFile(c *cli.Context) (map[string]cell.Setting, error) {
	path := c.String("config")
	if path == "" {
		return nil, nil
	}
	settings, err := cell.ReadSettings(path)
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	known := map[string]bool{}
	for _, fs := range [][]cli.Flag{c.Command.Flags, c.App.Flags} {
		for _, f := range fs {
			for _, n := range f.Names() {
				known[n] = true
			}
		}
	}
	for _, n := range []string{"config", "help", "h", "version", "v"} {
		delete(known, n)
	}
	applied := map[string]cell.Setting{}
	for _, s := range settings {
		if !known[s.Key] {
			return nil, cli.Exit(fmt.Sprintf("config file %s line %d: unknown setting %q (not a flag of lockcelld %s)",
				path, s.Line, s.Key, c.Command.Name), 2)
		}
		if c.IsSet(s.Key) {
			continue
		}
		if err := c.Set(s.Key, s.Value); err != nil {
			return nil, cli.Exit(fmt.Sprintf("config file %s line %d: %s: %v", path, s.Line, s.Key, err), 2)
		}
		applied[s.Key] = s
	}
	return applied, nil
}

func certsCommand() *cli.Command {
	return &cli.Command{
		Name:  "certs",
		Usage: "write a development CA, replica and user certificates for mutual TLS",
		Description: "Writes DIR/ca.crt and ca.key, replica-<id>.crt/.key for every replica and <user>.crt/.key " +
			"for admin and every --users name (keys mode 0600). Files that exist are kept, so running it again " +
			"with more users adds them, issued by the same CA. A user's certificate name is the principal the " +
			"cell sees.\n\nExample:\n   lockcelld certs --dir ./lockcell-certs --users alice,bob --hosts db1.example,10.0.0.7",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Required: true, Usage: "folder to write the certificates to"},
			&cli.StringFlag{Name: "users", Usage: "comma-separated user names besides admin"},
			&cli.StringFlag{Name: "hosts", Usage: "comma-separated extra host names or IPs for the replica certificates (loopback is always in)"},
			&cli.StringFlag{Name: "replicas", Value: "1,2,3,4,5", Usage: "comma-separated replica ids"},
		},
		Action: func(c *cli.Context) error {
			set := certs.DevSet{Dir: c.String("dir"), Replicas: splitList(c.String("replicas")),
				Users: splitList(c.String("users")), Hosts: splitList(c.String("hosts"))}
			if err := set.Write(); err != nil {
				return err
			}
			fmt.Printf("certificates in %s: CA ca.crt; replicas %s; users %s\n", set.Dir,
				strings.Join(set.Replicas, ","), strings.Join(append([]string{certs.AdminUser}, set.Users...), ","))
			// Each certificate's serial as openssl shows it, to match
			// against logs (certificate reload) and revocation records.
			files := []string{certs.CAFile(set.Dir)}
			for _, id := range set.Replicas {
				f, _ := certs.ReplicaFiles(set.Dir, id)
				files = append(files, f)
			}
			for _, u := range append([]string{certs.AdminUser}, set.Users...) {
				f, _ := certs.UserFiles(set.Dir, u)
				files = append(files, f)
			}
			for _, f := range files {
				sum, err := certs.Summarize(f)
				if err != nil {
					return err
				}
				fmt.Printf("  %s  CN=%s  serial=%s  not_after=%s\n", filepath.Base(f), sum.Subject, sum.Serial,
					sum.NotAfter.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
}

// devCertDir is where `dev --tls` keeps its certificates.
func devCertDir(data string) string { return filepath.Join(data, "certs") }

// startDevTLS starts a development cell with mutual TLS, creating the
// development certificates under DATA/certs when missing.
func startDevTLS(cfg cell.DevConfig, lim cell.ConnLimits, sl cell.SessionLimits, audit *slog.Logger) (*cell.Dev, error) {
	dir := devCertDir(cfg.Dir)
	var ids []string
	for _, p := range cfg.Peers {
		ids = append(ids, p.ID)
	}
	if err := certs.WriteDevSet(dir, ids); err != nil {
		return nil, err
	}
	return startDevWith(cfg, lim, sl, audit, func(id string) (server, peer *tls.Config, err error) {
		cf, kf := certs.ReplicaFiles(dir, id)
		return certs.LoadReplicaConfigs(cf, kf, certs.CAFile(dir))
	})
}

// startDevWith is cell.StartDev with connection and session limits, the
// audit stream and, when tlsFor is set, each replica's TLS configurations
// (cell.DevConfig has none of them).
func startDevWith(cfg cell.DevConfig, lim cell.ConnLimits, sl cell.SessionLimits, audit *slog.Logger, tlsFor func(id string) (server, peer *tls.Config, err error)) (*cell.Dev, error) {
	if cfg.Cell == "" {
		cfg.Cell = "local"
	}
	d := &cell.Dev{Cell: cfg.Cell}
	for i, p := range cfg.Peers {
		sc := cell.Config{Cell: cfg.Cell, Self: p.ID, Peers: cfg.Peers, Dir: filepath.Join(cfg.Dir, "replica-"+p.ID),
			LeaseTTL: cfg.LeaseTTL, MaxLeaseTTL: cfg.MaxLeaseTTL, KeepAliveTarget: cfg.KeepAliveTarget,
			DefaultLockDelay: cfg.DefaultLockDelay, Timings: cfg.Timings, Logger: cfg.Logger,
			Limits: lim, SessionLimits: sl, AuditLogger: audit, AuditRetainBytes: cfg.AuditRetainBytes}
		if cfg.MetricsPort != 0 {
			sc.MetricsAddr = "127.0.0.1:" + strconv.Itoa(cfg.MetricsPort+i)
		}
		var err error
		if tlsFor != nil {
			sc.TLS, sc.PeerTLS, err = tlsFor(p.ID)
		} else {
			sc.Insecure = true
		}
		var s *cell.Server
		if err == nil {
			s, err = cell.New(sc)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start replica %s: %w", p.ID, err), d.Close())
		}
		d.Servers = append(d.Servers, s)
	}
	return d, nil
}
