package master

import (
	"strings"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/wire"
)

// checkACLPatterns refuses a principal pattern given as an ACL name ("*"
// for everyone) with a message that says how to grant everyone, where
// name validation would only call it an invalid name.
func (e *fileEndpoint) checkACLPatterns(c *call, req *wire.SetACLRequest) error {
	dir := "/ls/" + e.cfg.Cell + "/" + fsm.ACLDirName + "/"
	for _, name := range []string{req.Read, req.Write, req.ChangeACL} {
		if strings.Contains(name, "*") {
			return wire.Errorf(wire.CodeInvalidName,
				"ACL name %q: an ACL name is a file in %s, not a principal; to grant every principal, "+
					"create a file there holding the line * (lockcell put %severyone '*') and name that file",
				name, dir, dir)
		}
	}
	return nil
}

// checkACLNames refuses, before anything is proposed, the ACL names of a
// SetACL that would lock everyone but the admin out by mistake: a file
// that does not exist in the cell's ACL folder (a missing file denies
// everyone but the admin; the state machine keeps that rule for files
// deleted later). Only names that change are checked, so a node that
// already names a missing file can still have its other names changed;
// and only for a caller who may change the node's ACL names, so nobody
// learns through this which ACL files exist (the others get the state
// machine's Permission refusal). "" stays the default rule.
func (e *fileEndpoint) checkACLNames(c *call, req *wire.SetACLRequest) error {
	dir := "/ls/" + e.cfg.Cell + "/" + fsm.ACLDirName + "/"
	var err error
	e.r.read(func(v fsm.View) {
		hv, herr := v.LookupHandle(c.h.Session, req.Handle)
		if herr != nil {
			return // the apply reports the invalid handle
		}
		if v.Allowed(hv.Handle.Path, c.caller.Principal, c.isAdmin(), acl.ChangeACL) != nil {
			return // the apply refuses it
		}
		for _, n := range []struct{ now, was string }{
			{req.Read, hv.Stat.ReadACL}, {req.Write, hv.Stat.WriteACL}, {req.ChangeACL, hv.Stat.ChangeACL}} {
			if n.now == "" || n.now == n.was || v.Exists(dir+n.now) {
				continue
			}
			err = wire.Errorf(wire.CodeNotFound,
				"ACL file %s%s does not exist, and naming it would deny everyone but the admin: create it first, "+
					"one principal a line (lockcell put %s%s 'PRINCIPAL'), or give \"\" for the default rule",
				dir, n.now, dir, n.now)
			return
		}
	})
	return err
}
