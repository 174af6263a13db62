package replica

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"lockcell/acl"
)

// TESTPLAN 14's random half: random ACL files, random ACL names and
// creators on random nodes, and random calls by random principals, applied
// to the state machine and to a reference authorizer written from SPEC 8
// (not the acl package). Every outcome must match.

var rapidPrincipals = []string{"admin", "p1", "p2", "p3"}

// rapidACLModel is the reference: what each ACL file lists (absent: the
// file does not exist) and each node's names and creator.
type rapidACLModel struct {
	files map[string][]string
	nodes map[string]*rapidNode
}

type rapidNode struct {
	names   [3]string // read, write, change-ACL
	creator string
	dir     bool
}

func (m *rapidACLModel) allowed(who, node string, p acl.Perm) bool {
	if who == "admin" {
		return true
	}
	n := m.nodes[node]
	name := n.names[p-1]
	if name == "" {
		return p == acl.Read || who == n.creator
	}
	list, ok := m.files[name]
	if !ok {
		return false
	}
	return slices.Contains(list, who) || slices.Contains(list, "*")
}

func TestACLRandomGraphsMatchReference(t *testing.T) {
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		h := newFSMT(t)
		m := &rapidACLModel{files: map[string][]string{}, nodes: map[string]*rapidNode{}}
		sess := map[string]uint64{}
		for _, p := range rapidPrincipals {
			sess[p] = h.sessionOf(p)
		}
		asAdmin := func(c Command) *Result {
			r := h.aclDo(sess["admin"], "admin", c)
			if r.Err != nil {
				rt.Fatalf("admin %s %s: %v", c.Type, c.Path, r.Err)
			}
			return r
		}
		// internal opens a handle for who's session with no ACL check
		// (as the master's own commands do), to try each call's own check.
		internal := func(who, node string, flags uint32) uint64 {
			r := h.do(sess[who], Command{Type: CmdOpen, Path: fsmtPath(node), Flags: flags})
			if r.Err != nil {
				rt.Fatalf("internal open %s: %v", node, r.Err)
			}
			return r.Handle
		}
		asAdmin(Command{Type: CmdOpen, Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory})
		fileNames := []string{"fa", "fb", "fc", "missing"}
		writeFile := func(name string, ps []string) {
			body := strings.Join(ps, "\n") + "\n"
			if _, ok := m.files[name]; ok {
				hd := asAdmin(Command{Type: CmdOpen, Path: fsmtPath("acl/" + name), Flags: fsmtRW}).Handle
				asAdmin(Command{Type: CmdSetContents, Handle: hd, Contents: []byte(body)})
			} else {
				asAdmin(Command{Type: CmdOpen, Path: fsmtPath("acl/" + name), Flags: fsmtRWC, Contents: []byte(body)})
			}
			m.files[name] = ps
		}
		subset := rapid.SliceOfDistinct(rapid.SampledFrom(append(slices.Clone(rapidPrincipals[1:]), "*")), rapid.ID[string])
		for _, f := range fileNames[:3] {
			writeFile(f, subset.Draw(rt, "file "+f))
		}
		// The root lets everyone create; each node gets a random creator
		// and random names.
		anyone := "everyone"
		writeFile(anyone, []string{"*"})
		rootH := asAdmin(Command{Type: CmdOpen, Path: fsmtRoot, Flags: fsmtRW | FlagDirectory}).Handle
		asAdmin(Command{Type: CmdSetACL, Handle: rootH, ACL: &ACLNames{Write: anyone}})
		nameGen := rapid.SampledFrom(append([]string{""}, fileNames...))
		nNodes := rapid.IntRange(1, 5).Draw(rt, "nodes")
		var nodeNames []string
		for i := range nNodes {
			name := fmt.Sprintf("n%d", i)
			creator := rapid.SampledFrom(rapidPrincipals).Draw(rt, "creator")
			dir := rapid.Bool().Draw(rt, "dir")
			flags := fsmtRWC
			if dir {
				flags |= FlagDirectory
			}
			r := h.aclDo(sess[creator], creator, Command{Type: CmdOpen, Path: fsmtPath(name), Flags: flags})
			if r.Err != nil {
				rt.Fatalf("%s creates %s: %v", creator, name, r.Err)
			}
			names := [3]string{nameGen.Draw(rt, "read"), nameGen.Draw(rt, "write"), nameGen.Draw(rt, "change")}
			ah := asAdmin(Command{Type: CmdOpen, Path: fsmtPath(name), Flags: fsmtRW | flags&FlagDirectory}).Handle
			asAdmin(Command{Type: CmdSetACL, Handle: ah, ACL: &ACLNames{Read: names[0], Write: names[1], ChangeACL: names[2]}})
			m.nodes[name] = &rapidNode{names: names, creator: creator, dir: dir}
			nodeNames = append(nodeNames, name)
		}
		ops := rapid.IntRange(1, 40).Draw(rt, "ops")
		for range ops {
			who := rapid.SampledFrom(rapidPrincipals).Draw(rt, "who")
			node := rapid.SampledFrom(nodeNames).Draw(rt, "node")
			n := m.nodes[node]
			r, w, ch := m.allowed(who, node, acl.Read), m.allowed(who, node, acl.Write), m.allowed(who, node, acl.ChangeACL)
			expect := func(op string, ok bool, got *Result, hideAs Kind) {
				checks++
				want := KindNone
				if !ok {
					want = KindPermission
					if hideAs != KindNone {
						want = hideAs
					}
				}
				gotKind := KindNone
				if got.Err != nil {
					gotKind = got.Err.Kind
				}
				if gotKind != want {
					rt.Fatalf("%s %s %s (files %v, node %+v): got %v, want kind %d", who, op, node, m.files, *n, got.Err, want)
				}
			}
			hide := KindNone
			if !r && !w {
				hide = KindNotFound
			}
			dirFlag := uint32(0)
			if n.dir {
				dirFlag = FlagDirectory
			}
			switch op := rapid.IntRange(0, 6).Draw(rt, "op"); op {
			case 0:
				expect("open-read", r, h.aclDo(sess[who], who, Command{Type: CmdOpen, Path: fsmtPath(node), Flags: FlagRead | dirFlag}), hide)
			case 1:
				expect("open-write", w, h.aclDo(sess[who], who, Command{Type: CmdOpen, Path: fsmtPath(node), Flags: FlagWrite | dirFlag}), hide)
			case 2:
				got := KindNone
				if err := h.f.Allowed(fsmtPath(node), who, who == "admin", acl.Read); err != nil {
					got = err.Kind
				}
				expect("read", r, &Result{Err: map[bool]*Error{true: {Kind: got}}[got != KindNone]}, KindNone)
			case 3:
				hd := internal(who, node, fsmtRW|dirFlag)
				if n.dir {
					expect("set-acl", ch, h.aclDo(sess[who], who, Command{Type: CmdSetACL, Handle: hd,
						ACL: &ACLNames{Read: n.names[0], Write: n.names[1], ChangeACL: n.names[2]}}), KindNone)
				} else {
					expect("write", w, h.aclDo(sess[who], who, Command{Type: CmdSetContents, Handle: hd, Contents: []byte(who)}), KindNone)
				}
			case 4:
				hd := internal(who, node, fsmtRW|dirFlag)
				res := h.aclDo(sess[who], who, Command{Type: CmdAcquire, Handle: hd, Mode: LockExclusive})
				if res.Err != nil && res.Err.Kind == KindLockHeld {
					break // someone holds it; not a permission question
				}
				expect("acquire", w, res, KindNone)
				if res.Granted {
					h.release(sess[who], hd)
				}
			case 5:
				if !n.dir {
					break
				}
				child := fmt.Sprintf("%s/c%d", node, h.idx)
				res := h.aclDo(sess[who], who, Command{Type: CmdOpen, Path: fsmtPath(child), Flags: fsmtRWC})
				expect("create-child", w, res, KindNone)
				if res.Err == nil {
					// The child is the creator's, under the parent's names.
					m.nodes[child] = &rapidNode{names: n.names, creator: who}
					hd := internal(who, child, fsmtRW)
					expect("delete-child", m.allowed(who, child, acl.Write),
						h.aclDo(sess[who], who, Command{Type: CmdDelete, Handle: hd}), KindNone)
					if m.allowed(who, child, acl.Write) {
						delete(m.nodes, child)
					} else {
						nodeNames = append(nodeNames, child)
					}
				}
			case 6:
				f := rapid.SampledFrom(fileNames[:3]).Draw(rt, "rewrite")
				writeFile(f, subset.Draw(rt, "new "+f))
			}
		}
	})
	t.Logf("%d random ACL checks, all matching the reference", checks)
}
