package cell

import (
	"lockcell/fsm"
	"lockcell/wire"
)

// members describes the cell's members as this replica knows them: the
// latest Raft configuration it holds, joined with the replicated member
// table for client addresses, suffrage filled in. Until the cell's first
// master has seeded the table (a cell just bootstrapped), the configured
// Peers stand in for it.
func (s *Server) members() []wire.ReplicaStatus {
	leaderID, _ := s.rep.Leader()
	table, _ := s.rep.FSM().MemberTable()
	cfg, err := s.rep.Configuration()
	if len(table) == 0 || err != nil || len(cfg.Servers) == 0 {
		var out []wire.ReplicaStatus
		for _, p := range s.cfg.Peers {
			out = append(out, wire.ReplicaStatus{ID: p.ID, ClientAddr: s.clientAddrOf(p.ID), RaftAddr: p.RaftAddr, Master: p.ID == leaderID})
		}
		return out
	}
	readers := map[string]bool{}
	_ = s.rep.FSM().Read(func(v fsm.View) error {
		for _, id := range v.ReadReplicas() {
			readers[id] = true
		}
		return nil
	})
	out := make([]wire.ReplicaStatus, 0, len(cfg.Servers))
	for _, sv := range cfg.Servers {
		rs := wire.ReplicaStatus{ID: sv.ID, ClientAddr: clientAddrIn(table, sv.ID), RaftAddr: sv.RaftAddr,
			Master: sv.ID == leaderID, Suffrage: wire.SuffrageNonvoter}
		if rs.ClientAddr == "" {
			rs.ClientAddr = s.clientAddrOf(sv.ID)
		}
		if sv.Voter {
			rs.Suffrage = wire.SuffrageVoter
		}
		if readers[sv.ID] {
			rs.Role = wire.RoleReadReplica
		}
		out = append(out, rs)
	}
	return out
}

// clientAddrOf returns where clients reach member id: this replica's own
// listener for itself, else the member table's address, else the
// configured Peers' ("" when none knows it).
func (s *Server) clientAddrOf(id string) string {
	if id == s.cfg.Self {
		return s.ClientAddr()
	}
	table, _ := s.rep.FSM().MemberTable()
	if a := clientAddrIn(table, id); a != "" {
		return a
	}
	for _, p := range s.cfg.Peers {
		if p.ID == id {
			return p.ClientAddr
		}
	}
	return ""
}

func clientAddrIn(table []fsm.MemberAddrs, id string) string {
	for _, m := range table {
		if m.ID == id {
			return m.ClientAddr
		}
	}
	return ""
}

// bootstrapMembers are the configured Peers' addresses, which the first
// master seeds the member table with; none for a joining replica, which
// learns the table from the cell.
func (c *Config) bootstrapMembers() []fsm.MemberAddrs {
	if c.Join {
		return nil
	}
	out := make([]fsm.MemberAddrs, 0, len(c.Peers))
	for _, p := range c.Peers {
		out = append(out, fsm.MemberAddrs{ID: p.ID, ClientAddr: p.ClientAddr, RaftAddr: p.RaftAddr})
	}
	return out
}
