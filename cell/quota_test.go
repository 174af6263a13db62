package cell_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/fsm"
	"lockcell/master"
)

// Quotas through real cells: each one reached gives client.ErrQuotaExceeded
// with a message naming the quota and its limit, harms nothing stored, and
// leaves reads, deletes, locks and sessions working; the counts are exact
// under concurrent creates and the same on every replica, after a
// fail-over and after a restart from a snapshot.

// wantQuotaErr fails unless err is the typed quota error and its message
// mentions each of mention.
func wantQuotaErr(t *testing.T, what string, err error, mention ...string) {
	t.Helper()
	if !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("%s: %v, want a quota error", what, err)
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("%s: the error %q does not say %q", what, err, m)
		}
	}
}

// usageEverywhere waits until every running replica of c counts want.
func usageEverywhere(t *testing.T, c *fixtures.Cell, n int, want fsm.Usage) {
	t.Helper()
	pollUntil(t, 30*time.Second, fmt.Sprintf("every replica to count %+v", want), func() bool {
		for i := range n {
			if s := c.Server(i); s != nil && s.Replica().FSM().Usage() != want {
				return false
			}
		}
		return true
	})
}

// A full cell refuses creates and growing writes with the typed error and
// keeps serving everything else; a delete or a shrinking write makes room.
func TestQuotaFullCellKeepsServing(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{SessionLimits: master.Limits{Nodes: 4, ContentBytes: 64}})
	ctx := ctxT(t, 60*time.Second)
	cl, other := c.Client(t), c.Client(t)
	const rwc = client.Read | client.Write | client.Create
	dir := mustOpen(t, ctx, cl, c.Name("d"), rwc|client.Directory)
	a := mustOpen(t, ctx, cl, c.Name("d/a"), rwc, client.WithContents(bytes.Repeat([]byte("a"), 32)))
	b := mustOpen(t, ctx, cl, c.Name("d/b"), rwc, client.WithContents(bytes.Repeat([]byte("b"), 32)))

	// Contents full at 64 bytes: a new file with contents, and a write that
	// grows one, are refused; the old contents stand.
	_, err := cl.Open(ctx, c.Name("d/big"), rwc, client.WithContents([]byte("x")))
	wantQuotaErr(t, "create with contents in a full cell", err, "content quota", "64")
	if _, err := cl.Open(ctx, c.Name("d/big"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused create left a node: open gives %v", err)
	}
	st0, _ := a.GetStat(ctx)
	err = a.SetContents(ctx, bytes.Repeat([]byte("A"), 33))
	wantQuotaErr(t, "growing write in a full cell", err, "content quota", "64")
	if data, st, err := a.GetContentsAndStat(ctx); err != nil || !bytes.Equal(data, bytes.Repeat([]byte("a"), 32)) || st.ContentGen != st0.ContentGen {
		t.Fatalf("a refused write changed the file: %q %+v %v", data, st, err)
	}
	if err := a.SetContents(ctx, bytes.Repeat([]byte("A"), 32)); err != nil {
		t.Fatalf("a write of the same size in a full cell: %v", err)
	}

	// An empty file is the fourth node; the fifth is refused, ephemeral or not.
	c4 := mustOpen(t, ctx, cl, c.Name("d/c"), rwc)
	_, err = cl.Open(ctx, c.Name("d/e"), rwc)
	wantQuotaErr(t, "fifth node", err, "node quota", "limit is 4")
	_, err = other.Open(ctx, c.Name("d/e"), rwc|client.Ephemeral)
	wantQuotaErr(t, "fifth node, ephemeral", err, "node quota")
	_, err = cl.Open(ctx, c.Name("e"), rwc|client.Directory)
	wantQuotaErr(t, "fifth node, a directory", err, "node quota")

	// Everything but growth works meanwhile: opens of existing nodes (with
	// the create flag too), reads, listings, locks, another session's calls.
	mustOpen(t, ctx, other, c.Name("d/a"), rwc).Close()
	if ents, err := dir.ReadDir(ctx); err != nil || len(ents) != 3 {
		t.Fatalf("listing of a full cell: %+v %v", ents, err)
	}
	if ok, err := b.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("lock in a full cell: %v %v", ok, err)
	}
	ob := mustOpen(t, ctx, other, c.Name("d/b"), client.Read|client.Write)
	got := make(chan error, 1)
	go func() { got <- ob.Acquire(ctx, client.Exclusive) }()
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a queued acquire in a full cell: %v", err)
	}
	if data, _, err := ob.GetContentsAndStat(ctx); err != nil || len(data) != 32 {
		t.Fatalf("read in a full cell: %q %v", data, err)
	}

	// A shrinking write frees bytes, a delete frees a node.
	if err := ob.SetContents(ctx, []byte("b")); err != nil {
		t.Fatalf("a shrinking write in a full cell: %v", err)
	}
	if err := a.SetContents(ctx, bytes.Repeat([]byte("A"), 63)); err != nil {
		t.Fatalf("growing into freed bytes: %v", err)
	}
	if err := c4.Delete(ctx); err != nil {
		t.Fatalf("delete in a full cell: %v", err)
	}
	mustOpen(t, ctx, cl, c.Name("d/e"), rwc).Close()
	usageEverywhere(t, c, 1, fsm.Usage{Nodes: 4, ContentBytes: 64})
	if cl.Session() == 0 || other.Session() == 0 {
		t.Fatal("a session was lost while the cell was full")
	}
}

// Creates racing past the node quota from many sessions at once: exactly
// the room left is taken, every other create gets the typed error, and no
// replica counts more than the quota.
func TestQuotaConcurrentCreatesNeverOvershoot(t *testing.T) {
	const quota, clients, perClient = 10, 4, 8
	c := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{Nodes: quota}})
	ctx := ctxT(t, 90*time.Second)
	cls := make([]*client.Client, clients)
	for i := range cls {
		cls[i] = c.Client(t)
	}
	mustOpen(t, ctx, cls[0], c.Name("race"), client.Read|client.Write|client.Create|client.Directory).Close()
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	start := make(chan struct{})
	for i, cl := range cls {
		for j := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				h, err := cl.Open(ctx, c.Name(fmt.Sprintf("race/f%d-%d", i, j)), client.Read|client.Write|client.Create)
				if err == nil {
					h.Close()
				}
				errs <- err
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	made, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, client.ErrQuotaExceeded):
			refused++
		default:
			t.Fatalf("a racing create failed otherwise: %v", err)
		}
	}
	if made != quota-1 || refused != clients*perClient-made {
		t.Fatalf("%d creates succeeded and %d were refused; want exactly %d (the quota less the directory) to succeed", made, refused, quota-1)
	}
	ents, err := mustOpen(t, ctx, cls[1], c.Name("race"), client.Read).ReadDir(ctx)
	if err != nil || len(ents) != quota-1 {
		t.Fatalf("the directory lists %d children (%v), want %d", len(ents), err, quota-1)
	}
	usageEverywhere(t, c, 3, fsm.Usage{Nodes: quota})
}

// The per-principal quota counts the nodes each principal created that
// still exist; other principals are counted apart and the admin is exempt.
func TestQuotaPerPrincipal(t *testing.T) {
	set := fixtures.TestCerts(t, "admin", "alice", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set, Admin: "admin", SessionLimits: master.Limits{NodesPerPrincipal: 2}})
	ctx := ctxT(t, 60*time.Second)
	admin, alice, bob := c.ClientWith(t, c.ClientConfigAs("admin")), c.ClientWith(t, c.ClientConfigAs("alice")), c.ClientWith(t, c.ClientConfigAs("bob"))
	const rwc = client.Read | client.Write | client.Create
	// The admin makes three nodes (over the quota: exempt) and a directory
	// everyone may create in (a fourth).
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	mustOpen(t, ctx, admin, c.Name("acl/all"), rwc, client.WithContents([]byte("alice\nbob\n"))).Close()
	pub := mustOpen(t, ctx, admin, c.Name("pub"), rwc|client.Directory)
	if _, err := pub.SetACL(ctx, client.ACL{Write: "all"}); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, ctx, admin, c.Name("pub/admin1"), rwc).Close()

	a1 := mustOpen(t, ctx, alice, c.Name("pub/a1"), rwc)
	mustOpen(t, ctx, alice, c.Name("pub/a2"), rwc|client.Directory).Close()
	_, err := alice.Open(ctx, c.Name("pub/a3"), rwc)
	wantQuotaErr(t, "alice's third node", err, `"alice"`, "limit is 2")
	if _, err := bob.Open(ctx, c.Name("pub/a3"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused create left a node: %v", err)
	}
	mustOpen(t, ctx, bob, c.Name("pub/b1"), rwc).Close()
	mustOpen(t, ctx, admin, c.Name("pub/admin2"), rwc).Close()
	// alice still reads, writes and locks what she has.
	if err := a1.SetContents(ctx, []byte("still mine")); err != nil {
		t.Fatalf("alice writes at her quota: %v", err)
	}
	if ok, err := a1.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatalf("alice locks at her quota: %v %v", ok, err)
	}
	if err := a1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A delete gives her room again.
	if err := a1.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, ctx, alice, c.Name("pub/a3"), rwc).Close()
	sm := c.Server(0).Replica().FSM()
	if a, b, ad := sm.PrincipalNodes("alice"), sm.PrincipalNodes("bob"), sm.PrincipalNodes("admin"); a != 2 || b != 1 || ad != 5 {
		t.Fatalf("nodes by creator: alice %d, bob %d, admin %d; want 2, 1, 5", a, b, ad)
	}
}

// The counts are derived from the replicated state: a new master after a
// fail-over enforces the quota where the old one left it, and a replica
// restarted from a snapshot counts the same as the others.
func TestQuotaSurvivesFailoverAndRestart(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{SessionLimits: master.Limits{Nodes: 5, ContentBytes: 100}})
	ctx := ctxT(t, 120*time.Second)
	cl := c.Client(t)
	const rwc = client.Read | client.Write | client.Create
	var hs []*client.Handle
	for i := range 5 {
		hs = append(hs, mustOpen(t, ctx, cl, c.Name(fmt.Sprint("f", i)), rwc, client.WithContents(bytes.Repeat([]byte("x"), 20))))
	}
	_, err := cl.Open(ctx, c.Name("f5"), rwc)
	wantQuotaErr(t, "sixth node", err, "limit is 5")
	full := fsm.Usage{Nodes: 5, ContentBytes: 100}
	usageEverywhere(t, c, 3, full)
	for i := range 3 {
		if err := c.Server(i).Replica().Snapshot(); err != nil {
			t.Fatalf("snapshot replica %d: %v", i, err)
		}
	}

	old := c.StopMaster()
	c.WaitForMaster(30 * time.Second)
	_, err = cl.Open(ctx, c.Name("f5"), rwc)
	wantQuotaErr(t, "sixth node after a fail-over", err, "limit is 5")
	err = hs[0].SetContents(ctx, bytes.Repeat([]byte("x"), 21))
	wantQuotaErr(t, "growing write after a fail-over", err, "limit of 100")
	if err := hs[0].Delete(ctx); err != nil {
		t.Fatalf("delete after a fail-over: %v", err)
	}
	h5 := mustOpen(t, ctx, cl, c.Name("f5"), rwc)
	if err := h5.SetContents(ctx, bytes.Repeat([]byte("y"), 20)); err != nil {
		t.Fatalf("write into freed bytes after a fail-over: %v", err)
	}
	_, err = cl.Open(ctx, c.Name("f6"), rwc)
	wantQuotaErr(t, "sixth node again", err, "limit is 5")

	// The stopped replica restarts from its snapshot and the log after it.
	c.Start(old)
	usageEverywhere(t, c, 3, full)
	hashes := map[[32]byte]bool{}
	pollUntil(t, 30*time.Second, "equal state on every replica", func() bool {
		clear(hashes)
		applied := map[uint64]bool{}
		for i := range 3 {
			idx, h, err := c.Server(i).Replica().FSM().StateHash()
			if err != nil {
				t.Fatal(err)
			}
			applied[idx], hashes[h] = true, true
		}
		return len(applied) == 1 && len(hashes) == 1
	})
}

// Opening an existing node never counts against the node quota, so a full
// cell's clients keep re-opening what they use, also after their
// handles were closed.
func TestQuotaReopenInFullCell(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{SessionLimits: master.Limits{Nodes: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client(t)
	const rwc = client.Read | client.Write | client.Create
	mustOpen(t, ctx, cl, c.Name("only"), rwc).Close()
	for range 3 {
		mustOpen(t, ctx, cl, c.Name("only"), rwc, client.WithoutCache()).Close()
	}
	_, err := cl.Open(ctx, c.Name("second"), rwc)
	wantQuotaErr(t, "second node", err, "limit is 1")
}

// One principal filling its content share leaves the others their room:
// its own growth is refused naming the per-principal quota, the others'
// growing writes go on; when the others have filled the cell up to the
// admin's reserve, the admin still writes a 2-byte ACL file, makes nodes
// and repairs, and deletes and shrinking writes work for everyone.
func TestQuotaContentSharesAndAdminReserve(t *testing.T) {
	const share, cellBytes, reserve = 1536, 4096, 512
	set := fixtures.TestCerts(t, "admin", "alice", "bob", "carol")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set, Admin: "admin", SessionLimits: master.Limits{
		ContentBytes: cellBytes, ContentBytesAdminReserve: reserve, ContentBytesPerPrincipal: share,
		Nodes: 14, NodesAdminReserve: 2}})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	alice, bob, carol := c.ClientWith(t, c.ClientConfigAs("alice")), c.ClientWith(t, c.ClientConfigAs("bob")), c.ClientWith(t, c.ClientConfigAs("carol"))
	const rwc = client.Read | client.Write | client.Create
	fill := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	// The admin's three nodes and the bytes of one ACL file: a directory
	// everyone writes.
	const acl = "alice\nbob\ncarol\n"
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	all := mustOpen(t, ctx, admin, c.Name("acl/all"), rwc, client.WithContents([]byte(acl)))
	pub := mustOpen(t, ctx, admin, c.Name("pub"), rwc|client.Directory)
	if _, err := pub.SetACL(ctx, client.ACL{Write: "all"}); err != nil {
		t.Fatal(err)
	}

	// alice fills her share; her growth is refused, a new file too.
	a1 := mustOpen(t, ctx, alice, c.Name("pub/a1"), rwc, client.WithContents(fill(share)))
	perPrincipal := fmt.Sprintf("limit of %d per principal", share)
	wantQuotaErr(t, "alice grows her full share", a1.SetContents(ctx, fill(share+1)), `principal "alice"`, perPrincipal)
	_, err := alice.Open(ctx, c.Name("pub/a2"), rwc, client.WithContents([]byte("y")))
	wantQuotaErr(t, "alice's new file past her share", err, `principal "alice"`, perPrincipal)
	// bob's growing writes still succeed.
	b1 := mustOpen(t, ctx, bob, c.Name("pub/b1"), rwc, client.WithContents(fill(100)))
	for _, n := range []int{500, 1000, share} {
		if err := b1.SetContents(ctx, fill(n)); err != nil {
			t.Fatalf("bob grows his file to %d bytes while alice is at her share: %v", n, err)
		}
	}
	// bob may write alice's file, but its bytes are hers.
	bobOnA1 := mustOpen(t, ctx, bob, c.Name("pub/a1"), client.Read|client.Write)
	wantQuotaErr(t, "bob grows alice's file", bobOnA1.SetContents(ctx, fill(share+1)), `principal "alice"`)

	// carol fills the others' part of the cell: the ACL file, two shares
	// and hers make the quota less the admin's reserve.
	const carolBytes = cellBytes - reserve - len(acl) - 2*share
	c1 := mustOpen(t, ctx, carol, c.Name("pub/c1"), rwc, client.WithContents(fill(carolBytes)))
	wantQuotaErr(t, "carol's byte more", c1.SetContents(ctx, fill(carolBytes+1)),
		"content quota", fmt.Sprintf("limit of %d less the %d kept for the admin", cellBytes, reserve))
	_, err = bob.Open(ctx, c.Name("pub/b2"), rwc, client.WithContents([]byte("y")))
	wantQuotaErr(t, "bob's new file in the full cell", err, "kept for the admin")
	// The admin repairs: a 2-byte ACL file, a grown one, and a node.
	mustOpen(t, ctx, admin, c.Name("acl/fix"), rwc, client.WithContents([]byte("x\n"))).Close()
	if err := all.SetContents(ctx, []byte("alice\nbob\ncarol\ndave\n")); err != nil {
		t.Fatalf("the admin grows an ACL file in a full cell: %v", err)
	}
	if u := c.Server(0).Replica().FSM().Usage(); u.ContentBytes != cellBytes-reserve+2+5 {
		t.Fatalf("usage %+v, want %d bytes", u, cellBytes-reserve+2+5)
	}

	// Nodes likewise: 7 exist; the others make 5 more, the 13th is the
	// admin's.
	var cs []*client.Handle
	for i := range 5 {
		cs = append(cs, mustOpen(t, ctx, carol, c.Name(fmt.Sprint("pub/c", i+2)), rwc))
	}
	_, err = carol.Open(ctx, c.Name("pub/c7"), rwc)
	wantQuotaErr(t, "carol's node in the admin's reserve", err, "node quota", "the limit is 14 of which the last 2 are kept for the admin")
	mustOpen(t, ctx, admin, c.Name("acl/fix2"), rwc, client.WithContents([]byte("y\n"))).Close()

	// Deletes and shrinking writes work for everyone, and give room back.
	if err := b1.SetContents(ctx, fill(10)); err != nil {
		t.Fatalf("bob shrinks in a full cell: %v", err)
	}
	if err := a1.Delete(ctx); err != nil {
		t.Fatalf("alice deletes in a full cell: %v", err)
	}
	if err := cs[0].Delete(ctx); err != nil {
		t.Fatalf("carol deletes in a full cell: %v", err)
	}
	mustOpen(t, ctx, alice, c.Name("pub/a2"), rwc, client.WithContents(fill(share))).Close()
	sm := c.Server(0).Replica().FSM()
	if a, b, ca := sm.PrincipalContentBytes("alice"), sm.PrincipalContentBytes("bob"), sm.PrincipalContentBytes("carol"); a != share || b != 10 || ca != int64(carolBytes) {
		t.Fatalf("content by creator: alice %d, bob %d, carol %d", a, b, ca)
	}
	st := sm.QuotaStats("admin")
	if st.MaxPrincipalContentBytes != share || st.MaxPrincipalNodes != 5 {
		t.Fatalf("largest principal: %d bytes, %d nodes; want %d (alice's), 5 (carol's)", st.MaxPrincipalContentBytes, st.MaxPrincipalNodes, share)
	}
	if r := st.Refusals; r[fsm.QuotaContentBytesPerPrincipal] != 3 || r[fsm.QuotaContentBytes] != 2 || r[fsm.QuotaNodes] != 1 {
		t.Fatalf("refusals by quota %v", r)
	}
}

// Growing writes of one principal racing for the last bytes of its share,
// from several sessions and connections at once, take exactly the share:
// Raft orders them and apply admits those that fit. Every replica counts
// the same.
func TestQuotaConcurrentWritesNeverPassShare(t *testing.T) {
	const share, chunk, clients, perClient = 1000, 100, 4, 6
	set := fixtures.TestCerts(t, "admin", "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, Admin: "admin", SessionLimits: master.Limits{ContentBytesPerPrincipal: share}})
	ctx := ctxT(t, 120*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	const rwc = client.Read | client.Write | client.Create
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	mustOpen(t, ctx, admin, c.Name("acl/alice"), rwc, client.WithContents([]byte("alice\n"))).Close()
	if _, err := mustOpen(t, ctx, admin, c.Name("race"), rwc|client.Directory).SetACL(ctx, client.ACL{Write: "alice"}); err != nil {
		t.Fatal(err)
	}
	// Each of alice's sessions holds empty files of hers to grow.
	var hs [clients][perClient]*client.Handle
	for i := range clients {
		cl := c.ClientWith(t, c.ClientConfigAs("alice"))
		for j := range perClient {
			hs[i][j] = mustOpen(t, ctx, cl, c.Name(fmt.Sprintf("race/f%d-%d", i, j)), rwc, client.WithoutCache())
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	start := make(chan struct{})
	for i := range clients {
		for j := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- hs[i][j].SetContents(ctx, bytes.Repeat([]byte("z"), chunk))
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	wrote, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			wrote++
		case errors.Is(err, client.ErrQuotaExceeded):
			if !strings.Contains(err.Error(), `principal "alice"`) {
				t.Fatalf("a racing write was refused for another quota: %v", err)
			}
			refused++
		default:
			t.Fatalf("a racing write failed otherwise: %v", err)
		}
	}
	if wrote != share/chunk || refused != clients*perClient-wrote {
		t.Fatalf("%d writes succeeded and %d were refused; want exactly %d (the share) to succeed", wrote, refused, share/chunk)
	}
	pollUntil(t, 30*time.Second, "every replica to count alice's share", func() bool {
		for i := range 3 {
			if c.Server(i).Replica().FSM().PrincipalContentBytes("alice") != share {
				return false
			}
		}
		return true
	})
}
