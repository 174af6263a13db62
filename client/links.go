package client

import (
	"context"
	"time"

	"lockcell/cache"
	"lockcell/client/internal/link"
	"lockcell/internal/testhook"
	"lockcell/wire"
)

// The admin package's and the tests' ways in, set once before main runs.
func init() {
	link.Call = func(c any, ctx context.Context, m wire.Method, mutating bool, req, resp any) error {
		return c.(*Client).call(ctx, m, mutating, req, resp)
	}
	link.CallReplica = func(ctx context.Context, cfg any, addr string, m wire.Method, req, resp any) error {
		return callReplica(ctx, cfg.(Config), addr, m, req, resp)
	}
	link.Learn = func(c any, addrs []string) { c.(*Client).addrs.learn(addrs) }
	link.Abs = func(c any, name string) string { return c.(*Client).abs(name) }
	link.Master = func(c any) string { return c.(*Client).route.masterAddr() }
	link.ReplicaAddrs = func(c any) []string { return c.(*Client).addrs.list() }
	link.CacheStats = func(c any) cache.Stats { return c.(*Client).cacheStats() }
	testhook.CallsSent = callsSent.Load
	testhook.PooledHandles = func(c any) int { return c.(*Client).pool.len() }
	testhook.ConnectTarget = func(rules, addr string) (string, error) {
		rs, err := parseConnectTo(rules)
		if err != nil {
			return "", err
		}
		return connectTarget(rs, addr), nil
	}
}

// callReplica makes one session-less call (CellStatus, AuditRead) to the
// replica at addr itself, master or not, over a connection of its own
// made as cfg says (its Dialer, TLS and DialTimeout, 2 s when unset).
func callReplica(ctx context.Context, cfg Config, addr string, method wire.Method, req, resp any) error {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	cn, err := dial(ctx, dialOptsOf(&cfg), addr, cfg.DialTimeout)
	if err != nil {
		return err
	}
	defer cn.close()
	st, err := cn.call(ctx, &wire.Header{Method: method}, req, resp)
	if err == nil {
		err = st.Err()
	}
	return err
}
