package admin

import (
	"context"
	"time"

	"lockcell/client/internal/link"
	"lockcell/wire"
)

// transferPoll is how often TransferLeadership asks whether the new
// master serves.
const transferPoll = 50 * time.Millisecond

// LeadershipTransfer is the outcome of TransferLeadership.
type LeadershipTransfer struct {
	// From is the member that was master when the call arrived.
	From string `json:"from"`
	// To is the member that serves as master now.
	To string `json:"to"`
	// ToClientAddr is To's client address, when known.
	ToClientAddr string `json:"to_client_addr,omitempty"`
	// Took is how long the hand-over took, from the call until the new
	// master served.
	Took time.Duration `json:"-"`
}

// TransferLeadership asks the master to hand its leadership to the voter
// id, or with id "" to the most up-to-date other voter, and returns once a
// new master serves: it answered a membership call, so it runs its term
// and admits calls. Only the cell's admin may ask (client.ErrPermission). The
// master refuses, changing nothing: a member it does not know
// (client.ErrNotFound); a non-voter, itself, a voter it has not heard from lately
// or, for "", no other healthy voter (client.ErrBadRequest).
// ctx bounds the whole wait; a transfer may still complete after ctx
// ends.
func (a *Admin) TransferLeadership(ctx context.Context, id string) (LeadershipTransfer, error) {
	op := "transfer leadership"
	if id != "" {
		if err := checkMember(id, "", ""); err != nil {
			return LeadershipTransfer{}, opErr(op, id, err)
		}
		op += " to " + id
	}
	start := time.Now()
	// The master now, named in the request: the old master's connection
	// may close under the call as it steps down, and the retry, landing
	// on the new master, must not hand over again or refuse.
	before, err := a.Replicas(ctx)
	if err != nil {
		return LeadershipTransfer{}, opErr(op, "", err)
	}
	from := ""
	for _, r := range before.Replicas {
		if r.Master {
			from = r.ID
		}
	}
	var resp wire.ReplicaTransferLeadershipResponse
	if err := link.Call(a.c, ctx, wire.MethodReplicaTransferLeadership, false,
		&wire.ReplicaTransferLeadershipRequest{ID: id, From: from}, &resp); err != nil {
		return LeadershipTransfer{}, opErr(op, "", err)
	}
	out := LeadershipTransfer{From: resp.From, To: resp.To, ToClientAddr: resp.ToClientAddr}
	if out.ToClientAddr != "" {
		link.Learn(a.c, []string{out.ToClientAddr})
	}
	// The old master answered once it heard of its successor; the
	// successor serves after its epoch entry applies. A membership list
	// is answered only by a serving master, and names it.
	t := time.NewTicker(transferPoll)
	defer t.Stop()
	for {
		list, err := a.Replicas(ctx)
		if err == nil {
			for _, r := range list.Replicas {
				if r.Master && r.ID != resp.From {
					out.To, out.ToClientAddr = r.ID, r.ClientAddr
					out.Took = time.Since(start)
					return out, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return out, opErr(op, "", err)
		case <-t.C:
		}
	}
}
