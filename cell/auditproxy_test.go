package cell_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// The replicated audit trail names the proxy a call came through: alice's
// session, her lock and her write through a trusted proxy are recorded
// with principal alice and proxy = the proxy's principal on every
// replica, and the admin's direct write with no proxy. Read as an operator
// reads it, over TCP with lockcell audit's call.
func TestAuditTrailNamesTheProxy(t *testing.T) {
	certs := fixtures.TestCerts(t, "alice", fixtures.ProxyPrincipal)
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second, TLS: certs,
		Configure: func(cfg *cell.Config) { cfg.ProxyPrincipals = []string{fixtures.ProxyPrincipal} }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := c.Client(t)
	rw := client.Read | client.Write
	fixtures.MustOpen(t, ctx, adm, c.Name("acl"), rw|client.Create|client.Directory).Close()
	fixtures.MustOpen(t, ctx, adm, c.Name("acl/users"), rw|client.Create, client.WithContents([]byte("alice\nadmin\n"))).Close()
	f := fixtures.MustOpen(t, ctx, adm, c.Name("f"), rw|client.Create)
	if _, err := f.SetACL(ctx, client.ACL{Read: "users", Write: "users"}); err != nil {
		t.Fatal(err)
	}

	p := fixtures.StartProxy(t, c)
	alice := c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfigAs("alice"), p))
	af := fixtures.MustOpen(t, ctx, alice, c.Name("f"), rw)
	if err := af.SetContents(ctx, []byte("through the proxy")); err != nil {
		t.Fatal(err)
	}
	if err := af.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	if err := f.SetContents(ctx, []byte("direct")); err != nil {
		t.Fatal(err)
	}

	for _, addr := range c.Addrs() {
		var recs []lcadmin.AuditRecord
		fixtures.PollUntil(t, 20*time.Second, "the direct write in "+addr+"'s trail", func() bool {
			page, err := lcadmin.ReadAudit(ctx, c.ClientConfig(), addr, lcadmin.AuditQuery{})
			if err != nil {
				t.Fatalf("audit trail of %s: %v", addr, err)
			}
			recs = page.Records
			for _, r := range recs {
				if r.Op == "write" && r.Principal == "admin" && r.Name == c.Name("f") && strings.HasPrefix(r.Detail, "6 bytes") {
					return true // the direct write ("direct")
				}
			}
			return false
		})
		seen := map[string]bool{}
		for _, r := range recs {
			switch {
			case r.Principal == "alice" && r.Session == alice.Session():
				if r.Proxy != fixtures.ProxyPrincipal {
					t.Errorf("%s: alice's %s through the proxy names proxy %q, want %q: %+v", addr, r.Op, r.Proxy, fixtures.ProxyPrincipal, r)
				}
				seen[r.Op] = true
			case r.Proxy != "":
				t.Errorf("%s: a record not made through the proxy names proxy %q: %+v", addr, r.Proxy, r)
			}
		}
		for _, op := range []string{"create_session", "write", "acquire"} {
			if !seen[op] {
				t.Errorf("%s: no %s record of alice's through the proxy in %+v", addr, op, recs)
			}
		}
	}
}
