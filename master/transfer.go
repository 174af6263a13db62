package master

import (
	"context"
	"fmt"
	"time"

	"lockcell/wire"
)

// Leadership transfer on the admin's request: the master hands Raft
// leadership to a voter the admin names (to move the master off a machine
// before its maintenance, or onto a chosen one), or to the most
// up-to-date other voter. It is a membership call: the admin's alone,
// session-less, serialised with the configuration changes, and audited.

func init() {
	// Here rather than in methods.go's table, so this method's wiring
	// lives in one file.
	routes[wire.MethodReplicaTransferLeadership] = route{serve: decoded((*call).replicaTransferCall),
		anyEpoch: true, inRecovery: true, admit: (*call).membershipAdmit}
}

// transferOps is what a transfer to a named voter needs of the replica
// beyond membershipOps (*replica.Replica provides it).
type transferOps interface {
	TransferLeadershipTo(ctx context.Context, id string) error
	Leader() (id, raftAddr string)
}

func (c *call) replicaTransferCall(ctx context.Context, req *wire.ReplicaTransferLeadershipRequest) (*wire.ReplicaTransferLeadershipResponse, error) {
	ops, err := c.ops()
	if err != nil {
		return nil, err
	}
	if resp := c.handedOver(ops, req); resp != nil {
		return resp, nil // a retry: nothing changes, so nothing to audit
	}
	resp, err := c.transferLeadership(ctx, ops, req)
	to := ""
	if resp != nil {
		to = resp.To
	}
	c.auditChange(err, "id", req.ID, "from", ops.ID(), "to", to)
	return resp, err
}

// handedOver answers a transfer away from req.From that has happened
// already (this master is not From, and is the voter asked for or none
// was named), or returns nil.
func (c *call) handedOver(ops membershipOps, req *wire.ReplicaTransferLeadershipRequest) *wire.ReplicaTransferLeadershipResponse {
	self := ops.ID()
	if req.From == "" || req.From == self || req.ID != "" && req.ID != self {
		return nil
	}
	return &wire.ReplicaTransferLeadershipResponse{From: req.From, To: self, ToClientAddr: c.clientAddrOf(self)}
}

// clientAddrOf is member id's client address, "" when unknown.
func (c *call) clientAddrOf(id string) string {
	if addr := c.memberTable()[id].ClientAddr; addr != "" {
		return addr
	}
	return c.bootstrapAddr(id)
}

// transferLeadership refuses a target that could not take over (not a
// member: NotFound; not a voter, this master itself, or not heard from
// lately: BadRequest) before anything changes, then hands over (without
// an ID, to the healthy voter with the highest proven log index) and waits
// until this replica has heard of its successor.
func (c *call) transferLeadership(ctx context.Context, ops membershipOps, req *wire.ReplicaTransferLeadershipRequest) (*wire.ReplicaTransferLeadershipResponse, error) {
	if req.ID != "" {
		if err := validMemberID(req.ID); err != nil {
			return nil, err
		}
	}
	ctx, cfg, done, err := c.beginChange(ctx, ops)
	if err != nil {
		return nil, err
	}
	defer done()
	self := ops.ID()
	prog, now, within := ops.Progress(), time.Now(), healthyWithin(ops)
	if req.ID != "" {
		sv, ok := cfg.Find(req.ID)
		switch {
		case !ok:
			return nil, wire.Errorf(wire.CodeNotFound, "replica %s is not a member of the cell (`lockcell replica list` names them)", req.ID)
		case req.ID == self:
			return nil, wire.Errorf(wire.CodeBadRequest, "replica %s is the master already: name another voter", req.ID)
		case !sv.Voter:
			return nil, wire.Errorf(wire.CodeBadRequest,
				"replica %s is a non-voter: it cannot lead until the master promotes it (once it has caught up)", req.ID)
		case !c.healthy(ops, req.ID, prog, now, within):
			// BadRequest, not Unavailable: the client would retry an
			// Unavailable until its timeout, for a member that is down.
			return nil, wire.Errorf(wire.CodeBadRequest,
				"replica %s has not been heard from within %v: it could not take over; bring it back or name another voter", req.ID, within)
		}
	}
	target := req.ID
	if target == "" {
		// The most up-to-date voter the master heard from lately, chosen
		// here rather than by raft, whose pick may be a voter that is down.
		var best uint64
		for _, sv := range cfg.Servers {
			if !sv.Voter || sv.ID == self || !c.healthy(ops, sv.ID, prog, now, within) {
				continue
			}
			if m := prog[sv.ID].Match; target == "" || m > best || m == best && sv.ID < target {
				target, best = sv.ID, m
			}
		}
		if target == "" {
			return nil, wire.Errorf(wire.CodeBadRequest, "no other healthy voter to hand leadership to")
		}
	}

	to, err := c.transferTo(ctx, ops, target)
	if err != nil {
		// Unavailable: the client retries, and a retry that finds the
		// hand-over done after all is answered so (handedOver).
		return nil, wire.Errorf(wire.CodeUnavailable, "leadership transfer from %s to %s: %v", self, target, err)
	}
	c.log.Info("leadership handed over on the admin's request", "from", self, "to", to, "asked_for", target)
	return &wire.ReplicaTransferLeadershipResponse{From: self, To: to, ToClientAddr: c.clientAddrOf(to)}, nil
}

// transferTo hands leadership to the voter id and waits until this
// replica hears of a leader other than itself (id, unless another voter
// won the election the transfer started), for at most ctx.
func (c *call) transferTo(ctx context.Context, ops membershipOps, id string) (string, error) {
	tops, ok := ops.(transferOps)
	if !ok {
		return "", fmt.Errorf("this master's replica cannot hand leadership to a named voter")
	}
	if err := tops.TransferLeadershipTo(ctx, id); err != nil {
		return "", err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if leader, _ := tops.Leader(); leader != "" && leader != ops.ID() {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("stepped down, but no new leader heard of: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
