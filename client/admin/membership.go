package admin

import (
	"context"
	"net"
	"strings"
	"time"

	"lockcell/client/internal/link"
	"lockcell/wire"
)

// Suffrage values of ReplicaStatus.Suffrage: a voter counts toward the
// cell's quorum; a non-voter receives the log (a new member catching up)
// but does not vote.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
)

// ReplicaList is the cell's membership as the master sees it: every member
// of the Raft configuration with its addresses, suffrage and health.
type ReplicaList struct {
	Replicas []ReplicaStatus `json:"replicas"`
	// ConfiguredSize is the voter count the cell is configured for; the
	// master refuses a change that would leave fewer voters than a
	// majority of it.
	ConfiguredSize int `json:"configured_size"`
	// Index is the Raft index of the configuration listed.
	Index uint64 `json:"index,omitempty"`
}

// Find returns the member with id, if the list holds it.
func (l *ReplicaList) Find(id string) (ReplicaStatus, bool) {
	for _, r := range l.Replicas {
		if r.ID == id {
			return r, true
		}
	}
	return ReplicaStatus{}, false
}

// Voters counts the members that vote.
func (l *ReplicaList) Voters() int {
	n := 0
	for _, r := range l.Replicas {
		if r.Suffrage == SuffrageVoter {
			n++
		}
	}
	return n
}

// Replicas lists the cell's members as the master sees them. Only the
// cell's admin may ask (client.ErrPermission otherwise). The client also adopts
// the members' client addresses as the replicas it tries.
func (a *Admin) Replicas(ctx context.Context) (ReplicaList, error) {
	return a.membership(ctx, "list replicas", wire.MethodReplicaList, &wire.ReplicaListRequest{})
}

// AddReplica adds the member id, reached by clients at clientAddr and by
// the other members at raftAddr, to the cell. The replica must already
// run, with an empty data folder, not bootstrapping a cell of its own. It
// joins as a non-voter and the master promotes it to voter once its log
// has caught up: the returned list (the membership just after the change)
// usually shows it as a non-voter, and Replicas shows the promotion. Adding
// a member that is already there with the same addresses succeeds and
// changes nothing. Only the cell's admin may add (client.ErrPermission); a change
// the master refuses fails with the master's reason, and a malformed id or
// address with client.ErrBadRequest before anything is sent.
func (a *Admin) AddReplica(ctx context.Context, id, clientAddr, raftAddr string) (ReplicaList, error) {
	if err := checkMember(id, clientAddr, raftAddr); err != nil {
		return ReplicaList{}, opErr("add replica", id, err)
	}
	return a.membership(ctx, "add replica "+id, wire.MethodReplicaAdd,
		&wire.ReplicaAddRequest{ID: id, ClientAddr: clientAddr, RaftAddr: raftAddr})
}

// AddReadReplica adds the member id as a read replica: like AddReplica,
// but the member stays a non-voter for good (the master never promotes
// it), so it never counts for a quorum nor becomes master, and it serves
// reads given client.MaxStaleness. Remove it with RemoveReplica. A master
// that does not know read replicas would add a voter-to-be: the reply
// shows it, and AddReadReplica then fails with client.ErrBadRequest
// naming the member to remove.
func (a *Admin) AddReadReplica(ctx context.Context, id, clientAddr, raftAddr string) (ReplicaList, error) {
	if err := checkMember(id, clientAddr, raftAddr); err != nil {
		return ReplicaList{}, opErr("add read replica", id, err)
	}
	out, err := a.membership(ctx, "add read replica "+id, wire.MethodReplicaAdd,
		&wire.ReplicaAddRequest{ID: id, ClientAddr: clientAddr, RaftAddr: raftAddr, ReadReplica: true})
	if err != nil {
		return out, err
	}
	for _, r := range out.Replicas {
		if r.ID == id && r.Role != wire.RoleReadReplica {
			return out, opErr("add read replica", id, wire.Errorf(wire.CodeBadRequest,
				"the master does not know read replicas and added %s as a member that will vote: remove it (replica remove %s)", id, id))
		}
	}
	return out, nil
}

// RemoveReplica removes the member id (voter or not) from the cell.
// Removing a member that is not there succeeds and changes nothing. The
// master refuses a removal that would leave fewer voters than a majority
// of the configured size, or that would remove the last healthy voters;
// the error carries its reason. Only the cell's admin may remove
// (client.ErrPermission).
func (a *Admin) RemoveReplica(ctx context.Context, id string) (ReplicaList, error) {
	if err := checkMember(id, "", ""); err != nil {
		return ReplicaList{}, opErr("remove replica", id, err)
	}
	return a.membership(ctx, "remove replica "+id, wire.MethodReplicaRemove, &wire.ReplicaRemoveRequest{ID: id})
}

func (a *Admin) membership(ctx context.Context, op string, m wire.Method, req any) (ReplicaList, error) {
	var resp wire.ReplicaListResponse
	if err := link.Call(a.c, ctx, m, false, req, &resp); err != nil {
		return ReplicaList{}, opErr(op, "", err)
	}
	out := ReplicaList{ConfiguredSize: resp.ConfiguredSize, Index: resp.Index}
	for _, r := range resp.Replicas {
		out.Replicas = append(out.Replicas, replicaStatusOf(r))
	}
	// The master's own answer: the addresses to try from now on.
	link.Learn(a.c, wire.ClientAddrs(resp.Replicas))
	return out, nil
}

// checkMember validates a member's id and, when given, its addresses, so
// a typo is reported before the master is asked.
func checkMember(id, clientAddr, raftAddr string) error {
	if id == "" || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' || r == ',' || r == '=' }) {
		return wire.Errorf(wire.CodeBadRequest, "replica id %q: want a non-empty id of printable characters without spaces, ',' or '='", id)
	}
	for _, a := range []struct{ what, addr string }{{"client address", clientAddr}, {"Raft address", raftAddr}} {
		if a.addr == "" && clientAddr == "" && raftAddr == "" {
			continue // a removal names no addresses
		}
		host, port, err := net.SplitHostPort(a.addr)
		if err != nil || host == "" || port == "" {
			return wire.Errorf(wire.CodeBadRequest, "%s %q: want host:port", a.what, a.addr)
		}
	}
	return nil
}

func replicaStatusOf(r wire.ReplicaStatus) ReplicaStatus {
	return ReplicaStatus{ID: r.ID, ClientAddr: r.ClientAddr, RaftAddr: r.RaftAddr, Master: r.Master,
		Suffrage: r.Suffrage, Healthy: r.Healthy, LastContact: time.Duration(r.LastContactMillis) * time.Millisecond,
		MatchIndex: r.MatchIndex, Role: r.Role}
}
