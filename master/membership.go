package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Membership changes. The master changes the Raft configuration on the
// admin's behalf, one change at a time, under three rules:
//
//   - a new member joins as a non-voter and votes only once its log has
//     caught up (the promoter, below), so adding a member never makes a
//     quorum wait on a replica that is still copying the log;
//   - no change may leave fewer voters than a majority of the cell's
//     configured size (the bootstrap voter count, in the member table);
//   - a removal or promotion must leave the healthy voters (those the
//     master heard from within healthyWithin) a quorum of the new
//     configuration, so a change never strands the cell.
//
// Removing the master itself first hands leadership to another voter and
// answers NotMaster: the client retries at the new master, which removes
// the old one like any other member.

// membershipOps is what membership changes need of the replica beyond
// Consensus (*replica.Replica provides it).
type membershipOps interface {
	ID() string
	Configuration() (fsm.Configuration, error)
	AddNonvoter(ctx context.Context, id, raftAddr string, prevIndex uint64) (uint64, error)
	Promote(ctx context.Context, id string, prevIndex uint64) (uint64, error)
	Remove(ctx context.Context, id string, prevIndex uint64) (uint64, error)
	TransferLeadership(ctx context.Context) (string, error)
	Progress() map[string]fsm.PeerProgress
	Status() fsm.Status
	HeartbeatTimeout() time.Duration
}

// membership is the master's membership state: a one-slot semaphore that
// serialises changes (the promoter's and the handlers'), and the
// promoter's wake-up.
type membership struct {
	sem  chan struct{}
	kick chan struct{}
}

func newMembership() membership {
	return membership{sem: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
}

// maxMemberIDLen and maxMemberAddrLen bound what a request may name.
const (
	maxMemberIDLen   = 128
	maxMemberAddrLen = 256
)

// changeTimeout bounds one Raft configuration change.
const changeTimeout = 10 * time.Second

func (s *memberPart) ops() (membershipOps, error) {
	ops, ok := s.cons.(membershipOps)
	if !ok {
		return nil, wire.Errorf(wire.CodeInternal, "this master's replica cannot change the membership")
	}
	return ops, nil
}

// healthyWithin is how recently the master must have heard from a member
// for it to count as healthy: two heartbeat timeouts, which is some twenty
// heartbeats, so a busy machine's late heartbeat does not make a live
// member look dead, while a dead one is seen within a couple of seconds.
func healthyWithin(ops membershipOps) time.Duration { return 2 * ops.HeartbeatTimeout() }

// lock takes the change semaphore, or gives up with ctx or the master's
// stop.
func (s *memberPart) lockMembers(ctx context.Context, stop <-chan struct{}) error {
	select {
	case s.changes.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return toWire(ctx.Err())
	case <-stop:
		return wire.ErrNotMaster
	}
}

func (s *memberPart) unlockMembers() { <-s.changes.sem }

// membershipAdmit admits a membership call (ReplicaAdd, ReplicaRemove,
// ReplicaList; session-less) before its body is read: changes are the
// admin's alone; the read-only ReplicaList is also open to the monitoring
// role (monitor.go). Only on a replica that can change its membership.
func (e *adminEndpoint) membershipAdmit(c *call) error {
	switch {
	case c.h.Method == wire.MethodReplicaList && !e.members.mayMonitor(c.caller.Principal):
		return e.members.monitorDenied(c.caller.Principal, "list the replicas")
	case c.h.Method != wire.MethodReplicaList && !c.isAdmin():
		return wire.Errorf(wire.CodePermission, "only the cell admin may change the replicas (%s is not)", c.caller.Principal)
	}
	_, err := e.members.ops()
	return err
}

func (e *adminEndpoint) replicaAddCall(ctx context.Context, c *call, req *wire.ReplicaAddRequest) (*wire.ReplicaListResponse, error) {
	ops, err := e.members.ops()
	if err != nil {
		return nil, err
	}
	resp, err := e.replicaAdd(ctx, c, ops, req)
	e.auditChange(c, err, "id", req.ID, "client_addr", req.ClientAddr, "raft_addr", req.RaftAddr, "read_replica", req.ReadReplica)
	return resp, err
}

func (e *adminEndpoint) replicaRemoveCall(ctx context.Context, c *call, req *wire.ReplicaRemoveRequest) (*wire.ReplicaListResponse, error) {
	ops, err := e.members.ops()
	if err != nil {
		return nil, err
	}
	resp, err := e.replicaRemove(ctx, c, ops, req)
	e.auditChange(c, err, "id", req.ID)
	return resp, err
}

func (e *adminEndpoint) replicaList(_ context.Context, c *call, _ *wire.ReplicaListRequest) (*wire.ReplicaListResponse, error) {
	ops, err := e.members.ops()
	if err != nil {
		return nil, err
	}
	return e.members.listMembers(ops)
}

// auditChange writes one audit line per membership change asked for,
// done or refused (denials are the dispatcher's to log).
func (e *adminEndpoint) auditChange(c *call, err error, kv ...any) {
	result := "ok"
	if err != nil {
		we := toWire(err).(*wire.Error)
		if we.Code == wire.CodePermission {
			return
		}
		result = we.Code.String() + ": " + we.Msg
	}
	args := append([]any{"principal", c.caller.Principal, "op", c.h.Method.String()}, kv...)
	e.cfg.Audit.Info("audit", append(args, "result", result)...)
}

// validMemberID applies the rule the client library applies too: a
// non-empty id of printable ASCII without spaces, ',' or '=' (the flag
// syntax of --peers uses them).
func validMemberID(id string) error {
	if id == "" || len(id) > maxMemberIDLen ||
		strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' || r == ',' || r == '=' }) {
		return wire.Errorf(wire.CodeBadRequest,
			"replica id %.140q: want 1 to %d printable characters without spaces, ',' or '='", id, maxMemberIDLen)
	}
	return nil
}

// validMemberAddr wants host:port with a host and a port number.
func validMemberAddr(what, addr string) error {
	if len(addr) > maxMemberAddrLen {
		return wire.Errorf(wire.CodeBadRequest, "%s of %d bytes: at most %d", what, len(addr), maxMemberAddrLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		var n uint64
		n, err = strconv.ParseUint(port, 10, 16)
		if err == nil && (host == "" || n == 0 || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r > '~' })) {
			err = errors.New("no host, or port 0")
		}
	}
	if err != nil {
		return wire.Errorf(wire.CodeBadRequest, "%s %q: want host:port with a port number", what, addr)
	}
	return nil
}

// beginChange starts one membership change: it takes the change
// semaphore, bounds the change by changeTimeout, seeds the member table if
// it is empty and reads the configuration the change is made against.
// done releases what it took; on an error nothing is held.
func (e *adminEndpoint) beginChange(ctx context.Context, c *call, ops membershipOps) (context.Context, fsm.Configuration, func(), error) {
	if err := e.members.lockMembers(ctx, c.stop); err != nil {
		return nil, fsm.Configuration{}, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, changeTimeout)
	done := func() {
		cancel()
		e.members.unlockMembers()
	}
	if err := e.members.seedMembers(ctx, ops); err != nil {
		done()
		return nil, fsm.Configuration{}, nil, err
	}
	cfg, err := ops.Configuration()
	if err != nil {
		done()
		return nil, fsm.Configuration{}, nil, err
	}
	return ctx, cfg, done, nil
}

func (e *adminEndpoint) replicaAdd(ctx context.Context, c *call, ops membershipOps, req *wire.ReplicaAddRequest) (*wire.ReplicaListResponse, error) {
	if err := validMemberID(req.ID); err != nil {
		return nil, err
	}
	if err := validMemberAddr("client address", req.ClientAddr); err != nil {
		return nil, err
	}
	if err := validMemberAddr("Raft address", req.RaftAddr); err != nil {
		return nil, err
	}
	ctx, cfg, done, err := e.beginChange(ctx, c, ops)
	if err != nil {
		return nil, err
	}
	defer done()
	table := e.members.memberTable()
	if sv, ok := cfg.Find(req.ID); ok {
		m, known := table[req.ID]
		if req.ReadReplica && sv.Voter {
			return nil, wire.Errorf(wire.CodeBadRequest, "replica %s is a voter: remove it first to add it as a read replica", req.ID)
		}
		if known && e.members.isReadReplica(req.ID) != req.ReadReplica {
			return nil, wire.Errorf(wire.CodeBadRequest,
				"replica %s is a member already, %s: remove it first to add it %s", req.ID,
				roleName(!req.ReadReplica), roleName(req.ReadReplica))
		}
		if sv.RaftAddr != req.RaftAddr || known && m.ClientAddr != req.ClientAddr {
			return nil, wire.Errorf(wire.CodeBadRequest,
				"replica %s is a member already, at client address %q and Raft address %q: remove it first to add it at other addresses",
				req.ID, m.ClientAddr, sv.RaftAddr)
		}
		if known {
			return e.members.listMembers(ops) // there already: nothing changes
		}
	}
	for _, sv := range cfg.Servers {
		switch {
		case sv.ID == req.ID:
		case sv.RaftAddr == req.RaftAddr:
			return nil, wire.Errorf(wire.CodeBadRequest, "member %s already uses Raft address %s", sv.ID, req.RaftAddr)
		case table[sv.ID].ClientAddr == req.ClientAddr:
			return nil, wire.Errorf(wire.CodeBadRequest, "member %s already uses client address %s", sv.ID, req.ClientAddr)
		}
	}
	// The table first: once Raft lists the member, every replica can name
	// its client address.
	m := fsm.MemberAddrs{ID: req.ID, ClientAddr: req.ClientAddr, RaftAddr: req.RaftAddr}
	var put fsm.Payload = &fsm.MemberPutArgs{Members: []fsm.MemberAddrs{m}}
	if req.ReadReplica {
		// The role with the addresses, in one entry, before Raft lists
		// the member: no master ever sees it unmarked and promotes it.
		put = &fsm.ReadReplicaPutArgs{Members: []fsm.MemberAddrs{m}}
	}
	if _, err := e.w.cons.Apply(ctx, &fsm.Command{Time: e.w.now(), Principal: c.caller.Principal, Admin: c.isAdmin(),
		Proxy: c.caller.Proxy, Payload: put}); err != nil {
		return nil, err
	}
	if _, ok := cfg.Find(req.ID); !ok {
		if _, err := ops.AddNonvoter(ctx, req.ID, req.RaftAddr, cfg.Index); err != nil {
			return nil, changeErr(err)
		}
		if req.ReadReplica {
			e.cfg.Logger.Info("read replica added: a non-voter never promoted", "id", req.ID,
				"client_addr", req.ClientAddr, "raft_addr", req.RaftAddr)
		} else {
			e.cfg.Logger.Info("member added as a non-voter; it is promoted once caught up", "id", req.ID,
				"client_addr", req.ClientAddr, "raft_addr", req.RaftAddr)
		}
	}
	select {
	case e.members.changes.kick <- struct{}{}:
	default:
	}
	return e.members.listMembers(ops)
}

func (e *adminEndpoint) replicaRemove(ctx context.Context, c *call, ops membershipOps, req *wire.ReplicaRemoveRequest) (*wire.ReplicaListResponse, error) {
	if err := validMemberID(req.ID); err != nil {
		return nil, err
	}
	ctx, cfg, done, err := e.beginChange(ctx, c, ops)
	if err != nil {
		return nil, err
	}
	defer done()
	sv, ok := cfg.Find(req.ID)
	if ok && sv.Voter {
		if err := e.members.checkVotersPatiently(ctx, ops, cfg, req.ID); err != nil {
			return nil, err
		}
	}
	if ok && req.ID == ops.ID() {
		// Raft lets a leader remove itself, but the cell then waits out an
		// election timeout with no master. Hand over first; the client
		// retries at the new master, which removes this replica.
		to, err := ops.TransferLeadership(ctx)
		if err != nil {
			return nil, wire.Errorf(wire.CodeUnavailable,
				"replica %s is the master and could not hand its leadership over before its removal: %v", req.ID, err)
		}
		return nil, wire.Errorf(wire.CodeNotMaster,
			"replica %s was the master: it handed leadership to %s, which removes it when asked again", req.ID, to)
	}
	if ok {
		if _, err := ops.Remove(ctx, req.ID, cfg.Index); err != nil {
			return nil, changeErr(err)
		}
		e.cfg.Logger.Info("member removed", "id", req.ID, "raft_addr", sv.RaftAddr, "voter", sv.Voter)
	}
	if _, known := e.members.memberTable()[req.ID]; known {
		if _, err := e.w.cons.Apply(ctx, &fsm.Command{Time: e.w.now(), Principal: c.caller.Principal, Admin: c.isAdmin(),
			Proxy: c.caller.Proxy, Payload: &fsm.MemberRemoveArgs{Members: []fsm.MemberAddrs{{ID: req.ID}}}}); err != nil {
			return nil, err
		}
	}
	return e.members.listMembers(ops)
}

// changeErr types a failed Raft configuration change.
func changeErr(err error) error {
	if errors.Is(err, fsm.ErrConfigurationChanged) {
		return wire.Errorf(wire.CodeUnavailable, "another membership change committed first; nothing changed, retry: %v", err)
	}
	return err
}

// checkVotersPatiently is checkVoters for a removal, which gives the
// members up to one health window to be heard from before it refuses. A
// master that has just taken over (the usual case: removing the old master
// hands leadership over and the client asks the new one) has not yet had a
// heartbeat answered by every member, and must not refuse for members it
// simply has not contacted yet; a member that is really down is still
// refused, a health window later.
func (s *memberPart) checkVotersPatiently(ctx context.Context, ops membershipOps, cfg fsm.Configuration, id string) error {
	deadline := time.Now().Add(healthyWithin(ops))
	for {
		err, forHealth := s.voterCheck(ops, cfg, id, false)
		if err == nil || !forHealth || !time.Now().Before(deadline) {
			return err
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// checkVoters applies the refusal rules to the configuration cfg would
// become with id removed (or, with promote, made a voter).
func (s *memberPart) checkVoters(ops membershipOps, cfg fsm.Configuration, id string, promote bool) error {
	err, _ := s.voterCheck(ops, cfg, id, promote)
	return err
}

// voterCheck is checkVoters, also saying whether a refusal is for want of
// healthy voters (which time may mend) rather than of voters.
func (s *memberPart) voterCheck(ops membershipOps, cfg fsm.Configuration, id string, promote bool) (err error, forHealth bool) {
	voters := map[string]bool{}
	for _, sv := range cfg.Servers {
		if sv.Voter {
			voters[sv.ID] = true
		}
	}
	if promote {
		voters[id] = true
	} else {
		delete(voters, id)
	}
	_, size := s.memberTableSized(cfg)
	n := len(voters)
	if need := size/2 + 1; n < need {
		return wire.Errorf(wire.CodeBadRequest,
			"removing %s would leave %d voters, fewer than a majority (%d) of the cell's configured size %d", id, n, need, size), false
	}
	healthy := 0
	prog, now, within := ops.Progress(), time.Now(), healthyWithin(ops)
	for v := range voters {
		if s.healthy(ops, v, prog, now, within) {
			healthy++
		}
	}
	if quorum := n/2 + 1; healthy < quorum {
		verb := "removing"
		if promote {
			verb = "promoting"
		}
		return wire.Errorf(wire.CodeBadRequest,
			"%s %s would leave %d healthy voters of %d, short of their quorum of %d: bring members back or add new ones first",
			verb, id, healthy, n, quorum), true
	}
	return nil, false
}

// healthy reports whether the master heard from member id lately (the
// master itself is healthy).
func (s *memberPart) healthy(ops membershipOps, id string, prog map[string]fsm.PeerProgress, now time.Time, within time.Duration) bool {
	if id == ops.ID() {
		return true
	}
	pp, ok := prog[id]
	return ok && !pp.LastContact.IsZero() && now.Sub(pp.LastContact) <= within
}

func (s *memberPart) memberTable() map[string]fsm.MemberAddrs {
	table, _ := s.memberTableSized(fsm.Configuration{})
	return table
}

// memberTableSized reads the member table by id and the cell's
// configured size in one view; until the table is seeded the size is
// cfg's voter count.
func (s *memberPart) memberTableSized(cfg fsm.Configuration) (map[string]fsm.MemberAddrs, int) {
	var ms []fsm.MemberAddrs
	var size int
	s.read(func(v fsm.View) { ms, size = v.MemberTable() })
	out := make(map[string]fsm.MemberAddrs, len(ms))
	for _, m := range ms {
		out[m.ID] = m
	}
	if size == 0 {
		size = cfg.Voters()
	}
	return out, size
}

// listMembers describes the Raft configuration joined with the member
// table, with the master's view of each member's health.
func (s *memberPart) listMembers(ops membershipOps) (*wire.ReplicaListResponse, error) {
	cfg, err := ops.Configuration()
	if err != nil {
		return nil, err
	}
	table, size := s.memberTableSized(cfg)
	out := &wire.ReplicaListResponse{ConfiguredSize: size, Index: cfg.Index}
	prog, now, within := ops.Progress(), time.Now(), healthyWithin(ops)
	for _, sv := range cfg.Servers {
		rs := wire.ReplicaStatus{ID: sv.ID, ClientAddr: table[sv.ID].ClientAddr, RaftAddr: sv.RaftAddr,
			Master: sv.ID == ops.ID(), Suffrage: wire.SuffrageNonvoter}
		if rs.ClientAddr == "" {
			rs.ClientAddr = s.bootstrapAddr(sv.ID)
		}
		if sv.Voter {
			rs.Suffrage = wire.SuffrageVoter
		}
		if s.isReadReplica(sv.ID) {
			rs.Role = wire.RoleReadReplica
		}
		rs.Healthy = s.healthy(ops, sv.ID, prog, now, within)
		if pp, ok := prog[sv.ID]; ok && !rs.Master && !pp.LastContact.IsZero() {
			rs.LastContactMillis = max(now.Sub(pp.LastContact).Milliseconds(), 1)
			rs.MatchIndex = pp.Match
		}
		out.Replicas = append(out.Replicas, rs)
	}
	return out, nil
}

// bootstrapAddr is the client address the bootstrap configuration gave
// id, until the member table is seeded.
func (s *memberPart) bootstrapAddr(id string) string {
	for _, m := range s.cfg.Members {
		if m.ID == id {
			return m.ClientAddr
		}
	}
	return ""
}

// seedMembers fills an empty member table from the Raft configuration,
// with the client addresses the bootstrap peers (Config.Members) give,
// and records the cell's configured size: the voter count now. The state
// machine keeps the first seed ever applied, so two masters racing (or a
// restored cell, whose backup carries no table) cannot overwrite a table.
func (s *memberPart) seedMembers(ctx context.Context, ops membershipOps) error {
	var ms []fsm.MemberAddrs
	var size int
	s.read(func(v fsm.View) { ms, size = v.MemberTable() })
	if len(ms) > 0 || size > 0 {
		return nil
	}
	cfg, err := ops.Configuration()
	if err != nil {
		return err
	}
	if cfg.Voters() == 0 {
		return nil
	}
	seed := &fsm.MembersSeedArgs{ConfiguredSize: cfg.Voters()}
	for _, sv := range cfg.Servers {
		seed.Members = append(seed.Members, fsm.MemberAddrs{ID: sv.ID, ClientAddr: s.bootstrapAddr(sv.ID), RaftAddr: sv.RaftAddr})
	}
	if _, err := s.cons.Apply(ctx, &fsm.Command{Time: s.now(), Payload: seed}); err != nil {
		return fmt.Errorf("master: seed the member table: %w", err)
	}
	s.log.Info("member table seeded", "members", len(seed.Members), "configured_size", seed.ConfiguredSize)
	return nil
}

// membershipLoop runs while the master serves: it seeds the member table
// once, then promotes each non-voter whose log has caught up, on every
// add and every half heartbeat timeout (a fail-over's new master resumes
// the promotions its predecessor did not finish). It ends with stop.
func (s *Server) membershipLoop(stop <-chan struct{}) {
	defer s.wg.Done()
	ops, ok := s.cons.(membershipOps)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // ends with the loop: cancel closes ctx
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(max(ops.HeartbeatTimeout()/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if err := s.mp.lockMembers(ctx, stop); err != nil {
			return
		}
		cctx, ccancel := context.WithTimeout(ctx, changeTimeout)
		err := s.mp.seedMembers(cctx, ops)
		if err == nil {
			err = s.mp.promoteCaughtUp(cctx, ops)
		}
		ccancel()
		s.mp.unlockMembers()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("membership upkeep failed; retrying", "err", err)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-s.mp.changes.kick:
		}
	}
}

// promoteCaughtUp promotes at most one non-voter of the member table: one
// whose log holds every entry committed as of this check and that the
// master heard from lately, and whose promotion the refusal rules allow.
func (s *memberPart) promoteCaughtUp(ctx context.Context, ops membershipOps) error {
	cfg, err := ops.Configuration()
	if err != nil {
		return err
	}
	commit := ops.Status().CommitIndex
	table := s.memberTable()
	prog, now, within := ops.Progress(), time.Now(), healthyWithin(ops)
	for _, sv := range cfg.Servers {
		if _, known := table[sv.ID]; sv.Voter || !known || s.isReadReplica(sv.ID) {
			continue // a read replica never votes
		}
		pp := prog[sv.ID]
		if pp.Match < commit || !s.healthy(ops, sv.ID, prog, now, within) {
			continue
		}
		if err := s.checkVoters(ops, cfg, sv.ID, true); err != nil {
			s.log.Debug("not promoting a caught-up member yet", "id", sv.ID, "err", err)
			continue
		}
		if _, err := ops.Promote(ctx, sv.ID, cfg.Index); err != nil {
			return fmt.Errorf("promote %s: %w", sv.ID, err)
		}
		s.log.Info("member caught up and promoted to voter", "id", sv.ID, "match", pp.Match, "commit", commit)
		s.cfg.Audit.Info("audit", "principal", "(master)", "op", "ReplicaPromote", "id", sv.ID, "result", "ok")
		return nil
	}
	return nil
}

// isReadReplica reports whether member id has the read-replica role in
// the replicated member table: a non-voter the master never promotes
// (fsm/readreplica.go).
func (s *memberPart) isReadReplica(id string) (rr bool) {
	s.read(func(v fsm.View) { rr = v.IsReadReplica(id) })
	return rr
}

// roleName names a member's role for an error.
func roleName(readReplica bool) string {
	if readReplica {
		return "as a read replica"
	}
	return "as a voter"
}
