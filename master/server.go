// Package master is the behaviour of the elected leader: it serves the
// client calls, keeps session leases in memory, wakes blocked acquires when
// the replicated state hands them a lock, and turns every change of state
// into a replicated command. A Server exists on every replica but serves
// only between Start (on winning leadership) and Stop (on losing it).
package master

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Consensus is what the master needs from its replica: proposing commands
// and confirming leadership. Declared here, where it is used.
type Consensus interface {
	// Apply proposes cmd and returns its result once applied locally.
	Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	// VerifyLeader confirms leadership with a quorum right now.
	VerifyLeader(ctx context.Context) error
	// IsLeader reports, without a network round, whether Raft still
	// believes this replica leads. A leader that lost contact with a quorum
	// stops believing it within the leader lease, before any successor can
	// be elected, so checking it before granting a lease extension keeps
	// a deposed master from extending leases.
	IsLeader() bool
}

// Config configures the master behaviour of a cell.
type Config struct {
	// Cell is the cell name: names served are /ls/<Cell>/...
	Cell string
	// LeaseTTL is the session lease a KeepAlive grants (default 12 s).
	LeaseTTL time.Duration
	// MaxLeaseTTL is the longest lease a KeepAlive grants under load
	// (docs/spec.md#lease-lengthening): the master lengthens leases so
	// that its sessions' KeepAlives stay under KeepAliveTarget a second.
	// Zero, or no more than LeaseTTL, turns lengthening off. A new master
	// grants every session MaxLeaseTTL at fail-over, since its predecessor
	// may have granted that much, so every replica of a cell must have the
	// same LeaseTTL and MaxLeaseTTL. At most MaxLeaseBound.
	MaxLeaseTTL time.Duration
	// KeepAliveTarget is the KeepAlive rate (calls a second) above which
	// leases lengthen, when MaxLeaseTTL allows (default
	// DefaultKeepAliveTarget).
	KeepAliveTarget int
	// DefaultLockDelay applies to handles that ask for none (default 1 min).
	DefaultLockDelay time.Duration
	// Logger receives the master's logs.
	Logger *slog.Logger
	// Clock is the master's time: leases, deadlines and timers all run
	// on it (default RealClock).
	Clock Clock
	// Admin is the cell admin principal: allowed everything on every node,
	// so broken ACLs can always be repaired (default AnonymousPrincipal).
	Admin string
	// Limits cap what one principal or session may hold (zero values take
	// the defaults of DefaultLimits).
	Limits Limits
	// Audit receives the audit lines, at Info: every permission denial
	// and every ACL change. It is a stream of its own so that they are
	// kept whatever level Logger keeps (default: Logger).
	Audit *slog.Logger
	// ProxyPrincipals are the principals trusted as proxies: only they
	// may make a call on behalf of another principal
	// (wire.Header.OnBehalfOf) or send a BatchKeepAlive. On a cell
	// without TLS every caller is AnonymousPrincipal, the admin, and is
	// trusted so too.
	ProxyPrincipals []string
	// Members are the bootstrap peers' addresses: the first master that
	// finds the replicated member table empty seeds it with them (for
	// the members of the Raft configuration) and the configured size.
	Members []fsm.MemberAddrs
}

// AnonymousPrincipal is the one principal of a cell without TLS: every
// caller is it, and it is the default admin (docs/spec.md#identity).
const AnonymousPrincipal = "anonymous"

// Caller is who a call comes from, as the transport authenticated it.
type Caller struct {
	// Principal is the identity of the client certificate, or
	// AnonymousPrincipal on a cell without TLS. Never empty.
	Principal string
	// Conn identifies the client connection (for per-connection limits);
	// 0 for a call a proxy made on another principal's behalf (the proxy
	// applies the caps on its clients' connections).
	Conn uint64
	// Proxy is the trusted proxy's principal when the call came through
	// one (wire.Header.OnBehalfOf): Principal is then its client's. The
	// audit lines name both, and every command the call proposes carries
	// it (fsm.Command.Proxy), so the replicated audit trail does too.
	Proxy string
}

// DefaultLeaseTTL is the session lease when none is configured.
const DefaultLeaseTTL = 12 * time.Second

// DefaultKeepAliveTarget is the KeepAlive rate leases lengthen to stay
// under by default: at about 150 µs of master CPU a call, under a third
// of a core.
const DefaultKeepAliveTarget = 2000

// MaxLeaseBound is the longest MaxLeaseTTL: a session whose client is gone
// keeps its locks, and a fail-over's recovery waits for it, at most this
// long (more when LeaseTTL itself is longer).
const MaxLeaseBound = 5 * time.Minute

// MaxLockDelay is the longest lock-delay a handle may ask for (docs/spec.md#lock-delay).
const MaxLockDelay = time.Minute

func (c *Config) setDefaults() {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	c.MaxLeaseTTL = min(max(c.MaxLeaseTTL, c.LeaseTTL), max(MaxLeaseBound, c.LeaseTTL))
	if c.KeepAliveTarget <= 0 {
		c.KeepAliveTarget = DefaultKeepAliveTarget
	}
	if c.DefaultLockDelay <= 0 {
		c.DefaultLockDelay = time.Minute
	}
	c.DefaultLockDelay = min(c.DefaultLockDelay, MaxLockDelay)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Audit == nil {
		c.Audit = c.Logger
	}
	if c.Admin == "" {
		c.Admin = AnonymousPrincipal
	}
	c.Limits.setDefaults()
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
}

// Server is the master side of the client protocol on one replica.
type Server struct {
	// parts are shared with every call in flight (see parts).
	*parts

	// mu guards the term of service: serving, epoch, stop, servingSince.
	mu      sync.Mutex
	serving bool
	epoch   uint64
	stop    chan struct{} // closed by Stop; a fresh one per term of service
	wg      sync.WaitGroup
	reads   *rations // each principal's read budget (rations.go)
	writes  *rations // each principal's write budget (rations.go)
	// servingSince is when this term of service began.
	servingSince time.Time
	delays       *lockDelays // lock-delay hand-offs (lockdelay.go)
	// fan is the term's handle-event fan-out (fanout.go), nil out of
	// service; fanLost counts the changes fan-outs could not keep.
	fan     *fanout
	fanLost atomic.Uint64
	// routes is the method table (methods.go), bound to this master's
	// endpoints.
	routes map[wire.Method]route
	// ends are the endpoints routes is bound to; follower reads call
	// their read handlers directly (follower.go).
	ends *endpoints
	// follower is the replica's freshness proof for follower reads, nil
	// when its Consensus offers none.
	follower Follower
	// applied is closed and replaced after every applied entry, so a
	// follower read that waits for its state to catch up wakes (follower.go).
	applied appliedSignal
}

// parts are the master's parts, each with a lock of its own (DESIGN.md
// "The master in parts"), with the configuration, the replicated state and
// consensus: what the master's loops use, and what New hands each
// endpoint its share of (endpoints.go). The term of service (Server.mu and
// what it guards) is not among them: Dispatch hands each call its epoch
// and stop channel when it admits it, so no handler reads or changes the
// Server's own fields.
//
// Their locks are taken in the order of lockorder.go.
type parts struct {
	cfg   Config
	cons  Consensus
	state *fsm.FSM
	log   *slog.Logger
	// w and r are how the state is changed and read, by the endpoints
	// and the master's loops alike (endpoints.go).
	w *writes
	r *reads

	// proof vouches for leadership before a lease is granted, a call
	// admitted or a read answered (leadership.go).
	proof *leadershipProof

	inv         *invalidator
	sess        *sessions
	reserved    reservations  // sessions and handles being created (limits.go)
	waits       acquireWaits  // blocked acquires (lockdelay.go)
	stats       masterStats   // operators' figures (stats.go)
	backups     backupStore   // backups being paged out (backup.go)
	auditRation *auditRation  // denial lines per principal (auditrate.go)
	mp          *memberPart   // membership changes (membership.go)
	asks        releaseAsks   // RequestRelease's rate limit (releasereq.go)
	idle        idleCalls     // sessions' calls, for closing idle ones (idle.go)
	polls       *subtreePolls // WatchSubtree calls in progress (subtree.go)
}

// New returns a master for the replica's state machine. It installs itself
// as the state's observer.
func New(cfg Config, cons Consensus, state *fsm.FSM) *Server {
	cfg.setDefaults()
	p := &parts{cfg: cfg, cons: cons, state: state, log: cfg.Logger,
		reserved: reservations{principal: map[string]int{}, conn: map[uint64]int{}, handles: map[uint64]int{}, principalHandles: map[string]int{}}}
	p.polls = newSubtreePolls()
	s := &Server{parts: p}
	s.delays = newLockDelays(cfg.Clock, &s.wg, s.grantAfterDelay)
	p.waits.clock, p.waits.wg = cfg.Clock, &s.wg
	s.proof = &leadershipProof{verify: cons.VerifyLeader, now: cfg.Clock.Now}
	p.sess = newSessions(cfg.Clock, cfg.LeaseTTL, raftAuthority{cons, s.proof}, &p.stats, cfg.Logger)
	p.sess.lengthen(cfg.MaxLeaseTTL, cfg.KeepAliveTarget)
	p.sess.budgetEvents(cfg.Limits.EventBytes, cfg.Limits.EventBytesPerPrincipal)
	p.sess.principalOf = func(id uint64) (principal string) {
		p.read(func(v fsm.View) { principal, _ = v.SessionPrincipal(id) })
		return principal
	}
	p.sess.known = p
	p.reserved.sess = p.sess
	p.inv = newInvalidator(cfg.Clock, p.sess, cfg.Admin, cfg.LeaseTTL, cfg.Logger)
	p.inv.limit(cfg.Limits.CacheRegistrations, cfg.Limits.CacheRegistrationsPerPrincipal)
	p.auditRation = newAuditRation(cfg.Clock.Now)
	s.reads = newRations(cfg.Limits.ReadBytesPerSecond, cfg.Clock)
	s.writes = newRations(cfg.Limits.WriteBytesPerSecond, cfg.Clock)
	p.w = &writes{clock: cfg.Clock, state: state, cons: cons, inv: p.inv, quota: quotaOf(cfg.Limits)}
	p.r = &reads{cell: cfg.Cell, state: state, proof: s.proof, bound: cfg.LeaseTTL / 2}
	members := newMembership()
	p.mp = &memberPart{cfg: &p.cfg, cons: cons, r: p.r, log: cfg.Logger, changes: &members}
	s.ends = newEndpoints(p)
	s.routes = routeTable(s.ends)
	if f, ok := cons.(Follower); ok {
		s.follower = f
	}
	state.SetObserver(s.observe)
	return s
}

// Serving reports whether this master serves calls, and at which epoch.
func (s *Server) Serving() (bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving, s.epoch
}

// Start makes this replica's master serve, after it won leadership: it
// takes a new epoch through Raft (which is also the post-election barrier:
// once it is applied, every earlier entry is), grants every session a full
// lease from now (no old master can have granted more, docs/spec.md#fail-over), and re-arms
// the hand-off of locks waiting out a lock-delay.
func (s *Server) Start(ctx context.Context) error {
	proposed := s.cfg.Clock.Now()
	res, err := s.cons.Apply(ctx, &fsm.Command{Time: s.now(), Payload: &fsm.EpochArgs{}})
	if err != nil {
		return fmt.Errorf("master: take epoch: %w", err)
	}
	s.proof.note(proposed) // committed: a quorum followed us after proposed
	var keyed bool
	s.read(func(v fsm.View) { keyed = len(v.CellKey()) > 0 })
	if !keyed {
		// The first master of a cell draws its secret sequencer key; the
		// state machine keeps the first one ever applied.
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("master: draw cell key: %w", err)
		}
		if _, err := s.cons.Apply(ctx, &fsm.Command{Time: s.now(), Payload: &fsm.CellKeyArgs{Key: key}}); err != nil {
			return fmt.Errorf("master: store cell key: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		return nil
	}
	s.epoch = res.Epoch
	s.stop = make(chan struct{})
	var ids []uint64
	var delays map[string]int64
	s.read(func(v fsm.View) { ids, delays = v.SessionIDs(), v.LockDelays() })
	recovering := s.sess.start(s.epoch, ids)
	s.idle.forgetAll() // every session's idle clock starts afresh with the term
	s.delays.start(s.stop)
	for path, until := range delays {
		s.delays.arm(path, until)
	}
	s.serving = true
	s.servingSince = s.cfg.Clock.Now()
	s.fan = newFanout(s, s.epoch, &s.fanLost)
	s.wg.Add(5)
	go s.expireLoop(s.stop)
	go s.ttlLoop(s.stop)
	go s.proveLoop(s.stop)
	go s.membershipLoop(s.stop)
	go s.fan.run(s.stop)
	s.log.Info("master serving", "epoch", s.epoch, "sessions", len(ids), "recovering", recovering)
	return nil
}

// Recovering reports whether the master is still in its KeepAlive-only
// fail-over phase, and how many sessions it waits for.
func (s *Server) Recovering() (bool, int) { return s.sess.recovery() }

// Stop ends service: parked KeepAlives and blocked acquires return
// NotMaster (clients follow to the new master), leases and timers are
// forgotten. It waits for the master's own goroutines.
func (s *Server) Stop() {
	s.mu.Lock()
	if !s.serving {
		s.mu.Unlock()
		return
	}
	s.serving = false
	s.fan = nil // its worker ends with the term; what it had not delivered dies with the queues
	close(s.stop)
	s.sess.stop()
	s.delays.stopAll()
	s.waits.stopAll()
	s.mu.Unlock()
	s.inv.reset()
	s.wg.Wait()
	s.sess.wait()
	s.log.Info("master stopped", "epoch", s.epoch)
}

func (s *parts) now() int64 { return s.cfg.Clock.Now().UnixNano() }

// observe runs on raft's apply goroutine for every applied entry with
// changes. It only flips in-memory state and never blocks, and its work is
// O(changes): handle events, which may concern any number of handles, are
// made by the term's fan-out (fanout.go), which it hands each change with
// its position. The sessions' lock is taken only for an entry that
// created or closed a session.
func (s *Server) observe(index uint64, changes []fsm.Change) {
	s.applied.fire()
	s.mu.Lock()
	serving, fan := s.serving, s.fan
	s.mu.Unlock()
	if serving { // followers deliver no events
		fan.record(changes)
	}
	var ended []uint64
	if sessionChanged(changes) {
		ended = s.sess.observe(nil, changes)
	}
	s.mu.Lock()
	for _, c := range changes {
		switch c.Kind {
		case fsm.ChangeLockGranted, fsm.ChangeWaitEnded:
			s.waits.wake(waitKey{c.Session, c.Handle, c.Seq})
		case fsm.ChangeLockDelay:
			if s.serving { // under mu: never armed after Stop's stopAll
				s.delays.arm(c.Path, c.Time)
			}
		}
	}
	s.mu.Unlock()
	for _, id := range ended { // no master lock held: the invalidator's comes first
		s.inv.forget(id)
	}
}

// checkServing admits a call: this master serves, and the caller expects
// its epoch (KeepAlive and CreateSession learn the epoch instead).
func (s *Server) checkServing(h *wire.Header, r route) (uint64, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return 0, nil, wire.ErrNotMaster
	}
	if proposes(h.Method) && s.unproven(s.servingSince) {
		// Raft cannot confirm this master leads (leadership.go): a call
		// that proposes a command could only wait for its timeout. Reads
		// and KeepAlives prove leadership themselves, each bounded.
		return 0, nil, wire.ErrNotMaster
	}
	if recovering, waiting := s.sess.recovery(); recovering && !r.inRecovery {
		return s.epoch, nil, wire.Errorf(wire.CodeUnavailable,
			"master of epoch %d is recovering from a fail-over: waiting for %d session(s) to acknowledge", s.epoch, waiting)
	}
	if !r.anyEpoch && h.Epoch != s.epoch {
		return s.epoch, nil, wire.Errorf(wire.CodeBadEpoch, "call for epoch %d, master is at epoch %d", h.Epoch, s.epoch)
	}
	return s.epoch, s.stop, nil
}

// Dispatch admits one call, decodes its body and runs its handler, as the
// method table (methods.go) says. It returns the response value and, on
// failure, a *wire.Error; the epoch is the master's, for the caller's
// Status.
func (s *Server) Dispatch(ctx context.Context, caller Caller, h *wire.Header, body []byte) (any, uint64, error) {
	if h.Method == wire.MethodKeepAlive {
		return s.keepAliveWaiting(ctx, caller, h, body)
	}
	r := s.routes[h.Method]
	epoch, stop, err := s.checkServing(h, r)
	if err != nil {
		return nil, epoch, err
	}
	if caller, err = s.Behalf(caller, h); err != nil {
		return nil, epoch, err
	}
	c := &call{caller: caller, admin: caller.Principal == s.cfg.Admin, h: h, epoch: epoch, stop: stop}
	if err := s.checkSessionOwner(c, r); err != nil {
		if wire.CodeOf(err) == wire.CodePermission { // not the moved session's old process
			s.cfg.Audit.Info("audit", "principal", caller.Principal, "op", h.Method.String(), "session", h.Session,
				"result", wire.CodePermission.String())
		}
		return nil, epoch, err
	}
	if s.cfg.Limits.IdleSessionTimeout > 0 && h.Session != 0 && !r.newSession {
		// A call in progress keeps its session from being idle, however
		// long it takes (idle.go).
		e, draining := s.idle.begin(h.Session, s.cfg.Clock.Now())
		if draining {
			s.sess.unmarkIdle(h.Session) // in use again: its lease runs on
		}
		defer func() { s.idle.end(e, s.cfg.Clock.Now()) }()
	}
	var ration *rations // the caller's read or write budget, if it has one
	if caller.Principal != s.cfg.Admin {
		switch {
		case r.rationed:
			ration = s.reads
		case proposes(h.Method):
			ration = s.writes
		}
	}
	switch ration {
	case s.reads:
		err = ration.wait(ctx, caller.Principal)
	case s.writes:
		err = ration.take(ctx, caller.Principal, len(body)+writeCallCost)
	}
	if err != nil {
		return nil, epoch, toWire(err)
	}
	var resp any
	switch {
	case r.serve == nil:
		err = wire.Errorf(wire.CodeBadRequest, "unknown method %d", h.Method)
	case r.admit != nil:
		err = r.admit(c)
	}
	if err == nil {
		resp, err = r.serve(ctx, c, body)
	}
	if ration == s.reads {
		ration.charge(caller.Principal, replyBytes(resp))
	}
	err = s.asIdleClosed(h.Session, toWire(err))
	s.audit(c, err)
	return resp, epoch, err
}

// proposes reports whether a call of method m proposes a Raft command.
func proposes(m wire.Method) bool {
	return m.Mutating() || m == wire.MethodCreateSession || m == wire.MethodCloseSession || m == wire.MethodResumeSession
}

type sessionEvent struct {
	session uint64
	ev      wire.Event
}

// eventOf maps a state change to the event kind and mask bit handles ask
// for, if any.
var eventOf = map[fsm.ChangeKind]struct {
	kind uint8
	mask uint32
}{
	fsm.ChangeContents:     {wire.EventContents, wire.MaskContentsModified},
	fsm.ChangeChildAdded:   {wire.EventChildAdded, wire.MaskChildAdded},
	fsm.ChangeChildRemoved: {wire.EventChildRemoved, wire.MaskChildRemoved},
	fsm.ChangeDeleted:      {wire.EventHandleInvalid, wire.MaskHandleInvalid},
	fsm.ChangeLockGranted:  {wire.EventLockAcquired, wire.MaskLockAcquired},
	fsm.ChangeLockConflict: {wire.EventLockConflict, wire.MaskConflictingLock},
}

// sessionChanged reports whether changes created or closed a session.
func sessionChanged(changes []fsm.Change) bool {
	for i := range changes {
		if k := changes[i].Kind; k == fsm.ChangeSessionCreated || k == fsm.ChangeSessionClosed || k == fsm.ChangeSessionResumed {
			return true
		}
	}
	return false
}

// placeEvent fills in ev's position: the instance and generations of the
// node ev's handle has open, when that node still exists.
func placeEvent(v fsm.View, session uint64, ev *wire.Event) {
	if hv, err := v.LookupHandle(session, ev.Handle); err == nil {
		ev.Pos = &wire.EventPos{Instance: hv.Stat.Instance, ContentGen: hv.Stat.ContentGen, LockGen: hv.Stat.LockGen}
	}
}
