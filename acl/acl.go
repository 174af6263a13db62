// Package acl is lockcell's pure permission logic: which principal may do
// what to a node, given the node's ACL names and the contents of the ACL
// files. It does no I/O and keeps no state; the master feeds it the
// replicated state through the Source interface and turns its errors into
// wire codes.
//
// # Model
//
// Every node carries three ACL names (Names): one each for Read, Write and
// ChangeACL. A name is the base name of a file in /ls/<cell>/acl/ (for
// example "ops" for /ls/<cell>/acl/ops). An ACL file lists principal names,
// one a line (see Parse). New nodes inherit their parent's names (Inherit).
// A node also records its Owner, the principal that created it.
//
// # Rules
//
// Check(src, who, node, p, pol) decides, in this order:
//
//  1. An unknown permission, or a caller that is not a valid principal name
//     (empty, the wildcard "*", or otherwise malformed — i.e. not
//     authenticated), is denied.
//  2. The cell admin (Policy.Admin, when non-empty) is allowed everything,
//     on every node, whatever the ACL files say, so a broken or missing ACL
//     file can always be repaired.
//  3. If the node names no ACL file for p (empty name), the default
//     applies: any authenticated principal may Read; Write and ChangeACL
//     are allowed only to the node's Owner (a node with no recorded owner
//     is then writable only by the admin).
//  4. If the named ACL file does not exist (Source.Lookup reports false),
//     the check fails closed: denied, with a message saying the file is
//     missing. A nil Source counts as every file missing.
//  5. Otherwise the caller is allowed iff the file lists it, or lists the
//     wildcard "*" (every authenticated principal). When a file is named,
//     the owner gets no implicit rights: the file alone decides.
//
// Denials wrap ErrPermission and are *DeniedError values naming the
// principal, the permission and the ACL file, for the audit log. They may
// reveal that a node exists; the master must map "absent" and "forbidden"
// to the same client-visible error where the spec requires it.
//
// # ACL file format
//
// Plain ASCII text, one principal a line; surrounding white space is
// trimmed, blank lines and lines whose first non-blank byte is '#' are
// ignored, duplicates are dropped. A principal is 1-255 bytes of printable
// ASCII (0x21-0x7E, so no spaces or control bytes) not starting with '#',
// or the lone wildcard "*". Anything else rejects the whole file with a
// *ParseError (wrapping ErrInvalidACL) naming the 1-based line. An empty
// file is valid and grants nobody anything.
package acl

import (
	"errors"
	"fmt"
	"strings"
)

// ErrPermission is wrapped by every denial from Check.
var ErrPermission = errors.New("acl: permission denied")

// ErrInvalidACL is wrapped by every rejection of ACL file contents or
// principal names (Parse, Format, New, ValidPrincipal).
var ErrInvalidACL = errors.New("acl: invalid ACL")

// Wildcard, as a line of an ACL file, grants every authenticated principal.
const Wildcard = "*"

// MaxPrincipalLen is the longest principal name, in bytes.
const MaxPrincipalLen = 255

// Perm is one of the three permissions a node's ACL names guard. The zero
// Perm is invalid, so an unset permission is never granted.
type Perm uint8

const (
	Read      Perm = iota + 1 // read contents, stat, list, open for reading, cache events
	Write                     // write contents, create children, delete, locks
	ChangeACL                 // change the node's ACL names
)

// Perms lists every valid permission, in order.
func Perms() []Perm { return []Perm{Read, Write, ChangeACL} }

// String returns "read", "write", "change-acl", or "perm(N)" if invalid.
func (p Perm) String() string {
	switch p {
	case Read:
		return "read"
	case Write:
		return "write"
	case ChangeACL:
		return "change-acl"
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

// Valid reports whether p is Read, Write or ChangeACL.
func (p Perm) Valid() bool { return p >= Read && p <= ChangeACL }

// ParsePerm is the inverse of String for valid permissions.
func ParsePerm(s string) (Perm, error) {
	for _, p := range Perms() {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("acl: unknown permission %q (want read, write or change-acl)", s)
}

// Names are the three ACL file names a node carries: base names of files
// in /ls/<cell>/acl/. An empty name means "no ACL file": the default rule
// (see the package comment) applies for that permission.
type Names struct {
	Read, Write, ChangeACL string
}

// For returns the ACL name that guards p, or "" for an invalid p.
func (n Names) For(p Perm) string {
	switch p {
	case Read:
		return n.Read
	case Write:
		return n.Write
	case ChangeACL:
		return n.ChangeACL
	}
	return ""
}

// Inherit returns the ACL names a new node gets from its parent. It is the
// single place that rule lives (today: a plain copy).
func Inherit(parent Names) Names { return parent }

// NodeACL is what Check needs to know about a node: its ACL names and its
// owner (the principal that created it; "" if unknown).
type NodeACL struct {
	Names
	Owner string
}

// Source resolves an ACL name to the parsed ACL file. ok is false when the
// file does not exist. Declared here because acl consumes it; the master
// satisfies it from the replicated state.
type Source interface {
	Lookup(aclName string) (List, bool)
}

// Policy is the cell-wide part of the rules.
type Policy struct {
	// Admin is the principal allowed everything; "" means no admin.
	Admin string
}

// DeniedError is the error Check returns on denial. It wraps ErrPermission.
type DeniedError struct {
	Principal string // the caller, as presented
	Perm      Perm
	ACL       string // the ACL file name consulted; "" for the default rule
	Reason    string
}

func (e *DeniedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: principal %q lacks %s", ErrPermission, e.Principal, e.Perm)
	if e.ACL != "" {
		fmt.Fprintf(&b, " (ACL file %q)", e.ACL)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

func (e *DeniedError) Unwrap() error { return ErrPermission }

// Check reports whether principal who may exercise p on the node, under the
// rules in the package comment. It returns nil, or a *DeniedError wrapping
// ErrPermission.
func Check(src Source, who string, node NodeACL, p Perm, pol Policy) error {
	deny := func(aclName, reason string) error {
		return &DeniedError{Principal: who, Perm: p, ACL: aclName, Reason: reason}
	}
	if !p.Valid() {
		return deny("", "unknown permission")
	}
	if who == Wildcard || ValidPrincipal(who) != nil {
		return deny("", "caller is not an authenticated principal")
	}
	if pol.Admin != "" && who == pol.Admin {
		return nil
	}
	name := node.For(p)
	if name == "" {
		if p == Read {
			return nil
		}
		if node.Owner != "" && who == node.Owner {
			return nil
		}
		if node.Owner == "" {
			return deny("", fmt.Sprintf("no %s ACL file named and the node has no owner; default allows only the admin", p))
		}
		return deny("", fmt.Sprintf("no %s ACL file named; default allows only the owner %q", p, node.Owner))
	}
	if src == nil {
		return deny(name, "ACL file is missing (failing closed)")
	}
	list, ok := src.Lookup(name)
	if !ok {
		return deny(name, "ACL file is missing (failing closed)")
	}
	if list.Contains(who) {
		return nil
	}
	return deny(name, "not listed in the ACL file")
}
