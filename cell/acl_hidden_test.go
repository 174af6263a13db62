package cell_test

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/wire"
)

// The ACL matrix's checks of every answer that could name something the
// caller may not see: a name the caller may neither read nor write answers
// each call exactly as a missing name does (wire code and message, the
// names swapped), sequencers of locks the caller may not read check as
// locks whose file is gone, and the session list shows a non-admin only
// its own principal's sessions.

// matrixNode is one node of the ACL matrix with its reference ACL.
type matrixNode struct {
	name string
	ref  refNode
}

// answerOf renders a call's outcome for comparison: the wire code, the
// wire message and the client's whole error text.
func answerOf(err error) string {
	if err == nil {
		return "ok"
	}
	var we *wire.Error
	if !errors.As(err, &we) {
		return "untyped: " + err.Error()
	}
	return we.Code.String() + " | " + we.Msg + " | " + err.Error()
}

// twinOf names a missing node in the same directory as rel.
func twinOf(rel string) string {
	if d := path.Dir(rel); d != "." {
		return d + "/zz" + path.Base(rel)
	}
	return "zz" + rel
}

var hiddenOpenModes = map[string]client.OpenMode{
	"read":                  client.Read,
	"write":                 client.Write,
	"read-dir":              client.Read | client.Directory,
	"write-dir":             client.Write | client.Directory,
	"create":                client.Read | client.Write | client.Create,
	"create-excl":           client.Read | client.Write | client.Create | client.Excl,
	"create-dir":            client.Read | client.Write | client.Create | client.Directory,
	"create-excl-dir":       client.Read | client.Write | client.Create | client.Excl | client.Directory,
	"create-ephemeral":      client.Read | client.Write | client.Create | client.Ephemeral,
	"create-excl-ephemeral": client.Read | client.Write | client.Create | client.Excl | client.Ephemeral,
}

// hiddenNamesAnswerAsMissing tries, as every principal that may neither
// read nor write a node of the matrix, every open and create of the node
// and of names below it, and compares each answer with the answer for the
// node's missing twin; then it checks sequencers of every node's lock as
// every principal. It returns the number of checks.
func hiddenNamesAnswerAsMissing(t *testing.T, ctx context.Context, c *fixtures.Cell, clients map[string]*client.Client,
	nodes []matrixNode, parentRef map[string]refNode) int {
	t.Helper()
	checked := 0
	open := func(cl *client.Client, rel string, mode client.OpenMode) string {
		h, err := cl.Open(ctx, c.Name(rel), mode)
		if err == nil {
			h.Close()
		}
		return answerOf(err)
	}
	whos := make([]string, 0, len(clients))
	for who := range clients {
		whos = append(whos, who)
	}
	slices.Sort(whos)
	txnAsked := map[string]bool{}
	for _, n := range nodes {
		twin := twinOf(n.name)
		for _, who := range whos {
			if refAllowed(who, n.ref, refRead) || refAllowed(who, n.ref, refWrite) {
				continue // visible: the matrix tried it
			}
			cl := clients[who]
			mayCreate := refAllowed(who, parentRef[n.name], refWrite)
			same := func(what, hidden, missing string) {
				t.Helper()
				checked++
				if got := strings.ReplaceAll(hidden, c.Name(n.name), c.Name(twin)); got != missing {
					t.Errorf("%s %s: the hidden %s answers\n\t%s\nthe missing %s answers\n\t%s", who, what, n.name, hidden, twin, missing)
				}
			}
			for mname, mode := range hiddenOpenModes {
				got := open(cl, n.name, mode)
				if mode&client.Create != 0 && mayCreate {
					// Where who may create, a taken name cannot be
					// created; it says so and no more.
					checked++
					if want := wire.CodeExists.String() + " | " + c.Name(n.name) + " already exists"; !strings.HasPrefix(got, want+" | ") {
						t.Errorf("%s %s %s where it may create: %s, want %s", who, mname, n.name, got, want)
					}
				} else {
					same(mname, got, open(cl, twin, mode))
				}
				for _, below := range []string{"/x", "/x/y"} {
					same(mname+" "+n.name+below, open(cl, n.name+below, mode), open(cl, twin+below, mode))
				}
			}
			// A transaction's checks and operations answer alike too
			// (asked by one principal per node: the answers depend on
			// the node's visibility, which the opens above cover for
			// every principal).
			if txnAsked[n.name] {
				continue
			}
			txnAsked[n.name] = true
			txn := func(rel string, cmp func(string) client.Cmp, op func(string) client.Op) string {
				t := cl.Txn(ctx)
				if cmp != nil {
					t.If(cmp(c.Name(rel)))
				}
				if op != nil {
					t.Then(op(c.Name(rel)))
				}
				_, err := t.Commit()
				return answerOf(err)
			}
			cmps := map[string]func(string) client.Cmp{
				"txn check-exists": client.Exists,
				"txn check-gen":    func(p string) client.Cmp { return client.GenerationIs(p, 1) },
				"txn check-held":   func(p string) client.Cmp { return client.Holds(p, 0) },
			}
			for what, cmp := range cmps {
				same(what, txn(n.name, cmp, nil), txn(twin, cmp, nil))
			}
			ops := map[string]func(string) client.Op{
				"txn set":    func(p string) client.Op { return client.OpSet(p, []byte("x")) },
				"txn delete": client.OpDelete,
			}
			for what, op := range ops {
				same(what, txn(n.name, nil, op), txn(twin, nil, op))
			}
			create := func(p string) client.Op { return client.OpCreate(p, nil) }
			same("txn create below", txn(n.name+"/x", nil, create), txn(twin+"/x", nil, create))
			if !mayCreate { // where who may create, the open creates above say what a taken name answers
				same("txn create", txn(n.name, nil, create), txn(twin, nil, create))
			}
		}
	}

	// A sequencer of a lock whose file is gone, for the answer a caller
	// without read must get.
	admin := clients["admin"]
	sequencerOf := func(rel string, mode client.OpenMode) ([]byte, *client.Handle) {
		t.Helper()
		h, err := admin.Open(ctx, c.Name(rel), mode)
		if err != nil {
			t.Fatalf("admin opens %s: %v", rel, err)
		}
		if got, err := h.TryAcquire(ctx, client.Exclusive); err != nil || !got {
			t.Fatalf("admin locks %s: %v %v", rel, got, err)
		}
		seq, err := h.GetSequencer(ctx)
		if err != nil {
			t.Fatalf("sequencer of %s: %v", rel, err)
		}
		return seq, h
	}
	goneSeq, gh := sequencerOf("gone", client.Read|client.Write|client.Create|client.Excl)
	if err := gh.Delete(ctx); err != nil {
		t.Fatalf("delete gone: %v", err)
	}
	gh.Close()
	gone, err := lcadmin.New(admin).SequencerStatus(ctx, goneSeq)
	if err != nil || gone.Valid {
		t.Fatalf("the sequencer of a deleted lock: %+v %v", gone, err)
	}
	for _, n := range nodes {
		mode := client.Write
		if n.ref.dir {
			mode |= client.Directory
		}
		seq, h := sequencerOf(n.name, mode)
		for _, who := range whos {
			checked++
			r := refAllowed(who, n.ref, refRead)
			st, err := lcadmin.New(clients[who]).SequencerStatus(ctx, seq)
			switch {
			case err != nil:
				t.Errorf("%s checks a sequencer of %s: %v", who, n.name, err)
			case st.Valid != r:
				t.Errorf("%s checks a sequencer of %s: valid %v (%s), want %v", who, n.name, st.Valid, st.Reason, r)
			case !r && strings.ReplaceAll(st.Reason, c.Name(n.name), c.Name("gone")) != gone.Reason:
				t.Errorf("%s checks a sequencer of %s it may not read: %q; of a lock whose file is gone: %q", who, n.name, st.Reason, gone.Reason)
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("admin releases %s: %v", n.name, err)
		}
		h.Close()
	}
	return checked
}

// sessionsAreOwnOnly checks that the admin lists every principal's
// session and anyone else only its own principal's, with a Total that
// counts no one else's.
func sessionsAreOwnOnly(t *testing.T, ctx context.Context, c *fixtures.Cell, certs *fixtures.CertSet, clients map[string]*client.Client) int {
	t.Helper()
	checked := 0
	for who, cl := range clients {
		checked++
		list, err := lcadmin.New(cl).Sessions(ctx)
		if err != nil {
			t.Errorf("%s lists sessions: %v", who, err)
			continue
		}
		seen := map[uint64]string{}
		for _, s := range list {
			seen[s.ID] = s.Principal
			if who != "admin" && s.Principal != who {
				t.Errorf("%s's session list shows session %d of %q (client %q, locks %v)", who, s.ID, s.Principal, s.Client, s.Locks)
			}
		}
		for other, ocl := range clients {
			p, ok := seen[ocl.Session()]
			switch {
			case (other == who || who == "admin") && (!ok || p != other):
				t.Errorf("%s's session list: %s's session %d listed %v as %q", who, other, ocl.Session(), ok, p)
			case other != who && who != "admin" && ok:
				t.Errorf("%s's session list shows %s's session %d", who, other, ocl.Session())
			}
		}
	}
	// Total, which the client does not show, on the wire.
	for _, who := range []string{"stranger", "admin"} {
		checked++
		var resp wire.ListSessionsResponse
		rawMasterCall(t, ctx, c, certs, who, wire.MethodListSessions, &wire.ListSessionsRequest{}, &resp)
		if int(resp.Total) != len(resp.Sessions) {
			t.Errorf("%s: ListSessions Total %d for %d sessions listed", who, resp.Total, len(resp.Sessions))
		}
		if who == "stranger" && resp.Total != 1 {
			t.Errorf("the stranger, with one session, is told of %d", resp.Total)
		}
		if who == "admin" && int(resp.Total) < len(clients) {
			t.Errorf("the admin is told of %d sessions, fewer than the %d principals' clients", resp.Total, len(clients))
		}
	}
	return checked
}

// rawMasterCall makes one call as principal who over its own mutual-TLS
// connection to the master, with no session, learning the master's epoch
// from a first refused try; resp receives the body.
func rawMasterCall(t *testing.T, ctx context.Context, c *fixtures.Cell, certs *fixtures.CertSet, who string, m wire.Method, req, resp any) {
	t.Helper()
	var epoch uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		conf := certs.ClientTLS(t, who).Clone()
		conf.ServerName = "127.0.0.1"
		mi := c.WaitForMaster(30 * time.Second)
		status := func() wire.Status {
			mux := dialRawMux(t, c.Addrs()[mi], conf)
			defer mux.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			status, err := mux.Call(ctx, wire.Header{Method: m, Epoch: epoch}, req, resp)
			if err != nil {
				t.Fatal(err)
			}
			return status
		}()
		switch {
		case status.Code == wire.CodeOK:
			return
		case time.Now().After(deadline):
			t.Fatalf("%s %s: %v %q", who, m, status.Code, status.Msg)
		case status.Code == wire.CodeBadEpoch:
			epoch = status.Epoch
		}
	}
}

// listingsAndEventsShowOnlyVisible checks, as every principal that may
// read a directory of the matrix, that its listing names exactly the
// matrix children the principal may see, and that a child-removed event of
// shared/s reaches exactly the watchers that may see shared/s. It deletes
// shared/s. It returns the number of checks.
func listingsAndEventsShowOnlyVisible(t *testing.T, ctx context.Context, c *fixtures.Cell, clients map[string]*client.Client,
	nodes []matrixNode) int {
	t.Helper()
	checked := 0
	visible := func(who string, n refNode) bool {
		return refAllowed(who, n, refRead) || refAllowed(who, n, refWrite)
	}
	for _, d := range nodes {
		if !d.ref.dir {
			continue
		}
		for who, cl := range clients {
			if !refAllowed(who, d.ref, refRead) {
				continue
			}
			h, err := cl.Open(ctx, c.Name(d.name), client.Read|client.Directory)
			if err != nil {
				t.Fatalf("%s opens %s: %v", who, d.name, err)
			}
			ents, err := h.ReadDir(ctx)
			h.Close()
			if err != nil {
				t.Fatalf("%s lists %s: %v", who, d.name, err)
			}
			for _, n := range nodes {
				if path.Dir(n.name) != d.name {
					continue
				}
				checked++
				listed := slices.ContainsFunc(ents, func(e client.DirEntry) bool { return e.Name == path.Base(n.name) })
				if listed != visible(who, n.ref) {
					t.Errorf("%s lists %s: %s listed %v, want %v", who, d.name, path.Base(n.name), listed, visible(who, n.ref))
				}
			}
		}
	}

	// Every principal may read shared; shared/s is hidden from some.
	var s matrixNode
	for _, n := range nodes {
		if n.name == "shared/s" {
			s = n
		}
	}
	watched := c.Name("shared")
	watchers := map[string]*client.Handle{}
	for who, cl := range clients {
		h, err := cl.Open(ctx, watched, client.Read|client.Directory, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
		if err != nil {
			t.Fatalf("open shared with events: %v", err)
		}
		defer h.Close()
		watchers[who] = h
	}
	admin := clients["admin"]
	sh, err := admin.Open(ctx, c.Name("shared/s"), client.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Delete(ctx); err != nil {
		t.Fatalf("delete shared/s: %v", err)
	}
	sh.Close()
	// Then a visible child comes and goes: its removal, in order after
	// shared/s's, ends each watcher's wait.
	vh, err := admin.Open(ctx, c.Name("shared/v"), client.Read|client.Write|client.Create|client.Excl)
	if err != nil {
		t.Fatal(err)
	}
	if err := vh.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	vh.Close()
	for who, h := range watchers {
		checked++
		heard := false
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case ev, ok := <-h.Events():
				if !ok {
					t.Fatalf("%s's events closed", who)
				}
				if ev.Path != watched {
					continue
				}
				switch path.Base(ev.Child) {
				case "s":
					heard = true
				case "v":
					if ev.Kind == client.ChildRemoved {
						break wait
					}
				}
			case <-deadline:
				t.Fatalf("%s never heard shared/v removed", who)
			}
		}
		if heard != visible(who, s.ref) {
			t.Errorf("%s heard of shared/s's removal: %v, want %v", who, heard, visible(who, s.ref))
		}
	}
	return checked
}

// A sequencer attached to a handle is checked on every call; once the
// caller may no longer read the lock's file, it is stale as if the file
// were gone, for reads (checked by the master) and writes (by the state
// machine) alike, whatever the lock's state.
func TestACLAttachedSequencerNeedsRead(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "reader")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	reader := c.ClientWith(t, c.ClientConfigAs("reader"))
	mk := func(rel string, mode client.OpenMode, contents string, a *client.ACL) *client.Handle {
		t.Helper()
		h, err := admin.Open(ctx, c.Name(rel), mode|client.Read|client.Write|client.Create, client.WithContents([]byte(contents)))
		if err != nil {
			t.Fatalf("create %s: %v", rel, err)
		}
		if a != nil {
			if _, err := h.SetACL(ctx, *a); err != nil {
				t.Fatalf("SetACL %s: %v", rel, err)
			}
		}
		return h
	}
	mk("acl", client.Directory, "", nil).Close()
	readers := mk("acl/readers", 0, "reader\n", nil)
	mk("acl/pubw", 0, "reader\n", nil).Close()
	lock := mk("lock", 0, "", &client.ACL{Read: "readers"})
	mk("pub", 0, "p", &client.ACL{Write: "pubw"}).Close()
	if got, err := lock.TryAcquire(ctx, client.Exclusive); err != nil || !got {
		t.Fatalf("admin locks: %v %v", got, err)
	}
	seq, err := lock.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ph, err := reader.Open(ctx, c.Name("pub"), client.Read|client.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := ph.SetSequencer(ctx, seq); err != nil {
		t.Fatalf("reader attaches a sequencer of a lock it may read: %v", err)
	}
	if _, _, err := ph.GetContentsAndStat(ctx); err != nil {
		t.Fatalf("fenced read: %v", err)
	}
	if err := ph.SetContents(ctx, []byte("fenced")); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	if err := readers.SetContents(ctx, []byte("# nobody\n")); err != nil {
		t.Fatal(err)
	}
	gone := c.Name("lock") + " no longer exists"
	_, _, rerr := ph.GetContentsAndStat(ctx)
	werr := ph.SetContents(ctx, []byte("after"))
	for what, err := range map[string]error{"read": rerr, "write": werr} {
		var we *wire.Error
		if !errors.Is(err, client.ErrStaleSequencer) || !errors.As(err, &we) || we.Msg != gone {
			t.Errorf("fenced %s after losing read on the still held lock: %v, want stale %q", what, err, gone)
		}
	}
	if st, err := lcadmin.New(reader).SequencerStatus(ctx, seq); err != nil || st.Valid || st.Reason != gone {
		t.Errorf("reader checks the sequencer after losing read: %+v %v, want stale %q", st, err, gone)
	}
	if st, err := lcadmin.New(admin).SequencerStatus(ctx, seq); err != nil || !st.Valid {
		t.Errorf("the admin checks the sequencer: %+v %v, want valid", st, err)
	}
}
