package proxy_test

import (
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pollUntil waits for cond, failing the test after d.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session behind a proxy lives for many leases on the proxy's batched
// KeepAlives alone: the master serves no KeepAlive of its own for it, and
// the proxy makes far fewer calls than its clients' KeepAlives would be.
func TestProxyKeepsSessionsAlive(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: time.Second})
	p := fixtures.StartProxy(t, c)
	ctx := ctxT(t, 60*time.Second)
	var cls []*client.Client
	for range 5 {
		cls = append(cls, c.ClientWith(t, fixtures.ProxiedConfig(c.ClientConfig(), p)))
	}
	h, err := cls[0].Open(ctx, c.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // five leases: the time under test, not a synchronisation
	for i, cl := range cls {
		if _, err := cl.Open(ctx, c.Name("f"), client.Read); err != nil {
			t.Fatalf("client %d after five leases: %v", i, err)
		}
	}
	st := p.Stats()
	t.Logf("proxy: %+v", st)
	if st.Sessions != 5 {
		t.Fatalf("proxy keeps %d sessions, want 5", st.Sessions)
	}
}
