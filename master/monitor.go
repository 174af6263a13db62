package master

import (
	"lockcell/fsm"
	"lockcell/wire"
)

// The monitoring role. Health probes and dashboards need more than the
// plain CellStatus every client may ask for (disk usage, lag, last
// contact, the member list), but must not need the admin's certificate,
// which may change anything. The principals listed in the ACL file
// /ls/<cell>/acl/monitor (fsm.MonitorACLName) get that detail and the
// read-only ReplicaList; the admin has it as well. The file is read from
// the replicated state like every ACL file, so a change binds the next
// call on each replica as soon as that replica has applied it.

// MonitorACLPath returns the ACL file that grants the monitoring role in
// cell: /ls/<cell>/acl/monitor.
func MonitorACLPath(cell string) string {
	return "/ls/" + cell + "/" + fsm.ACLDirName + "/" + fsm.MonitorACLName
}

// MayMonitor reports whether principal may read the cell's health
// detail: it is the cell's admin, or the monitor ACL file lists it (or
// the wildcard) in this replica's applied state. A missing or broken
// file grants nobody but the admin.
func (s *Server) MayMonitor(principal string) bool { return s.mp.mayMonitor(principal) }

func (s *memberPart) mayMonitor(principal string) bool {
	if principal == s.cfg.Admin {
		return true
	}
	var ok bool
	s.read(func(v fsm.View) { ok = v.ListedIn(fsm.MonitorACLName, principal) })
	return ok
}

// MonitorDenied is the CodePermission error for a caller without the
// monitoring role who asked for what needs it: it names the ACL file that
// grants the role, so the operator knows what to change.
func (s *Server) MonitorDenied(principal, what string) error {
	return s.mp.monitorDenied(principal, what)
}

func (s *memberPart) monitorDenied(principal, what string) error {
	return wire.Errorf(wire.CodePermission,
		"only the cell admin or a principal listed in the ACL file %s may %s (%s is not)",
		MonitorACLPath(s.cfg.Cell), what, principal)
}

// ListMembers describes the Raft configuration as this replica holds it,
// joined with the member table, with its view of each member's health
// (Healthy, LastContactMillis, MatchIndex): what ReplicaList answers. The
// health figures mean something only on the Raft leader, which alone
// hears from every member; the caller asks only there.
func (s *Server) ListMembers() (*wire.ReplicaListResponse, error) {
	ops, err := s.mp.ops()
	if err != nil {
		return nil, err
	}
	return s.mp.listMembers(ops)
}
