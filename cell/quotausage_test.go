package cell_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/fsm"
	"lockcell/master"
	"lockcell/wire"
)

// QuotaUsage through a real TLS cell: a principal sees its own counts
// against the per-principal limits and the cell's against the cell-wide
// ones, with the admin's reserves; the figures are the ones the quotas
// decide by (the report says full exactly when the principal's next
// growth is refused, and not for the admin, who may use the reserve); a
// principal may not look at another's; the admin may, and sees who
// created the most.
func TestQuotaUsageReportsPrincipalAndCell(t *testing.T) {
	const (
		cellBytes, bytesReserve = 4096, 1024
		cellNodes, nodesReserve = 40, 4
		perPrincipalNodes       = 10
		perPrincipalBytes       = 3500
		sessionsPerPrincipal    = 7
		readRate                = 8 << 10 // about three QuotaUsage calls a second
	)
	set := fixtures.TestCerts(t, "admin", "alice", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: set, Admin: "admin", SessionLimits: master.Limits{
		ContentBytes: cellBytes, ContentBytesAdminReserve: bytesReserve, ContentBytesPerPrincipal: perPrincipalBytes,
		Nodes: cellNodes, NodesAdminReserve: nodesReserve, NodesPerPrincipal: perPrincipalNodes,
		SessionsPerPrincipal: sessionsPerPrincipal, HandlesPerPrincipal: 300, CacheRegistrationsPerPrincipal: 400,
		EventBytesPerPrincipal: 1 << 20, ReadBytesPerSecond: readRate}})
	ctx := ctxT(t, 60*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	bob1, bob2 := c.ClientWith(t, c.ClientConfigAs("bob")), c.ClientWith(t, c.ClientConfigAs("bob"))
	const rwc = client.Read | client.Write | client.Create
	fill := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }

	// The admin's three nodes: an ACL directory, an ACL file everyone is
	// in, and a directory everyone may write.
	const aclText = "alice\nbob\n"
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	mustOpen(t, ctx, admin, c.Name("acl/all"), rwc, client.WithContents([]byte(aclText))).Close()
	pub := mustOpen(t, ctx, admin, c.Name("pub"), rwc|client.Directory)
	if _, err := pub.SetACL(ctx, client.ACL{Read: "all", Write: "all"}); err != nil {
		t.Fatal(err)
	}
	// alice makes four files (1,000 bytes) and keeps them open; bob one
	// file of 50 bytes over two sessions.
	var aliceHandles []*client.Handle
	for i, n := range []int{100, 200, 300, 400} {
		aliceHandles = append(aliceHandles, mustOpen(t, ctx, alice, c.Name("pub/a"+string(rune('0'+i))), rwc, client.WithContents(fill(n))))
	}
	mustOpen(t, ctx, bob1, c.Name("pub/b"), rwc, client.WithContents(fill(50))).Close()
	if _, err := lcadmin.New(bob2).Sessions(ctx); err != nil { // bob2's session is live
		t.Fatal(err)
	}
	// alice reads through her cache: the master registers her as a cacher.
	if _, _, err := aliceHandles[0].GetContentsAndStat(ctx); err != nil {
		t.Fatal(err)
	}

	report := func(cl *client.Client, who string) *lcadmin.QuotaReport {
		t.Helper()
		r, err := lcadmin.New(cl).QuotaUsage(ctx, who)
		if err != nil {
			t.Fatalf("quota usage of %q: %v", who, err)
		}
		return r
	}
	limit := func(r *lcadmin.QuotaReport, name string) lcadmin.QuotaLimit {
		t.Helper()
		l, ok := r.Limit(name)
		if !ok {
			t.Fatalf("the report on %s has no limit %s: %+v", r.Principal, name, r.Limits)
		}
		return l
	}
	want := func(r *lcadmin.QuotaReport, name string, used, max, reserve int64, full bool) {
		t.Helper()
		l := limit(r, name)
		if l.Used != used || l.Max != max || l.Reserve != reserve || l.Full != full {
			t.Fatalf("%s's %s: %+v; want used %d, max %d, reserve %d, full %v", r.Principal, name, l, used, max, reserve, full)
		}
	}
	sm := c.Server(0).Replica().FSM()
	var aliceHandlesNow int
	_ = sm.Read(func(v fsm.View) error { aliceHandlesNow = v.PrincipalHandles("alice"); return nil })

	cellUsed := int64(len(aclText) + 1000 + 50)
	mine := report(alice, "")
	if mine.Principal != "alice" || mine.Admin || len(mine.TopByNodes) != 0 || len(mine.TopByContentBytes) != 0 {
		t.Fatalf("alice's own report: %+v", mine)
	}
	want(mine, wire.QuotaNodesPerPrincipal, 4, perPrincipalNodes, 0, false)
	want(mine, wire.QuotaContentBytesPerPrincipal, 1000, perPrincipalBytes, 0, false)
	want(mine, wire.QuotaSessionsPerPrincipal, 1, sessionsPerPrincipal, 0, false)
	want(mine, wire.QuotaHandlesPerPrincipal, int64(aliceHandlesNow), 300, 0, false)
	want(mine, wire.QuotaNodes, 3+4+1, cellNodes, nodesReserve, false)
	want(mine, wire.QuotaContentBytes, cellUsed, cellBytes, bytesReserve, false)
	want(mine, wire.QuotaSessions, 4, int64(master.DefaultLimits.Sessions), 0, false)
	if aliceHandlesNow < 4 {
		t.Fatalf("alice holds %d handles, want at least her 4", aliceHandlesNow)
	}
	regs := limit(mine, wire.QuotaCacheRegistrationsPerPrincipal)
	cellRegs := limit(mine, wire.QuotaCacheRegistrations)
	if regs.Used < 1 || regs.Max != 400 || cellRegs.Used < regs.Used || cellRegs.Used != int64(c.Server(0).Master().InvalidationStats().Registrations) {
		t.Fatalf("cache registrations: alice's %+v, the cell's %+v", regs, cellRegs)
	}
	if ev := limit(mine, wire.QuotaEventBytesPerPrincipal); ev.Max != 1<<20 || !ev.Bytes || ev.Used < 0 {
		t.Fatalf("alice's event bytes: %+v", ev)
	}
	// Every limit is there, per principal first, in the wire's order.
	var names []string
	for _, l := range mine.Limits {
		names = append(names, l.Name)
	}
	if got, want := len(names), 12; got != want || names[0] != wire.QuotaNodesPerPrincipal || names[6] != wire.QuotaNodes {
		t.Fatalf("limits reported: %q", names)
	}
	if again := report(alice, "alice"); limit(again, wire.QuotaNodesPerPrincipal).Used != 4 {
		t.Fatalf("alice naming herself: %+v", again)
	}

	// Nobody but the admin looks at another principal.
	if _, err := lcadmin.New(alice).QuotaUsage(ctx, "bob"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice asks about bob: %v, want a permission error", err)
	}
	// The admin sees bob as bob does, and who created the most.
	bobs := report(admin, "bob")
	if bobs.Principal != "bob" || bobs.Admin {
		t.Fatalf("the admin's report on bob: %+v", bobs)
	}
	want(bobs, wire.QuotaNodesPerPrincipal, 1, perPrincipalNodes, 0, false)
	want(bobs, wire.QuotaContentBytesPerPrincipal, 50, perPrincipalBytes, 0, false)
	want(bobs, wire.QuotaSessionsPerPrincipal, 2, sessionsPerPrincipal, 0, false)
	own := report(admin, "")
	if own.Principal != "admin" || !own.Admin || !limit(own, wire.QuotaNodesPerPrincipal).Exempt || limit(own, wire.QuotaSessionsPerPrincipal).Exempt {
		t.Fatalf("the admin's own report: %+v", own)
	}
	wantTop := func(what string, got []lcadmin.CreatorUsage, want ...lcadmin.CreatorUsage) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("top by %s: %+v, want %+v", what, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("top by %s: %+v, want %+v", what, got, want)
			}
		}
	}
	adminUse := lcadmin.CreatorUsage{Principal: "admin", Nodes: 3, ContentBytes: int64(len(aclText))}
	aliceUse := lcadmin.CreatorUsage{Principal: "alice", Nodes: 4, ContentBytes: 1000}
	bobUse := lcadmin.CreatorUsage{Principal: "bob", Nodes: 1, ContentBytes: 50}
	wantTop("nodes", own.TopByNodes, aliceUse, adminUse, bobUse)
	wantTop("content bytes", own.TopByContentBytes, aliceUse, bobUse, adminUse)

	// alice fills the others' part of the cell's contents: her report says
	// full, her next byte is refused; to the admin the reserve is room.
	othersPart := int64(cellBytes - bytesReserve)
	if err := aliceHandles[3].SetContents(ctx, fill(400+int(othersPart-cellUsed))); err != nil {
		t.Fatalf("alice fills the cell: %v", err)
	}
	mine = report(alice, "")
	want(mine, wire.QuotaContentBytes, othersPart, cellBytes, bytesReserve, true)
	if l := limit(mine, wire.QuotaContentBytes); l.Percent != 75 {
		t.Fatalf("a cell at %d of %d bytes is %.1f%% full", othersPart, cellBytes, l.Percent)
	}
	if _, err := bob1.Open(ctx, c.Name("pub/b2"), rwc, client.WithContents([]byte("y"))); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("bob's byte in a cell alice's report calls full: %v", err)
	}
	want(report(admin, ""), wire.QuotaContentBytes, othersPart, cellBytes, bytesReserve, false)
	mustOpen(t, ctx, admin, c.Name("acl/fix"), rwc, client.WithContents([]byte("admin\n"))).Close()
	want(report(admin, "alice"), wire.QuotaContentBytes, othersPart+6, cellBytes, bytesReserve, true)

	// A read like the others: bob's calls are paced by his read ration
	// (each costs its reply and 2 KiB), so eight of them, 20 KiB against
	// a ration of 8 KiB a second, wait out his debt.
	start := time.Now()
	for range 8 {
		report(bob1, "")
	}
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Fatalf("eight QuotaUsage calls took %v with a read ration of %d bytes a second", took, readRate)
	}
}
