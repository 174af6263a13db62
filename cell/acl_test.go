package cell_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/wire"
)

// docs/testplan.md#acl-matrix: the ACL enforcement matrix, through real
// mutual-TLS connections with certificates the test mints. Every principal
// tries every call on every node, and the outcome is compared with an
// independent reference authorizer written out here from docs/spec.md#acls
// and docs/subsystems.md ("ACLs").

// aclAudit records the cell's audit log lines.
type aclAudit struct {
	mu    sync.Mutex
	lines []map[string]string
}

func (a *aclAudit) Enabled(context.Context, slog.Level) bool { return true }
func (a *aclAudit) WithAttrs([]slog.Attr) slog.Handler       { return a }
func (a *aclAudit) WithGroup(string) slog.Handler            { return a }
func (a *aclAudit) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "audit" {
		return nil
	}
	m := map[string]string{}
	r.Attrs(func(at slog.Attr) bool {
		m[at.Key] = at.Value.String()
		return true
	})
	a.mu.Lock()
	a.lines = append(a.lines, m)
	a.mu.Unlock()
	return nil
}

// count returns how many audit lines match every given key=value.
func (a *aclAudit) count(kv ...string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
next:
	for _, l := range a.lines {
		for i := 0; i+1 < len(kv); i += 2 {
			if l[kv[i]] != kv[i+1] {
				continue next
			}
		}
		n++
	}
	return n
}

// The reference authorizer: ACL files by name, and each node's names and
// creator. Deliberately not the acl package.
type refNode struct {
	read, write, change string
	creator             string
	dir                 bool
}

type refPerm int

const (
	refRead refPerm = iota
	refWrite
	refChange
)

var refFiles = map[string][]string{
	"readers":   {"reader"},
	"writers":   {"writer"},
	"acladmins": {"acladmin"},
	"homew":     {"alice"},
	"everyone":  {"alice", "reader", "writer", "acladmin", "stranger"},
}

func refAllowed(who string, n refNode, p refPerm) bool {
	if who == "admin" {
		return true
	}
	name := [...]string{n.read, n.write, n.change}[p]
	if name == "" {
		return p == refRead || who == n.creator
	}
	return slices.Contains(refFiles[name], who)
}

func aclOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, client.ErrPermission):
		return "denied"
	case errors.Is(err, client.ErrNotFound):
		return "not-found"
	}
	return "error: " + err.Error()
}

func want(ok bool) string {
	if ok {
		return "ok"
	}
	return "denied"
}

func TestACLMatrix(t *testing.T) {
	audit := &aclAudit{}
	principals := []string{"admin", "alice", "reader", "writer", "acladmin", "stranger"}
	certs := fixtures.TestCerts(t, principals...)
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: certs, Admin: "admin", Logger: slog.New(audit)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := map[string]*client.Client{}
	for _, p := range principals {
		clients[p] = c.ClientWith(t, c.ClientConfigAs(p))
	}
	admin := clients["admin"]
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	create := func(cl *client.Client, name string, mode client.OpenMode, opts ...client.OpenOption) *client.Handle {
		t.Helper()
		h, err := cl.Open(ctx, c.Name(name), mode|client.Create, opts...)
		must(err, "create "+name)
		return h
	}
	// The ACL files, and the nodes of the matrix.
	create(admin, "acl", client.Read|client.Write|client.Directory).Close()
	for name, ps := range refFiles {
		create(admin, "acl/"+name, client.Read|client.Write, client.WithContents([]byte(strings.Join(ps, "\n")+"\n"))).Close()
	}
	named := refNode{read: "readers", write: "writers", change: "acladmins", creator: "admin"}
	dh := create(admin, "d", client.Read|client.Write|client.Directory)
	_, err := dh.SetACL(ctx, client.ACL{Read: named.read, Write: named.write, ChangeACL: named.change})
	must(err, "name d's ACLs")
	create(admin, "d/f", client.Read|client.Write, client.WithContents([]byte("v"))).Close()
	home := create(admin, "home", client.Read|client.Write|client.Directory)
	_, err = home.SetACL(ctx, client.ACL{Write: "homew", ChangeACL: "homew"})
	must(err, "name home's ACLs")
	alice := clients["alice"]
	for _, n := range []string{"home/o", "home/od"} {
		mode := client.Read | client.Write
		if n == "home/od" {
			mode |= client.Directory
		}
		h := create(alice, n, mode)
		_, err := h.SetACL(ctx, client.ACL{}) // the default rule, creator alice
		must(err, "alice clears "+n)
		h.Close()
	}
	owned := refNode{creator: "alice"}
	// shared is everyone's to create in; shared/s is named like d/f, so hidden
	// from the same principals, in a directory they may write.
	ph := create(admin, "shared", client.Read|client.Write|client.Directory)
	_, err = ph.SetACL(ctx, client.ACL{Write: "everyone"})
	must(err, "name shared's ACLs")
	ph.Close()
	sh := create(admin, "shared/s", client.Read|client.Write, client.WithContents([]byte("s")))
	_, err = sh.SetACL(ctx, client.ACL{Read: named.read, Write: named.write, ChangeACL: named.change})
	must(err, "name shared/s's ACLs")
	sh.Close()
	nodes := []matrixNode{
		{"d", refNode{named.read, named.write, named.change, "admin", true}},
		{"d/f", named},
		{"home/o", owned},
		{"home/od", refNode{creator: "alice", dir: true}},
		{"shared", refNode{write: "everyone", creator: "admin", dir: true}},
		{"shared/s", named},
	}
	parentRef := map[string]refNode{ // the parents of the nodes, for creates
		"d": {creator: ""}, "d/f": nodes[0].ref, "home/o": {write: "homew", change: "homew", creator: "admin", dir: true},
		"home/od": {write: "homew", change: "homew", creator: "admin", dir: true}, "shared": {creator: ""}, "shared/s": nodes[4].ref,
	}

	checked := 0
	check := func(who, node, op string, got error, wantOut string) {
		t.Helper()
		checked++
		if out := aclOutcome(got); out != wantOut {
			t.Errorf("%s %s %s: got %s, want %s", who, op, node, out, wantOut)
		}
	}
	for _, n := range nodes {
		for _, who := range principals {
			cl := clients[who]
			r, w, ch := refAllowed(who, n.ref, refRead), refAllowed(who, n.ref, refWrite), refAllowed(who, n.ref, refChange)
			hidden := !r && !w
			openWant := func(ok bool) string {
				if hidden {
					return "not-found"
				}
				return want(ok)
			}
			dirFlag := client.OpenMode(0)
			if n.ref.dir {
				dirFlag = client.Directory
			}
			h, err := cl.Open(ctx, c.Name(n.name), client.Read|dirFlag)
			check(who, n.name, "open-read", err, openWant(r))
			if err == nil {
				h.Close()
			}
			h, err = cl.Open(ctx, c.Name(n.name), client.Write|dirFlag)
			check(who, n.name, "open-write", err, openWant(w))
			if err == nil {
				h.Close()
			}
			// A transaction needs what its parts need, and a check
			// needs read; a name the caller can neither read nor write
			// answers as a missing one.
			_, err = cl.Txn(ctx).If(client.Exists(c.Name(n.name))).Commit()
			check(who, n.name, "txn-check-exists", err, openWant(r))
			if n.ref.dir {
				child := c.Name(n.name + "/txn-" + who)
				_, err = cl.Txn(ctx).Then(client.OpCreate(child, nil)).Commit()
				check(who, n.name, "txn-create-child", err, openWant(w))
				if err == nil {
					childRef := n.ref
					childRef.creator = who
					_, err = cl.Txn(ctx).Then(client.OpDelete(child)).Commit()
					check(who, child, "txn-delete", err, want(refAllowed(who, childRef, refWrite)))
				}
			} else {
				_, err = cl.Txn(ctx).Then(client.OpSet(c.Name(n.name), []byte("by "+who))).Commit()
				check(who, n.name, "txn-set", err, openWant(w))
			}
			if hidden {
				continue // no handle to try the rest with: the node is invisible
			}
			mode := dirFlag
			if r {
				mode |= client.Read
			}
			if w {
				mode |= client.Write
			}
			h, err = cl.Open(ctx, c.Name(n.name), mode)
			must(err, fmt.Sprintf("%s opens %s with the modes it holds", who, n.name))
			_, err = h.GetStat(ctx)
			check(who, n.name, "stat", err, want(r))
			if n.ref.dir {
				_, err = h.ReadDir(ctx)
				check(who, n.name, "readdir", err, want(r))
				// A subtree watch is a read of the directory.
				sw, err := h.WatchSubtree(ctx)
				check(who, n.name, "watch-subtree", err, want(r))
				if err == nil {
					sw.Stop()
				}
				child := n.name + "/by-" + who
				ch, err := cl.Open(ctx, c.Name(child), client.Write|client.Create)
				check(who, n.name, "create-child", err, want(w))
				if err == nil {
					// The creator owns what it creates; the child
					// inherits the directory's names.
					err = ch.Delete(ctx)
					childRef := n.ref
					childRef.creator = who
					check(who, child, "delete", err, want(refAllowed(who, childRef, refWrite)))
					ch.Close()
				}
				// A sequential create is a create: write on the
				// directory, whatever name it makes.
				sq, err := cl.Open(ctx, c.Name(n.name+"/seq-"+who+"-"), client.Write|client.Create|client.Sequential)
				check(who, n.name, "create-sequential-child", err, want(w))
				if err == nil {
					if !strings.HasPrefix(sq.Name(), c.Name(n.name+"/seq-"+who+"-")) {
						t.Errorf("%s made %s", who, sq.Name())
					}
					childRef := n.ref
					childRef.creator = who
					err = sq.Delete(ctx)
					check(who, sq.Name(), "delete", err, want(refAllowed(who, childRef, refWrite)))
					sq.Close()
				}
			} else {
				_, _, err = h.GetContentsAndStat(ctx)
				check(who, n.name, "read", err, want(r))
				if w {
					// A write needs a handle opened for writing, which
					// only writers have; the rest were refused at open.
					check(who, n.name, "write", h.SetContents(ctx, []byte("by "+who)), "ok")
				}
			}
			if w {
				got, err := h.TryAcquire(ctx, client.Exclusive)
				check(who, n.name, "acquire", err, "ok")
				if got {
					seq, err := h.GetSequencer(ctx)
					check(who, n.name, "get-sequencer", err, "ok")
					// Checking a sequencer reads the lock's state: a
					// holder without read hears what it would of a lock
					// whose file is gone (see hidden names below).
					valid, err := cl.CheckSequencer(ctx, seq)
					check(who, n.name, "check-sequencer", err, "ok")
					if valid != r {
						t.Errorf("%s: sequencer of its held lock of %s: valid %v, want %v", who, n.name, valid, r)
					}
					check(who, n.name, "release", h.Release(ctx), "ok")
				}
				// A multi-lock needs what a lock needs, on each of its
				// locks.
				got, err = cl.TryAcquireAll(ctx, h)
				check(who, n.name, "acquire-multi", err, "ok")
				if got {
					check(who, n.name, "release-multi", cl.ReleaseAll(ctx, h), "ok")
				}
			}
			cur := client.ACL{Read: n.ref.read, Write: n.ref.write, ChangeACL: n.ref.change}
			_, err = h.SetACL(ctx, cur)
			check(who, n.name, "set-acl", err, want(ch))
			h.Close()
		}
	}
	// A semaphore's permit needs what a lock needs: write, with the
	// handle opened for writing; a principal that may not read or write
	// it finds no such name.
	semRef := refNode{named.read, named.write, named.change, "admin", false}
	sem, err := admin.OpenSemaphore(ctx, c.Name("d/sem"), 2)
	must(err, "admin makes d/sem")
	sem.Close()
	for _, who := range principals {
		r, w := refAllowed(who, semRef, refRead), refAllowed(who, semRef, refWrite)
		s, err := clients[who].OpenSemaphore(ctx, c.Name("d/sem"), 2)
		outcome := want(w)
		if !r && !w {
			outcome = "not-found"
		}
		check(who, "d/sem", "open-semaphore", err, outcome)
		if err != nil {
			continue
		}
		got, err := s.TryAcquire(ctx)
		check(who, "d/sem", "acquire-permit", err, "ok")
		if got {
			check(who, "d/sem", "release-permit", s.Release(ctx), "ok")
		}
		s.Close()
	}
	checked += hiddenNamesAnswerAsMissing(t, ctx, c, clients, nodes, parentRef)
	checked += sessionsAreOwnOnly(t, ctx, c, certs, clients)
	checked += subtreeWatchesShowOnlyReadable(t, ctx, c, clients, nodes)
	checked += listingsAndEventsShowOnlyVisible(t, ctx, c, clients, nodes)

	// Acquire without write: a read-only handle is refused by the handle
	// mode; so is a writer-less principal holding a write handle. The one
	// way to hold a write handle without write permission is to lose the
	// permission after opening: revocation.
	wh, err := clients["writer"].Open(ctx, c.Name("d/f"), client.Write)
	must(err, "writer opens d/f")
	fileW := c.Name("acl/writers")
	writersH, err := admin.Open(ctx, fileW, client.Read|client.Write)
	must(err, "admin opens acl/writers")
	must(writersH.SetContents(ctx, []byte("nobody\n")), "revoke writer")
	_, err = wh.TryAcquire(ctx, client.Exclusive)
	check("writer", "d/f", "acquire-after-revocation", err, "denied")
	_, err = clients["writer"].TryAcquireAll(ctx, wh)
	check("writer", "d/f", "acquire-multi-after-revocation", err, "denied")
	check("writer", "d/f", "write-after-revocation", wh.SetContents(ctx, []byte("x")), "denied")
	must(writersH.SetContents(ctx, []byte("writer\n")), "restore writer")
	_, err = wh.TryAcquire(ctx, client.Exclusive)
	check("writer", "d/f", "acquire-after-restore", err, "ok")
	must(wh.Release(ctx), "writer releases")
	wh.Close()
	// An ACL file that does not parse is refused, and changes nothing.
	err = writersH.SetContents(ctx, []byte("two words\n"))
	if !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("writing an unparsable ACL file: %v, want bad request", err)
	}
	t.Logf("ACL matrix: %d principals x %d nodes, %d checks", len(principals), len(nodes), checked)
	if t.Failed() {
		return
	}

	t.Run("RevocationBeatsTheCacheAndEvents", func(t *testing.T) {
		reader := clients["reader"]
		rh, err := reader.Open(ctx, c.Name("d/f"), client.Read, client.WithEvents(client.OnContentsModified))
		must(err, "reader opens d/f")
		defer rh.Close()
		create(admin, "pub", client.Read|client.Write).Close()
		ph, err := reader.Open(ctx, c.Name("pub"), client.Read, client.WithEvents(client.OnContentsModified))
		must(err, "reader opens pub")
		defer ph.Close()
		for range 2 {
			_, _, err := rh.GetContentsAndStat(ctx)
			must(err, "reader reads d/f")
		}
		hits := lcadmin.New(reader).CacheStats().Hits
		if hits == 0 {
			t.Fatal("the reader's second read was not a cache hit: the test would prove nothing about the cache")
		}
		readersH, err := admin.Open(ctx, c.Name("acl/readers"), client.Read|client.Write)
		must(err, "admin opens acl/readers")
		defer readersH.Close()
		must(readersH.SetContents(ctx, []byte("# nobody\n")), "revoke reader")
		_, _, err = rh.GetContentsAndStat(ctx)
		check("reader", "d/f", "cached-read-after-revocation", err, "denied")
		// No event for d/f reaches the reader: write d/f, then pub; the
		// reader's events are delivered in order, so once pub's is on
		// its handle's stream, one for d/f would be on rh's already.
		fw, err := admin.Open(ctx, c.Name("d/f"), client.Write)
		must(err, "admin opens d/f")
		must(fw.SetContents(ctx, []byte("secret")), "admin writes d/f")
		fw.Close()
		pw, err := admin.Open(ctx, c.Name("pub"), client.Write)
		must(err, "admin opens pub")
		must(pw.SetContents(ctx, []byte("hello")), "admin writes pub")
		pw.Close()
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case ev := <-ph.Events():
				if ev.Path == c.Name("pub") && ev.Kind == client.ContentsModified {
					break wait
				}
			case <-deadline:
				t.Fatal("the reader never heard of the write to pub")
			}
		}
		for {
			select {
			case ev := <-rh.Events():
				if ev.Kind == client.ContentsModified {
					t.Fatalf("reader was told of a change to d/f it may no longer read: %+v", ev)
				}
				continue
			default:
			}
			break
		}
		// Revocation holds across a master fail-over (it is replicated).
		c.StopMaster()
		c.WaitForMaster(30 * time.Second)
		_, _, err = rh.GetContentsAndStat(ctx)
		check("reader", "d/f", "read-after-failover", err, "denied")
		must(readersH.SetContents(ctx, []byte("reader\n")), "restore reader")
		data, _, err := rh.GetContentsAndStat(ctx)
		if err != nil || string(data) != "secret" {
			t.Fatalf("reader after restore: %q, %v", data, err)
		}
	})

	t.Run("Audit", func(t *testing.T) {
		// Every denial is logged once with who, what and where.
		if n := audit.count("principal", "stranger", "op", "SetACL", "result", "permission denied"); n == 0 {
			t.Errorf("no audit line for the stranger's denied SetACL")
		}
		if n := audit.count("principal", "writer", "op", "Acquire", "path", c.Name("d/f"), "result", "permission denied"); n != 1 {
			t.Errorf("the revoked writer's denied acquire is in the audit log %d times, want once", n)
		}
		if n := audit.count("principal", "admin", "op", "SetContents", "path", c.Name("acl/readers"), "result", "ok"); n < 2 {
			t.Errorf("ACL file rewrites audited %d times, want at least 2", n)
		}
		audit.mu.Lock()
		defer audit.mu.Unlock()
		for _, l := range audit.lines {
			for _, v := range l {
				if strings.Contains(v, "secret") || strings.Contains(v, "PRIVATE KEY") {
					t.Errorf("audit line carries contents or key material: %v", l)
				}
			}
		}
	})
}

// A session belongs to the principal that created it: another principal
// presenting its id (a guessed small integer) is refused, and the session
// is unharmed.
func TestSessionBoundToPrincipal(t *testing.T) {
	set := fixtures.TestCerts(t, "alice", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	session := alice.Session()
	conf := set.ClientTLS(t, "bob").Clone()
	conf.ServerName = "127.0.0.1"
	raw, err := tls.Dial("tcp", c.Addrs()[0], conf)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte{wire.RPCMultiplex}); err != nil {
		t.Fatal(err)
	}
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	mux, err := yamux.Client(raw, ycfg)
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	st, err := mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	if err := wire.WriteMessage(st, &wire.Header{Method: wire.MethodKeepAlive, Session: session}, &wire.KeepAliveRequest{Prompt: true}); err != nil {
		t.Fatal(err)
	}
	var status wire.Status
	if err := wire.ReadMessage(st, &status); err != nil {
		t.Fatal(err)
	}
	if status.Code != wire.CodePermission {
		t.Fatalf("bob's KeepAlive of alice's session %d: %v %q, want permission denied", session, status.Code, status.Msg)
	}
	if _, err := lcadmin.New(alice).Sessions(ctx); err != nil {
		t.Fatalf("alice's session after the attempt: %v", err)
	}
}
