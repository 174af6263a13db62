package fsm

import (
	"strings"

	"lockcell/acl"
)

// ACL checks live in the state machine, not only in the master, so that a
// permission is decided in the same log entry as the change it guards: an ACL
// file rewritten or a node's ACL names changed by one entry bind every later
// entry, with no window in which a master's earlier check lets a revoked
// principal through (docs/testplan.md#acl-matrix: a revocation binds the next
// call). The master still checks reads itself, against this same state, after
// VerifyLeader.

// ACLDirName is the directory, under the cell root, that holds ACL files.
const ACLDirName = "acl"

// MonitorACLName is the ACL file, in ACLDirName, that grants the
// monitoring role: the principals it lists may read the cell's health
// detail (CellStatus with Detail: disk usage, lag, last contact) and list
// the members, as the admin may, and change nothing. Like every ACL file
// it fails closed: missing or unparsable, it grants nobody.
const MonitorACLName = "monitor"

// ACLNames are the three ACL file names a SetACL command gives a node.
type ACLNames struct {
	Read      string `msgpack:"r,omitempty"`
	Write     string `msgpack:"w,omitempty"`
	ChangeACL string `msgpack:"c,omitempty"`
}

// aclDir is the folder of ACL files: /ls/<cell>/acl.
func (f *FSM) aclDir() string { return f.Root() + "/" + ACLDirName }

// isACLFile reports whether path names a file in the ACL folder.
func (f *FSM) isACLFile(path string) bool {
	dir := f.aclDir() + "/"
	return strings.HasPrefix(path, dir) && !strings.Contains(path[len(dir):], "/")
}

// aclSource resolves ACL names against the namespace. A file that does not
// parse counts as missing, so the check fails closed (writes of such files
// are refused, but a snapshot from an older version could hold one).
type aclSource struct{ f *FSM }

func (s aclSource) Lookup(name string) (acl.List, bool) {
	n := s.f.nodes[s.f.aclDir()+"/"+name]
	if n == nil || n.Dir {
		return acl.List{}, false
	}
	f := s.f
	f.aclMu.Lock()
	defer f.aclMu.Unlock()
	// Keyed by instance and content generation: a re-created or rewritten
	// file never hits an old parse.
	if p, ok := f.aclParsed[name]; ok && p.instance == n.Instance && p.gen == n.ContentGen {
		return p.list, p.ok
	}
	l, err := acl.Parse(n.Contents)
	if f.aclParsed == nil || len(f.aclParsed) > 4096 {
		f.aclParsed = map[string]parsedACL{}
	}
	f.aclParsed[name] = parsedACL{instance: n.Instance, gen: n.ContentGen, list: l, ok: err == nil}
	return l, err == nil
}

// ListedIn reports whether the ACL file aclName (a base name in
// ACLDirName) grants principal: it exists, parses, and lists principal or
// the wildcard. A missing or broken file grants nobody; the admin is not
// implied (the caller decides what the admin may).
func (v View) ListedIn(aclName, principal string) bool {
	l, ok := aclSource{v.f}.Lookup(aclName)
	return ok && l.Contains(principal)
}

// parsedACL is one cached parse of an ACL file.
type parsedACL struct {
	instance, gen uint64
	list          acl.List
	ok            bool
}

// nodeACL is what acl.Check needs to know about n.
func nodeACL(n *Node) acl.NodeACL {
	return acl.NodeACL{Names: acl.Names{Read: n.ReadACL, Write: n.WriteACL, ChangeACL: n.ChangeACL}, Owner: n.Creator}
}

// policy is the admin rule for a command: the proposing master marks
// commands of its configured admin principal, so every replica decides
// alike whatever its own configuration says.
func policyOf(principal string, admin bool) acl.Policy {
	if admin {
		return acl.Policy{Admin: principal}
	}
	return acl.Policy{}
}

// permit checks that the command's principal holds p on n. Commands the
// master issues on its own behalf (expiry, lock-delay hand-off, withdrawn
// waits) carry no principal and are not client requests; every client
// request carries one (the master fills it from the connection).
func (f *FSM) permit(c *Command, n *Node, p acl.Perm) *Error {
	if c.Principal == "" || bugACLSkipSubOp && c.Type == CmdAcquire {
		return nil
	}
	return f.check(c.Principal, c.Admin, n, p)
}

func (f *FSM) check(principal string, admin bool, n *Node, p acl.Perm) *Error {
	if err := acl.Check(aclSource{f}, principal, nodeACL(n), p, policyOf(principal, admin)); err != nil {
		return errf(KindPermission, "%s: %v", n.Path, err)
	}
	return nil
}

// checkACLContents refuses contents for an ACL file that do not parse: a
// half-written ACL file would lock everyone out (it would fail closed).
func (f *FSM) checkACLContents(path string, contents []byte) *Error {
	if !f.isACLFile(path) {
		return nil
	}
	if _, err := acl.Parse(contents); err != nil {
		return errf(KindBadRequest, "%s: not a valid ACL file: %v", path, err)
	}
	return nil
}

// validACLName: empty (the default rule) or one name component.
func validACLName(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 255 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r == '/' || r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func (f *FSM) setACL(index uint64, c *Command, p *SetACLArgs) *Result {
	_, n, err := f.liveHandle(c.Session, p.Handle)
	if err != nil {
		return &Result{Err: err}
	}
	if p.ACL == nil {
		return &Result{Err: errf(KindBadRequest, "%s: SetACL names no ACL files", n.Path)}
	}
	for _, name := range []string{p.ACL.Read, p.ACL.Write, p.ACL.ChangeACL} {
		if !validACLName(name) {
			return &Result{Err: errf(KindBadRequest, "%s: %q is not an ACL file name", n.Path, name)}
		}
	}
	if err := f.permit(c, n, acl.ChangeACL); err != nil {
		return &Result{Err: err}
	}
	if p.HasIfGen && n.ACLGen != p.IfGen {
		return &Result{Err: errf(KindGenerationMismatch, "%s: ACL generation is %d, not %d", n.Path, n.ACLGen, p.IfGen)}
	}
	n.ReadACL, n.WriteACL, n.ChangeACL = p.ACL.Read, p.ACL.Write, p.ACL.ChangeACL
	n.ACLGen = index
	f.note(Change{Kind: ChangeNode, Path: n.Path})
	f.note(Change{Kind: ChangeACL, Path: n.Path})
	return &Result{Stat: n.stat()}
}

// Allowed is View.Allowed under a read lock of its own.
func (f *FSM) Allowed(path, principal string, admin bool, p acl.Perm) *Error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.Allowed(path, principal, admin, p)
}

// hidden: the caller may neither read nor write n.
func (f *FSM) hidden(n *Node, principal string, admin bool) bool {
	return f.check(principal, admin, n, acl.Read) != nil && f.check(principal, admin, n, acl.Write) != nil
}

// hiddenFrom: n is hidden from the client request c. The master's own
// commands carry no principal and see everything.
func (f *FSM) hiddenFrom(c *Command, n *Node) bool {
	return c.Principal != "" && f.hidden(n, c.Principal, c.Admin)
}

// openHidden answers an open of p.Path, a node hidden from the caller,
// exactly as an open of a missing name would be answered, except where
// that answer is success: a create the caller is allowed to make (it may
// write the parent directory) cannot make a name that is taken, so it
// answers "exists", without saying whether a file or a directory took it.
// A caller who may write a directory may thus learn which names in it are
// taken, as a Unix directory that may be written but not listed lets
// creates tell; it learns nothing more of them (not their kind, contents,
// ACLs or locks), and a caller who may not create there learns nothing.
func (f *FSM) openHidden(c *Command, p *OpenArgs) *Error {
	if p.Flags&FlagCreate == 0 {
		return errf(KindNotFound, "%s does not exist", p.Path)
	}
	if _, err := f.checkCreate(c, p); err != nil {
		return err
	}
	return errf(KindExists, "%s already exists", p.Path)
}

// fenceNode is the node of the lock fc names as the principal may know
// it: nil when there is none or the principal may not read it. Checking a
// sequencer reads its lock's state (held or not, at which generation, in
// which mode), as GetStat would, so it needs read; a caller without read
// gets the answer of a lock whose node is gone, whatever the lock's state,
// so the answer tells it nothing of the name.
func (f *FSM) fenceNode(fc *Fence, principal string, admin bool) *Node {
	n := f.nodes[fc.Path]
	if n == nil || principal == "" || f.check(principal, admin, n, acl.Read) == nil {
		return n
	}
	return nil
}

// FenceValidFor is View.FenceValidFor under a read lock of its own.
func (f *FSM) FenceValidFor(fc *Fence, principal string, admin bool) (bool, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.FenceValidFor(fc, principal, admin)
}

// SessionPrincipal is View.SessionPrincipal under a read lock of its own.
func (f *FSM) SessionPrincipal(session uint64) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.SessionPrincipal(session)
}

// PrincipalSessions is View.PrincipalSessions under a read lock of its own.
func (f *FSM) PrincipalSessions(principal string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.PrincipalSessions(principal)
}

// SessionHandles is View.SessionHandles under a read lock of its own.
func (f *FSM) SessionHandles(session uint64) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.SessionHandles(session)
}

// namingACL lists the nodes whose read ACL is the ACL file at path, for
// invalidation: rewriting the file can revoke a cacher's right to read them.
func (f *FSM) namingACLLocked(path string) []string {
	if !f.isACLFile(path) {
		return nil
	}
	name := path[len(f.aclDir())+1:]
	var out []string
	for p, n := range f.nodes {
		if n.ReadACL == name {
			out = append(out, p)
		}
	}
	return out
}

// permitOpen checks an open of an existing node: the handle's read and
// write modes each need that permission. A caller that may neither read
// nor write the node is told it does not exist.
func (f *FSM) permitOpen(c *Command, p *OpenArgs, n *Node) *Error {
	if c.Principal == "" {
		return nil
	}
	if f.hidden(n, c.Principal, c.Admin) {
		return errf(KindNotFound, "%s does not exist", n.Path)
	}
	if p.Flags&FlagRead != 0 {
		if err := f.check(c.Principal, c.Admin, n, acl.Read); err != nil {
			return err
		}
	}
	if p.Flags&FlagWrite != 0 {
		if err := f.check(c.Principal, c.Admin, n, acl.Write); err != nil {
			return err
		}
	}
	return nil
}

// CanRead is View.CanRead under a read lock of its own.
func (f *FSM) CanRead(session uint64, path, admin string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.CanRead(session, path, admin)
}
