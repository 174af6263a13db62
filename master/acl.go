package master

import (
	"context"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// The replicated state machine decides every permission a write needs, in
// the entry that makes the write (replica/acl.go). The master decides reads,
// against the same state, after VerifyLeader, and keeps sessions bound to
// the principal that created them.

// checkSessionOwner refuses a call on a session created by another
// principal: session ids are small integers, and a guessed one must not let
// a caller act with someone else's handles and locks.
func (s *parts) checkSessionOwner(c *call, r route) error {
	if c.h.Session == 0 || r.newSession {
		return nil
	}
	return s.r.view(func(v fsm.View) error {
		owner, incarnation, ok := v.SessionResumeInfo(c.h.Session)
		if ok && owner != "" && owner != c.caller.Principal {
			return wire.Errorf(wire.CodePermission, "session %d belongs to another principal", c.h.Session)
		}
		if ok {
			return checkIncarnation(c.h, incarnation)
		}
		return nil
	})
}

// checkRead decides a read of the node behind a handle, in view v.
func (c *call) checkRead(v fsm.View, handle uint64) error {
	name, ok := v.HandlePath(c.h.Session, handle)
	if !ok {
		return nil // the read itself reports the invalid handle
	}
	c.path = name
	// A node gone since the handle opened is the read's to report (handle
	// invalid); there is nothing left to protect.
	if err := v.Allowed(name, c.caller.Principal, c.isAdmin(), acl.Read); err != nil && err.Kind != fsm.KindNotFound {
		return err
	}
	return nil
}

// setACL replaces the three ACL names of the handle's node. It needs the
// change-ACL permission, which the state machine checks.
func (e *fileEndpoint) setACL(ctx context.Context, c *call, req *wire.SetACLRequest) (*wire.StatResponse, error) {
	if err := e.checkACLPatterns(c, req); err != nil {
		return nil, err
	}
	for _, name := range []string{req.Read, req.Write, req.ChangeACL} {
		if name == "" {
			continue
		}
		if err := wire.ValidateName(e.cfg.Cell, "/ls/"+e.cfg.Cell+"/"+fsm.ACLDirName+"/"+name); err != nil {
			return nil, wire.Errorf(wire.CodeInvalidName, "ACL file name %q: %v", name, err)
		}
	}
	if err := e.checkACLNames(c, req); err != nil {
		return nil, err
	}
	res, err := e.w.apply(ctx, c, &fsm.Command{Payload: &fsm.SetACLArgs{Handle: req.Handle,
		ACL:   &fsm.ACLNames{Read: req.Read, Write: req.Write, ChangeACL: req.ChangeACL},
		IfGen: req.IfGeneration, HasIfGen: req.HasIfGeneration}})
	if err != nil {
		return nil, err
	}
	return &wire.StatResponse{Stat: toStat(res.Stat)}, nil
}

// audit logs, once per call, every ACL change (a SetACL, or a write to a
// file in the ACL folder) and every permission denial within its
// principal's ration (auditrate.go), with who, what, where and the
// outcome. Contents are never logged.
func (s *parts) audit(c *call, err error) {
	code := wire.CodeOf(err)
	aclChange := c.h.Method == wire.MethodSetACL ||
		(c.h.Method == wire.MethodSetContents || c.h.Method == wire.MethodOpen || c.h.Method == wire.MethodDelete) &&
			s.isACLPath(c.path)
	if code != wire.CodePermission && !aclChange {
		return
	}
	result := "ok"
	if err != nil {
		result = code.String()
	}
	args := []any{"principal", c.caller.Principal, "op", c.h.Method.String(), "path", c.path,
		"session", c.h.Session, "result", result}
	if c.caller.Proxy != "" {
		args = append(args, "proxy", c.caller.Proxy)
	}
	if !aclChange {
		ok, held := s.auditRation.admit(c.caller.Principal)
		if !ok {
			return
		}
		if held > 0 {
			args = append(args, "not_logged_before", held)
		}
	}
	s.cfg.Audit.Info("audit", args...)
}

// AuditSuppressed counts the denial lines the audit stream did not get
// because their principal was over its ration (auditrate.go).
func (s *Server) AuditSuppressed() uint64 { return s.auditRation.Suppressed() }

func (s *parts) isACLPath(name string) bool {
	dir := "/ls/" + s.cfg.Cell + "/" + fsm.ACLDirName + "/"
	return len(name) > len(dir) && name[:len(dir)] == dir
}
