package cell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// TestIdleCloseNeverServesStaleCache: closing an idle session must not
// end the cache's promise early. Client A caches the absence of N (a
// negative Open: no handle, so A is idle), then is cut off from the cell
// (fixtures.Cutter), so no answer of the master's, the one saying A was
// closed for idleness included, can reach it, while its local lease still
// runs. Once the master has decided A is idle, B creates N; once B's
// create has completed, A's Open of N must find it, never answer
// ErrNotFound from its cache. A master that closed the session while its
// lease ran would forget A's cache registrations, so B's create would
// complete at once while A, cut off, still trusted its lease and its
// cache; here the master lets A's lease run out first, so B's create
// waits for it (A cannot acknowledge) and A's lease has ended by then.
func TestIdleCloseNeverServesStaleCache(t *testing.T) {
	// A lease long against the idle timeout: A's local lease still runs
	// when the master decides A is idle, wherever its KeepAlive was.
	const (
		idle  = 400 * time.Millisecond
		lease = 6 * time.Second
	)
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: lease, Configure: func(cfg *cell.Config) {
		cfg.SessionLimits.IdleSessionTimeout = idle
	}})
	ctx := ctxT(t, 60*time.Second)
	m := c.Server(c.WaitForMaster(10 * time.Second))
	name := c.Name("n")

	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer = cut.Dial
	a := c.ClientWith(t, cfg)
	b := c.Client(t)
	h, err := b.Open(ctx, c.Name("b-busy"), client.Read|client.Write|client.Create) // B keeps a handle: never idle
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	awaitNegativeCaching(t, a, name)
	before := m.Master().Stats()
	cut.Cut() // A hears nothing more of the master, its local lease runs on
	pollUntil(t, 10*time.Second, "the master deciding A is idle", func() bool {
		st := m.Master().Stats()
		return st.IdleClosed+st.IdleDrains > before.IdleClosed+before.IdleDrains
	})
	if hits := lcadmin.New(a).CacheStats().NegativeHits; hits == 0 {
		t.Fatal("A's absence of N was never served from its cache")
	}

	created := time.Now()
	hn, err := b.Open(ctx, name, client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatalf("B's create of N: %v", err)
	}
	hn.Close()
	t.Logf("B's create completed after %v", time.Since(created))

	// A, still cut off: whatever it answers, N exists now.
	quick, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	ha, err := a.Open(quick, name, client.Read)
	cancel()
	if errors.Is(err, client.ErrNotFound) {
		t.Fatalf("A answered ErrNotFound for N after B's create of it completed (%d negative hits): a stale cached answer",
			lcadmin.New(a).CacheStats().NegativeHits)
	}
	if err == nil {
		ha.Close()
	}
	cut.Heal()
	// Reconnected, A goes on (in a new session) and finds N.
	pollUntil(t, 30*time.Second, "A opening N", func() bool {
		ha, err := a.Open(ctx, name, client.Read)
		if errors.Is(err, client.ErrNotFound) {
			t.Fatalf("A answered ErrNotFound for N after B created it: %v", err)
		}
		if err != nil {
			return false
		}
		ha.Close()
		return true
	})
}
