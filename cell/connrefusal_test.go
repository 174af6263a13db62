package cell_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/wire"
)

// dialRefused dials with cfg and expects the replica's refusal over a cap
// on connections: the error is ErrTooManyConnections, matches ErrTooMany
// and carries CodeTooMany, and its message names the flag of the cap.
// The Dial's RetryTimeout is ten minutes and its context's 30 s, so a
// Dial that hunted for a master instead of failing at once ends with the
// context's deadline and fails the test: no timing is measured.
func dialRefused(t *testing.T, cfg client.Config, flag string) {
	t.Helper()
	cfg.RetryTimeout = 10 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, cfg)
	if err == nil {
		cl.Close()
		t.Fatalf("a Dial past the cap (%s) was admitted", flag)
	}
	switch {
	case ctx.Err() != nil || errors.Is(err, client.ErrNoMaster):
		t.Fatalf("a Dial past the cap (%s) hunted for a master instead of failing at once: %v", flag, err)
	case !errors.Is(err, client.ErrTooManyConnections) || !errors.Is(err, client.ErrTooMany) || wire.CodeOf(err) != wire.CodeTooMany:
		t.Fatalf("a Dial past the cap (%s) failed with %v (code %v), want ErrTooManyConnections matching ErrTooMany", flag, err, wire.CodeOf(err))
	case !strings.Contains(err.Error(), flag) || !strings.Contains(err.Error(), "share one Client"):
		t.Fatalf("the refusal does not name the cap %s and what to do: %v", flag, err)
	}
}

// dialOK dials with cfg and returns the Client, closed when the test ends.
func dialOK(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// stillServes makes a call on each client: the master answers it with
// the sessions the client may see, its own among them.
func stillServes(t *testing.T, cls ...*client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, cl := range cls {
		ss, err := admin.New(cl).Sessions(ctx)
		if err != nil {
			t.Fatalf("client %d no longer served: %v", i, err)
		}
		if !slices.ContainsFunc(ss, func(s admin.SessionInfo) bool { return s.ID == cl.Session() }) {
			t.Fatalf("client %d: its session %d is not among the %d listed", i, cl.Session(), len(ss))
		}
	}
}

// refusalLog counts one replica's log lines about refused connections,
// by level, and keeps the first's per_ip count.
type refusalLog struct {
	replica string // whose lines count

	mu    sync.Mutex
	lines map[slog.Level]int
	perIP int64
}

// refusalLogOf is the handler of one logger of the replicas: it knows
// which replica it logs for (the "replica" attribute cell adds).
type refusalLogOf struct {
	l       *refusalLog
	replica string
}

func (h refusalLogOf) Enabled(context.Context, slog.Level) bool { return true }
func (h refusalLogOf) WithGroup(string) slog.Handler            { return h }
func (h refusalLogOf) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "replica" {
			h.replica = a.Value.String()
		}
	}
	return h
}

func (h refusalLogOf) Handle(_ context.Context, r slog.Record) error {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.replica != l.replica || !strings.Contains(r.Message, "connections refused") {
		return nil
	}
	if l.lines == nil {
		l.lines = map[slog.Level]int{}
	}
	l.lines[r.Level]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "per_ip" && l.perIP == 0 {
			l.perIP = int64(a.Value.Uint64())
		}
		return true
	})
	return nil
}

func (l *refusalLog) counts() (info, other int, perIP int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for lv, n := range l.lines {
		if lv == slog.LevelInfo {
			info += n
		} else {
			other += n
		}
	}
	return info, other, l.perIP
}

// A client whose connection is over the replica's per-address cap is told
// so: Dial fails at once with ErrTooManyConnections naming
// --max-conns-per-ip (a plain cell: the refusal comes where yamux's first
// frame would), the clients within the cap keep being served, and a
// place given back admits the next. Three replicas, so that Dial is
// redirected from a seed to the master and refused by the master it was
// named. The refusals are logged at INFO, the first at once and the rest
// of a burst counted, not logged one by one.
func TestConnectionCapRefusalIsTypedAtOnce(t *testing.T) {
	const perIP = 2
	logs := &refusalLog{}
	c := fixtures.NewCell(t, 3, fixtures.Options{ConnLimits: cell.ConnLimits{MaxConnsPerIP: perIP}, Logger: slog.New(refusalLogOf{l: logs})})
	m := c.WaitForMaster(30 * time.Second)
	srv := c.Server(m)
	logs.mu.Lock()
	logs.replica = srv.ID()
	logs.mu.Unlock()
	base := srv.ConnStats().RefusedPerIP
	// Seeds that are not the master first: each Dial is redirected.
	cfg := c.ClientConfig()
	var seeds []string
	for i, a := range c.Addrs() {
		if i != m {
			seeds = append(seeds, a)
		}
	}
	cfg.Replicas = append(seeds, c.Addrs()[m])
	var held []*client.Client
	for range perIP {
		held = append(held, dialOK(t, cfg))
	}
	const burst = 5
	for range burst {
		dialRefused(t, cfg, "--max-conns-per-ip 2")
	}
	if d := srv.ConnStats().RefusedPerIP - base; d != burst {
		t.Fatalf("%d refusals counted, want %d", d, burst)
	}
	// The burst took well under the report interval (10 s): one line.
	if info, other, n := logs.counts(); info != 1 || other != 0 || n != 1 {
		t.Fatalf("refusals logged in %d lines at INFO and %d at other levels, the first counting %d; want one line at INFO counting the first",
			info, other, n)
	}
	stillServes(t, held...)

	// A place given back (the replica sees the close asynchronously)
	// admits the next client.
	held[0].Close()
	deadline := time.Now().Add(hostileWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cfg.RetryTimeout = 10 * time.Minute
		cl, err := client.Dial(ctx, cfg)
		cancel()
		if err == nil {
			t.Cleanup(func() { cl.Close() })
			stillServes(t, cl, held[1])
			break
		}
		if !errors.Is(err, client.ErrTooManyConnections) {
			t.Fatalf("dial after a place was given back: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed client's place was never given back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// On a TLS cell both refusals are told: the per-principal cap's after
// the handshake, over TLS, and the per-address cap's at accept, before
// any TLS work, in place of the ServerHello. Each Dial fails at once
// with ErrTooManyConnections naming its cap, and the admitted clients
// keep being served.
func TestConnectionCapRefusalIsTypedOverTLS(t *testing.T) {
	const perIP, perPrincipal = 3, 2
	certs := fixtures.TestCerts(t, "alice", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, LeaseTTL: tlsLease,
		ConnLimits: cell.ConnLimits{MaxConnsPerIP: perIP, MaxConnsPerPrincipal: perPrincipal}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	base := srv.ConnStats()
	alice, bob := c.ClientConfigAs("alice"), c.ClientConfigAs("bob")
	var held []*client.Client
	for range perPrincipal {
		held = append(held, dialOK(t, alice))
	}
	dialRefused(t, alice, `principal "alice"`)
	dialRefused(t, alice, "--max-conns-per-principal 2")
	// Another principal from the same address takes the address's last
	// place, and is then refused by the address's cap.
	held = append(held, dialOK(t, bob))
	dialRefused(t, bob, "--max-conns-per-ip 3")
	st := srv.ConnStats()
	if st.RefusedPerPrincipal-base.RefusedPerPrincipal != 2 || st.RefusedPerIP == base.RefusedPerIP {
		t.Fatalf("refusals counted: %d per principal (want 2), %d per address (want some)",
			st.RefusedPerPrincipal-base.RefusedPerPrincipal, st.RefusedPerIP-base.RefusedPerIP)
	}
	stillServes(t, held...)
}

// Clients that set ShareConnections hold one connection per replica
// between them, so a process holds more sessions than the replica's
// per-address cap on connections: ten sessions through a cap of two. A
// seed's connection, left after the redirect to the master, is closed
// once no Client uses it, each Client's Close gives its reference back
// without cutting the others, and the last closes the connection.
func TestClientsShareConnections(t *testing.T) {
	const perIP, clients = 2, 10
	c := fixtures.NewCell(t, 3, fixtures.Options{ConnLimits: cell.ConnLimits{MaxConnsPerIP: perIP}})
	m := c.WaitForMaster(30 * time.Second)
	srv := c.Server(m)
	cfg := c.ClientConfig()
	var seeds []string
	for i, a := range c.Addrs() {
		if i != m {
			seeds = append(seeds, a)
		}
	}
	cfg.Replicas = append(seeds, c.Addrs()[m])
	cfg.ShareConnections = true
	var cls []*client.Client
	for range clients {
		cls = append(cls, dialOK(t, cfg))
	}
	stillServes(t, cls...)
	if n := srv.ConnStats().Conns; n != 1 {
		t.Fatalf("the master holds %d connections of %d sharing clients, want 1", n, clients)
	}
	waitConns := func(i, want int) {
		t.Helper()
		deadline := time.Now().Add(hostileWait)
		for c.Server(i).ConnStats().Conns != want {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d holds %d connections, want %d", i, c.Server(i).ConnStats().Conns, want)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
	}
	for i := range c.Addrs() {
		if i != m {
			waitConns(i, 0) // the seeds' connections went with their last Client
		}
	}
	for _, cl := range cls[:clients-1] {
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	stillServes(t, cls[clients-1])
	if n := srv.ConnStats().Conns; n != 1 {
		t.Fatalf("the master holds %d connections, want the last Client's 1", n)
	}
	cls[clients-1].Close()
	waitConns(m, 0)
}
