// Package replica is one Raft node of a lockcell cell: hashicorp/raft over a
// badger log and stable store with fsync on every batch, raft's file
// snapshot store, the Raft transports, group commit, membership changes and
// fault points, applying committed entries to the state machine of package
// fsm (raftfsm.go adapts it to raft.FSM). It knows nothing of clients or
// the wire protocol.
package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/audit"
	"lockcell/fsm"

	"github.com/hashicorp/raft"
)

// Peer is one voting member of the cell as Raft sees it.
type Peer struct {
	ID       string
	RaftAddr string
}

// Config configures one replica. Zero durations take the defaults of
// DefaultTimings.
type Config struct {
	// ID is this replica's Raft server id; it must appear in Peers.
	ID string
	// Cell is the cell name; the FSM's root is /ls/<Cell>.
	Cell string
	// Dir holds the badger store ("raft/") and snapshots ("snapshots/").
	Dir string
	// RaftAddr is the TCP address the Raft transport listens on.
	RaftAddr string
	// Peers lists every voting member, this one included. A replica with no
	// state bootstraps the cell with exactly this configuration; all
	// members must be given the same ids. The default transport dials a
	// member at its address in this list (raft's ServerAddressProvider),
	// so each replica may be given its own view of the others' addresses.
	Peers []Peer
	// Timings of elections, heartbeats and snapshots.
	Timings Timings
	// Audit sizes the audit trail's files in Dir/audit (zero: the
	// defaults of package audit).
	Audit audit.Options
	// Logger receives the replica's and raft's logs.
	Logger *slog.Logger
	// Transport overrides the TCP transport (tests inject faults here).
	Transport raft.Transport
	// PeerTLS, when set, makes the default transport speak mutual TLS: it
	// serves both ends of Raft connections, so it must hold this
	// replica's certificate, verify peers against the cell's CA and
	// require client certificates (certs.PeerConfig builds one).
	PeerTLS *tls.Config
	// VerifyPeer checks every Raft connection's verified peer certificate
	// (cell passes certs.VerifyReplica: only replicas speak Raft, never a
	// user). Required with PeerTLS.
	VerifyPeer func(tls.ConnectionState) error
	// PeerHandshakeTimeout bounds a Raft connection's TLS handshake
	// (default DefaultPeerHandshakeTimeout).
	PeerHandshakeTimeout time.Duration
	// RaftLimits bound the built-in transport's connections, TLS or
	// plain (zero fields: DefaultRaftLimits).
	RaftLimits RaftLimits
	// LogStore names where the Raft log lives: LogStoreAuto ("" too: the
	// folder's store, badger for a new folder), LogStoreBadger or
	// LogStoreWAL. A data folder keeps the store it was created with;
	// Open refuses the other (ErrLogStoreMismatch).
	LogStore string
	// Join makes a replica with no state wait to be added to an existing
	// cell (through the master's membership change) instead of
	// bootstrapping one from Peers: it holds no configuration, so it never
	// stands for election, until the master's first append brings one.
	// Its Peers may list only itself. A replica with state ignores Join.
	Join bool
}

// Timings are the Raft timing knobs lockcell exposes.
type Timings struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
}

// DefaultTimings are tuned for a five-member cell on one machine or a LAN.
//
// The heartbeat timeout sets the fail-over time: a follower checks for its
// leader at random intervals of one to two heartbeat timeouts, and voters
// refuse a candidate while they still follow a leader, so an election
// waits until a majority of followers has timed out, about twice the
// heartbeat timeout after a master dies. At 300 ms a master killed with
// kill -9 is replaced in about 0.6 s and its clients lock again in about
// 0.65 s (BenchmarkFailoverPhases). It need not be longer to avoid
// spurious elections on a loaded machine: the leader sends a heartbeat
// every tenth of it, and a leader that cannot reach a majority steps down
// after the leader lease, 300 ms either way; with pre-vote (on) a lone
// follower that misses heartbeats disturbs no one. No lock, lease or
// lock-delay depends on it (docs/flows.md, "Flow: fail-over"). The election
// timeout is how long a candidate waits before trying again (after a split
// vote or a refused pre-vote); raft requires it at least the heartbeat
// timeout, and the leader lease at most the heartbeat timeout.
//
// The commit timeout is how often, with no new entry to send, the leader
// tells each follower the commit index (every 1-2x it): raft's heartbeats
// do not carry it. It costs an idle cell a message to each follower per
// period, and it bounds only how late a follower applies a write made
// when nothing follows it; the master answers every call from its own
// state. At 20 ms an idle five-member cell spent about 1.5x the CPU it
// spends at 100 ms (docs/performance.md, "Idle cost").
func DefaultTimings() Timings {
	return Timings{
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      100 * time.Millisecond,
		SnapshotInterval:   60 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       4096,
	}
}

func (t Timings) withDefaults() Timings {
	d := DefaultTimings()
	if t.HeartbeatTimeout == 0 {
		t.HeartbeatTimeout = d.HeartbeatTimeout
	}
	// An election timeout or leader lease left zero fits the heartbeat
	// timeout as raft requires (election >= heartbeat >= lease).
	if t.ElectionTimeout == 0 {
		t.ElectionTimeout = max(d.ElectionTimeout, t.HeartbeatTimeout)
	}
	if t.LeaderLeaseTimeout == 0 {
		t.LeaderLeaseTimeout = min(d.LeaderLeaseTimeout, t.HeartbeatTimeout)
	}
	if t.CommitTimeout == 0 {
		t.CommitTimeout = d.CommitTimeout
	}
	if t.SnapshotInterval == 0 {
		t.SnapshotInterval = d.SnapshotInterval
	}
	if t.SnapshotThreshold == 0 {
		t.SnapshotThreshold = d.SnapshotThreshold
	}
	if t.TrailingLogs == 0 {
		t.TrailingLogs = d.TrailingLogs
	}
	return t
}

// Replica owns one Raft node and its state machine.
type Replica struct {
	cfg        Config
	log        *slog.Logger
	raft       *raft.Raft
	fsm        *fsm.FSM
	store      *Store
	closeLogs  func() error // closes a log store other than store, or nil
	transport  raft.Transport
	port       *streamLayer // the built-in transport's, or nil
	notify     chan bool
	leadership chan bool
	done       chan struct{}
	stats      *replicaStats // operators' figures (stats.go)
	progress   *progress     // followers' progress as leader (progress.go)
	watch      *commitWatch  // the leader's commit index as a follower learns it (freshness.go)
	addrs      *peerAddrs    // the built-in transport's address book, or nil
	batcher    *batcher      // group commit of Apply (batch.go)
	snaps      raft.SnapshotStore
	trail      *audit.Trail // the audit trail the FSM appends to (audit.go)

	diskMu sync.Mutex // guards disk (diskusage.go)
	disk   DiskUsage
}

// Open starts a replica on its data folder, bootstrapping the cell when the
// folder holds no Raft state. The replica's state machine is rebuilt from
// the latest snapshot and the log.
func Open(cfg Config) (*Replica, error) {
	if armedErr != nil {
		return nil, armedErr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("replica", cfg.ID)
	t := cfg.Timings.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("replica %s: %w", cfg.ID, err)
	}
	waitStartGate()
	slot := slices.IndexFunc(cfg.Peers, func(p Peer) bool { return p.ID == cfg.ID })
	store, err := openReplicaStore(filepath.Join(cfg.Dir, "raft"), cfg.ID, slot, len(cfg.Peers), log)
	if err != nil {
		return nil, fmt.Errorf("replica %s: open store: %w", cfg.ID, err)
	}
	hlog, hw := newRaftLogger(log)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("replica %s: snapshot store: %w", cfg.ID, err)
	}
	trans := cfg.Transport
	var port *streamLayer
	var addrs *peerAddrs
	if trans == nil {
		addr, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("replica %s: raft address %q: %w", cfg.ID, cfg.RaftAddr, err)
		}
		// Peers are dialled at the address in THIS replica's Peers list,
		// not the one in the replicated configuration: each process may
		// be given its own view of the others (a test harness points them
		// at per-link proxies; an operator can re-address a member without
		// a membership change).
		addrs = &peerAddrs{static: cfg.Peers}
		stream, err := newStreamLayer(cfg.RaftAddr, addr, cfg.PeerTLS, cfg.VerifyPeer, cfg.PeerHandshakeTimeout,
			cfg.RaftLimits.withDefaults(t.HeartbeatTimeout), log)
		if err == nil {
			trans = unpipelined{raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
				ServerAddressProvider: addrs,
				Logger:                newTransportHCLogger(log, stream.stats),
				Stream:                stream,
				MaxPool:               8,
				Timeout:               5 * time.Second,
			})}
			port = stream
		}
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("replica %s: raft transport on %s: %w", cfg.ID, cfg.RaftAddr, err)
		}
	}
	prog := newProgress()
	prog.onContact = hw.contacted // a failing peer answering again ends its run of failure lines
	watch := newCommitWatch()
	trans = track(trans, prog, watch)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = t.HeartbeatTimeout
	rc.ElectionTimeout = t.ElectionTimeout
	rc.LeaderLeaseTimeout = t.LeaderLeaseTimeout
	rc.CommitTimeout = t.CommitTimeout
	rc.SnapshotInterval = t.SnapshotInterval
	rc.SnapshotThreshold = t.SnapshotThreshold
	rc.TrailingLogs = t.TrailingLogs
	// Pre-vote stays on (raft's default; the transport offers it): a
	// follower that missed heartbeats, say starved of CPU, first asks
	// whether a majority would elect it, and followers that still hear
	// from the leader say no, so it never raises the term and deposes a
	// healthy master.
	rc.PreVoteDisabled = false
	// Group commit: the leader drains up to MaxAppendEntries queued applies
	// into one batch, one StoreLogs and one fsync.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = maxAppendEntries
	rc.NoLegacyTelemetry = true
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	st := &replicaStats{}
	stored, closeLogs, err := openLogStore(cfg.LogStore, cfg.Dir, store, &st.logStore, hlog)
	if err != nil {
		store.Close()
		closeTransport(trans)
		return nil, fmt.Errorf("replica %s: %w", cfg.ID, err)
	}
	logs := newLogCache(stored)
	closeStores := func() {
		if closeLogs != nil {
			closeLogs()
		}
		store.Close()
	}

	sm := fsm.NewFSM(cfg.Cell, log)
	// Backups being paged out live in unlinked files here; a process
	// that died between creating one and unlinking it left it behind.
	// Only those are removed: an operator may keep other files nearby.
	backups := filepath.Join(cfg.Dir, backupTempDir)
	if err := fsm.RemoveBackupLeftovers(backups); err != nil {
		closeStores()
		trans.(io.Closer).Close()
		return nil, fmt.Errorf("replica %s: %w", cfg.ID, err)
	}
	sm.SetBackupDir(backups)
	trail, err := audit.Open(filepath.Join(cfg.Dir, "audit"), cfg.Audit)
	if err != nil {
		closeStores()
		trans.(io.Closer).Close()
		return nil, fmt.Errorf("replica %s: %w", cfg.ID, err)
	}
	sm.SetAuditor(trail) // before raft restores and replays: the trail skips what it holds
	has, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		trail.Close()
		closeStores()
		trans.(io.Closer).Close()
		return nil, fmt.Errorf("replica %s: %w", cfg.ID, err)
	}
	if !has && cfg.Join {
		log.Info("no state: waiting to be added to the cell by its master")
	}
	if !has && !cfg.Join {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, logs, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			trail.Close()
			closeStores()
			closeTransport(trans)
			return nil, fmt.Errorf("replica %s: bootstrap: %w", cfg.ID, err)
		}
	}
	rf := &raftFSM{f: sm, h: &st.apply}
	r, err := raft.NewRaft(rc, rf, logs, store, snaps, trans)
	if err != nil {
		closeStores()
		closeTransport(trans)
		trail.Close()
		return nil, fmt.Errorf("replica %s: start raft: %w", cfg.ID, err)
	}
	if addrs != nil {
		addrs.raft.Store(r)
	}
	watch.setTerm(r.CurrentTerm)
	rf.live.Store(true) // NewRaft restored the latest snapshot synchronously; later restores are installs
	st.countLeaders(r)
	if p, n, ok := ArmedCrashPoint(); ok {
		log.Warn("crash point armed: this process kills itself with SIGKILL there", "point", p, "hit", n)
	}
	rep := &Replica{cfg: cfg, log: log, raft: r, fsm: sm, store: store, closeLogs: closeLogs, transport: trans, port: port, snaps: snaps, trail: trail,
		notify: notify, leadership: make(chan bool, 16), done: make(chan struct{}), stats: st, progress: prog, watch: watch, addrs: addrs}
	rep.batcher = newBatcher(r, rep.done)
	go rep.forwardLeadership()
	return rep, nil
}

// peerAddrs resolves a server id to its Raft address (raft's
// ServerAddressProvider): the address in one replica's own Peers list when
// it lists the id, else the address in the latest Raft configuration this
// replica knows, so that members added after this process started (and a
// joining replica's every peer) are dialled without a warning per dial.
type peerAddrs struct {
	static []Peer
	raft   atomic.Pointer[raft.Raft] // set once raft runs
}

// ServerAddr returns the address to dial id at.
func (ps *peerAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	for _, p := range ps.static {
		if p.ID == string(id) {
			return raft.ServerAddress(p.RaftAddr), nil
		}
	}
	if r := ps.raft.Load(); r != nil {
		// GetConfiguration reads raft's latest configuration without
		// waiting on its loops: safe from a replication goroutine.
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if s.ID == id {
					return s.Address, nil
				}
			}
		}
	}
	return "", fmt.Errorf("replica: no peer with id %q", id)
}

func closeTransport(t raft.Transport) {
	if c, ok := t.(io.Closer); ok {
		c.Close()
	}
}

// forwardLeadership relays raft's NotifyCh, keeping only the latest value
// when the consumer is slow, so raft is never blocked by the master.
func (r *Replica) forwardLeadership() {
	for {
		select {
		case v := <-r.notify:
			for {
				select {
				case r.leadership <- v:
				default:
					select {
					case <-r.leadership:
					default:
					}
					continue
				}
				break
			}
		case <-r.done:
			close(r.leadership)
			return
		}
	}
}

// Leadership delivers true when this replica becomes Raft leader and false
// when it stops being leader. It is closed when the replica closes.
func (r *Replica) Leadership() <-chan bool { return r.leadership }

// FSM returns the replicated state machine for reads.
func (r *Replica) FSM() *fsm.FSM { return r.fsm }

// ID returns this replica's Raft id.
func (r *Replica) ID() string { return r.cfg.ID }

// Store returns the badger log store (tests assert its durability options).
func (r *Replica) Store() *Store { return r.store }

// Apply proposes cmd and waits until it is committed and applied here. It
// returns ErrNotLeader when the command was certainly not applied and
// ErrUnknownOutcome when leadership was lost with the command in flight.
// Commands that arrive while an earlier one is in flight go out together
// as one batch entry once it is applied (group commit, batch.go); a
// command that finds nothing in flight is proposed at once.
func (r *Replica) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	b, err := cmd.Encode()
	if err != nil {
		return nil, err
	}
	if cmd.Type == fsm.CmdBatch {
		return nil, fmt.Errorf("%w: a batch is proposed only by group commit", fsm.ErrMalformedCommand)
	}
	p := &pending{data: b, done: make(chan struct{})}
	r.batcher.submit(p)
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v", fsm.ErrUnknownOutcome, ctx.Err())
	case <-r.done:
		return nil, fmt.Errorf("%w: shut down with the command in flight", fsm.ErrClosed)
	}
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", fsm.ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", fsm.ErrUnknownOutcome, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", fsm.ErrClosed, err)
	}
	return fmt.Errorf("%w: %v", fsm.ErrUnknownOutcome, err)
}

// VerifyLeader confirms, by a round of contact with a quorum that began
// after the call, that this replica is still the leader: a quorum of
// voters answered, in this term, requests sent after VerifyLeader was
// called, so none of them had voted for a successor before that moment.
//
// raft's own VerifyLeader is not enough for that: it counts the answer to
// any heartbeat that comes back after the check began, also one sent
// before it (replication.go, heartbeat: notifyAll). A heartbeat answered
// long ago but read late, by a leader that was frozen or whose network
// held the answer, would then vouch for a leader deposed meanwhile. So
// the replica's transport records when each answered request was sent
// (progress.heard), and VerifyLeader asks raft again until a quorum's
// answers are to requests sent after it began; raft's next round sends a
// fresh heartbeat to every follower whose last one is answered.
func (r *Replica) VerifyLeader(ctx context.Context) error {
	start := time.Now()
	term := r.raft.CurrentTerm()
	for {
		f := r.raft.VerifyLeader()
		errc := make(chan error, 1)
		go func() { errc <- f.Error() }()
		select {
		case err := <-errc:
			if err != nil {
				return fmt.Errorf("%w: %v", fsm.ErrNotLeader, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.raft.CurrentTerm() != term {
			return fmt.Errorf("%w: the term changed during the check", fsm.ErrNotLeader)
		}
		cf := r.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return fmt.Errorf("%w: %v", fsm.ErrNotLeader, err)
		}
		var voters []raft.ServerID
		for _, s := range cf.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, s.ID)
			}
		}
		if r.progress.heardSince(voters, raft.ServerID(r.cfg.ID), term, start) {
			return nil
		}
	}
}

// Barrier waits until every entry committed before it is applied to the FSM.
func (r *Replica) Barrier(ctx context.Context) error {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		return mapRaftErr(err)
	}
	return nil
}

// IsLeader reports whether raft currently believes this replica leads.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the id and Raft address of the leader this replica knows
// of, or empty strings.
func (r *Replica) Leader() (id, raftAddr string) {
	addr, sid := r.raft.LeaderWithID()
	return string(sid), string(addr)
}

// Status reports the node's Raft state.
func (r *Replica) Status() fsm.Status {
	return fsm.Status{State: r.raft.State().String(), Term: r.raft.CurrentTerm(),
		CommitIndex: r.raft.CommitIndex(), AppliedIndex: r.raft.AppliedIndex(), LastIndex: r.raft.LastIndex()}
}

// RaftPortStats counts what the built-in transport's Raft port refused or
// dropped; zero with an injected Transport.
func (r *Replica) RaftPortStats() RaftPortStats {
	if r.port == nil {
		return RaftPortStats{}
	}
	return r.port.Stats()
}

// Snapshot takes a snapshot now and compacts the log behind it.
func (r *Replica) Snapshot() error { return r.raft.Snapshot().Error() }

// Close stops Raft, then the transport and the store. Safe to call once.
func (r *Replica) Close() error {
	err := r.raft.Shutdown().Error()
	close(r.done)
	r.batcher.close() // its last entry settled: ErrClosed
	closeTransport(r.transport)
	if r.closeLogs != nil {
		if cerr := r.closeLogs(); err == nil {
			err = cerr
		}
	}
	if cerr := r.store.Close(); err == nil {
		err = cerr
	}
	if cerr := r.trail.Close(); err == nil {
		err = cerr // raft has stopped applying: the trail is whole
	}
	return err
}

// Audit is the replica's audit trail (package audit): every mutation
// this replica applied, in index order, as every replica holds it.
func (r *Replica) Audit() *audit.Trail { return r.trail }
