package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"lockcell/acl"
)

// The random half of docs/testplan.md#acl-matrix: random ACL files, random
// ACL names and creators on random nodes, and random calls by random
// principals, applied to the state machine and to a reference authorizer
// written from docs/spec.md#acls and docs/subsystems.md (not the acl package). Every
// outcome must match.

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

// parentRel is the parent of a node name relative to the root ("" for
// the root itself).
func parentRel(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
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
				rt.Fatalf("admin %s %+v: %v", c.Payload.CmdType(), c.Payload, r.Err)
			}
			return r
		}
		// internal opens a handle for who's session with no ACL check
		// (as the master's own commands do), to try each call's own check.
		internal := func(who, node string, flags uint32) uint64 {
			r := h.do(sess[who], Command{Payload: &OpenArgs{Path: fsmtPath(node), Flags: flags}})
			if r.Err != nil {
				rt.Fatalf("internal open %s: %v", node, r.Err)
			}
			return r.Handle
		}
		asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath("acl"), Flags: fsmtRWC | FlagDirectory}})
		fileNames := []string{"fa", "fb", "fc", "missing"}
		writeFile := func(name string, ps []string) {
			body := strings.Join(ps, "\n") + "\n"
			if _, ok := m.files[name]; ok {
				hd := asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath("acl/" + name), Flags: fsmtRW}}).Handle
				asAdmin(Command{Payload: &SetContentsArgs{Handle: hd, Contents: []byte(body)}})
			} else {
				asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath("acl/" + name), Flags: fsmtRWC, Contents: []byte(body)}})
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
		rootH := asAdmin(Command{Payload: &OpenArgs{Path: fsmtRoot, Flags: fsmtRW | FlagDirectory}}).Handle
		asAdmin(Command{Payload: &SetACLArgs{Handle: rootH, ACL: &ACLNames{Write: anyone}}})
		m.nodes[""] = &rapidNode{names: [3]string{"", anyone, ""}, dir: true} // the root
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
			r := h.aclDo(sess[creator], creator, Command{Payload: &OpenArgs{Path: fsmtPath(name), Flags: flags}})
			if r.Err != nil {
				rt.Fatalf("%s creates %s: %v", creator, name, r.Err)
			}
			names := [3]string{nameGen.Draw(rt, "read"), nameGen.Draw(rt, "write"), nameGen.Draw(rt, "change")}
			ah := asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath(name), Flags: fsmtRW | flags&FlagDirectory}}).Handle
			asAdmin(Command{Payload: &SetACLArgs{Handle: ah, ACL: &ACLNames{Read: names[0], Write: names[1], ChangeACL: names[2]}}})
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
			// expectKind checks an answer's kind; a hidden node's answer
			// must also be the very answer (kind and message, the names
			// swapped) of the same call on a missing name, which missing
			// makes for the missing twin of node.
			parent := parentRel(node)
			twin := strings.TrimPrefix(parent+"/zz"+node[len(parent):], "/")
			expectKind := func(op string, got *Result, want Kind, missing func(twin string) *Result) {
				checks++
				if kindOf(got) != want {
					rt.Fatalf("%s %s %s (files %v, node %+v): got %v, want kind %d", who, op, node, m.files, *n, got.Err, want)
				}
				if hide != KindNone && missing != nil {
					mr := missing(twin)
					if mr.Err == nil || got.Err.Kind != mr.Err.Kind ||
						strings.ReplaceAll(got.Err.Msg, fsmtPath(node), fsmtPath(twin)) != mr.Err.Msg {
						rt.Fatalf("%s %s hidden %s: %v; on the missing %s: %v", who, op, node, got.Err, twin, mr.Err)
					}
				}
			}
			dirFlag := uint32(0)
			if n.dir {
				dirFlag = FlagDirectory
			}
			openAs := func(rel string, flags uint32) *Result {
				return h.aclDo(sess[who], who, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: flags}})
			}
			switch op := rapid.IntRange(0, 8).Draw(rt, "op"); op {
			case 0:
				expect("open-read", r, openAs(node, FlagRead|dirFlag), hide)
				if hide != KindNone {
					expectKind("open-read", openAs(node, FlagRead|dirFlag), KindNotFound, func(tw string) *Result { return openAs(tw, FlagRead|dirFlag) })
				}
			case 1:
				expect("open-write", w, openAs(node, FlagWrite|dirFlag), hide)
				if hide != KindNone {
					expectKind("open-write", openAs(node, FlagWrite|dirFlag), KindNotFound, func(tw string) *Result { return openAs(tw, FlagWrite|dirFlag) })
				}
			case 2:
				got := KindNone
				if err := h.f.Allowed(fsmtPath(node), who, who == "admin", acl.Read); err != nil {
					got = err.Kind
				}
				expect("read", r, &Result{Err: map[bool]*Error{true: {Kind: got}}[got != KindNone]}, KindNone)
			case 3:
				hd := internal(who, node, fsmtRW|dirFlag)
				if n.dir {
					expect("set-acl", ch, h.aclDo(sess[who], who, Command{Payload: &SetACLArgs{Handle: hd, ACL: &ACLNames{Read: n.names[0], Write: n.names[1], ChangeACL: n.names[2]}}}), KindNone)
				} else {
					expect("write", w, h.aclDo(sess[who], who, Command{Payload: &SetContentsArgs{Handle: hd, Contents: []byte(who)}}), KindNone)
				}
			case 4:
				hd := internal(who, node, fsmtRW|dirFlag)
				res := h.aclDo(sess[who], who, Command{Payload: &AcquireArgs{Handle: hd, Mode: LockExclusive}})
				if res.Err != nil && res.Err.Kind == KindLockHeld {
					break // someone holds it; not a permission question
				}
				expect("acquire", w, res, KindNone)
				if res.Granted {
					h.release(sess[who], hd)
				}
			case 5:
				// A create below node: below a hidden node it answers as
				// below a missing one, whether node is a file or a
				// directory, and so does a create one level deeper.
				flags := fsmtRWC | rapid.SampledFrom([]uint32{0, FlagExcl, FlagDirectory, FlagEphemeral}).Draw(rt, "create flags")
				base := fmt.Sprintf("/c%d", h.idx)
				deeper := rapid.Bool().Draw(rt, "deeper")
				if deeper {
					base = "/x" + base
				}
				child := node + base
				res := openAs(child, flags)
				want := KindNone
				switch {
				case hide != KindNone || deeper:
					want = KindNotFound
				case !n.dir:
					want = KindNotDir
				case !w:
					want = KindPermission
				}
				expectKind("create-child", res, want, func(tw string) *Result { return openAs(tw+base, flags) })
				if res.Err == nil {
					h.do(sess[who], Command{Payload: &CloseArgs{Handle: res.Handle}})
					if flags&FlagEphemeral != 0 || flags&FlagDirectory != 0 {
						// Gone with its last handle, or a directory the
						// reference does not track: delete it as the
						// admin if it is still there.
						if h.f.nodes[fsmtPath(child)] != nil {
							asAdmin(Command{Payload: &DeleteArgs{Handle: asAdmin(Command{Payload: &OpenArgs{Path: fsmtPath(child), Flags: fsmtRW}}).Handle}})
						}
						break
					}
					// The child is the creator's, under the parent's names.
					m.nodes[child] = &rapidNode{names: n.names, creator: who}
					hd := internal(who, child, fsmtRW)
					expect("delete-child", m.allowed(who, child, acl.Write),
						h.aclDo(sess[who], who, Command{Payload: &DeleteArgs{Handle: hd}}), KindNone)
					if m.allowed(who, child, acl.Write) {
						delete(m.nodes, child)
					} else {
						nodeNames = append(nodeNames, child)
					}
				}
			case 6:
				f := rapid.SampledFrom(fileNames[:3]).Draw(rt, "rewrite")
				writeFile(f, subset.Draw(rt, "new "+f))
			case 7:
				// A create of the existing node. Visible: an open, then
				// exclusive and kind checks. Hidden: the missing name's
				// answer, up to a create the caller may make, which
				// finds the name taken.
				flags := FlagCreate | rapid.Uint32Range(0, 3).Draw(rt, "rw") |
					rapid.SampledFrom([]uint32{0, FlagExcl}).Draw(rt, "excl") |
					rapid.SampledFrom([]uint32{0, FlagDirectory}).Draw(rt, "dir")
				pr, pw := m.allowed(who, parent, acl.Read), m.allowed(who, parent, acl.Write)
				want := KindNone
				var missing func(string) *Result
				switch {
				case hide != KindNone && !pr && !pw:
					want, missing = KindNotFound, func(tw string) *Result { return openAs(tw, flags) }
				case hide != KindNone && !pw:
					want, missing = KindPermission, func(tw string) *Result { return openAs(tw, flags) }
				case hide != KindNone:
					want = KindExists
				case flags&FlagRead != 0 && !r, flags&FlagWrite != 0 && !w:
					want = KindPermission
				case flags&FlagExcl != 0, (flags&FlagDirectory != 0) != n.dir:
					want = KindExists
				}
				res := openAs(node, flags)
				expectKind("create-existing", res, want, missing)
				if hide != KindNone && want == KindExists && res.Err.Msg != fsmtPath(node)+" already exists" {
					rt.Fatalf("%s create-existing hidden %s: %q says more than that the name is taken", who, node, res.Err.Msg)
				}
				if res.Err == nil {
					h.do(sess[who], Command{Payload: &CloseArgs{Handle: res.Handle}})
				}
			case 8:
				// A sequencer of node's lock, checked by who: true only
				// for a reader; for anyone else, the answer of a lock
				// whose node is gone.
				hd := internal("admin", node, fsmtRW|dirFlag)
				res := h.do(sess["admin"], Command{Payload: &AcquireArgs{Handle: hd, Mode: LockExclusive}})
				if res.Err != nil {
					break // held by another call's handle
				}
				fc := Fence{Path: fsmtPath(node), Mode: LockExclusive, Generation: res.LockGen}
				ok, reason := h.f.FenceValidFor(&fc, who, who == "admin")
				checks++
				if ok != r {
					rt.Fatalf("%s checks a sequencer of %s (files %v, node %+v): valid %v (%s), want %v", who, node, m.files, *n, ok, reason, r)
				}
				if !r {
					gone := fc
					gone.Path = fsmtPath(twin)
					_, want := h.f.FenceValidFor(&gone, who, who == "admin")
					if strings.ReplaceAll(reason, fsmtPath(node), fsmtPath(twin)) != want {
						rt.Fatalf("%s checks a sequencer of %s it may not read: %q; of a missing lock: %q", who, node, reason, want)
					}
				}
				h.release(sess["admin"], hd)
			}
		}
	})
	t.Logf("%d random ACL checks, all matching the reference", checks)
}
