package proxy_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// freezer dials the replicas for a proxy. A frozen address behaves as a
// stopped process (SIGSTOP) does to its peers: its kernel still accepts
// connections and takes their bytes, and nothing comes back, not even
// the close of a connection.
type freezer struct {
	mu     sync.Mutex
	frozen map[string]bool
}

func (f *freezer) freeze(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = map[string]bool{}
	}
	f.frozen[addr] = true
}

func (f *freezer) isFrozen(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen[addr]
}

func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if f.isFrozen(addr) {
		near, far := net.Pipe()
		go func() { // the stopped process's kernel: takes every byte
			buf := make([]byte, 32<<10)
			for {
				if _, err := far.Read(buf); err != nil {
					return
				}
			}
		}()
		return &frozenConn{Conn: near, f: f, addr: addr, closed: make(chan struct{})}, nil
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f, addr: addr, closed: make(chan struct{})}, nil
}

// frozenConn passes bytes while its address is not frozen; frozen, its
// writes vanish and its reads wait until it is closed.
type frozenConn struct {
	net.Conn
	f      *freezer
	addr   string
	once   sync.Once
	closed chan struct{}
}

func (c *frozenConn) Read(b []byte) (int, error) {
	if !c.f.isFrozen(c.addr) {
		n, err := c.Conn.Read(b)
		if !c.f.isFrozen(c.addr) {
			return n, err
		}
	}
	<-c.closed
	return 0, net.ErrClosed
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if c.f.isFrozen(c.addr) {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A master that freezes is left for its successor within the sessions'
// leases: a batch of KeepAlives the master has not answered by its
// sessions' lease end means the master is frozen or cut off though the
// connection is open, so the proxy drops it and searches the peers, as a
// client in jeopardy does. Its client keeps its session and its lock
// through the fail-over (the new master expires every session not heard
// from within a lease of taking over), and passes through jeopardy at
// most once: the proxy never answers with a lease that has ended, which
// would have the client call again at once, in a loop.
func TestProxyLeavesAFrozenMaster(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{LeaseTTL: 2 * time.Second})
	fz := &freezer{}
	ctx := ctxT(t, 90*time.Second)
	a, ev, la, st0 := holdBehindProxy(t, ctx, c, fz.dial)
	session := a.Session()
	m := c.WaitForMaster(10 * time.Second)
	fz.freeze(c.Addrs()[m])
	c.Stop(m) // deposed while frozen: the others elect a successor
	frozeAt := time.Now()
	ev.waitFor(t, client.MasterFailover, 30*time.Second)
	t.Logf("master %d frozen at T; the client heard the fail-over at T+%v", m, time.Since(frozeAt).Round(time.Millisecond))
	// Its calls work on the new master, same session, same lock.
	if err := la.SetContents(ctx, []byte("still mine")); err != nil {
		t.Fatalf("write after the fail-over: %v", err)
	}
	st, err := la.GetStat(ctx)
	if err != nil || st.LockGen != st0.LockGen || st.LockHolders != 1 {
		t.Fatalf("lock after the fail-over: %+v %v; before %+v", st, err, st0)
	}
	// Two leases more on the new master: renewed through the proxy.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond) // the time under test
	}
	if a.Session() != session || ev.has(client.Expired) {
		t.Fatalf("session %d -> %d, events %v", session, a.Session(), ev.got)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	jeopardies := 0
	for _, k := range ev.got {
		if k == client.Jeopardy {
			jeopardies++
		}
	}
	if jeopardies > 1 {
		t.Fatalf("%d jeopardies in one fail-over (want at most 1): %v", jeopardies, ev.got)
	}
}
